"""The README's rule table is generated from the rules' metadata and must be current."""

from __future__ import annotations

from pathlib import Path

from stridelens.server.rules import ALL_RULES
from stridelens.server.rules.catalogue import END, START, markdown_table, update_readme

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_rule_table_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert update_readme(text) == text, "run: python -m stridelens.server.rules.catalogue --write README.md"


def test_table_lists_every_rule() -> None:
    table = markdown_table()
    for code in ALL_RULES:
        assert f"| {code} |" in table
    assert START != END


def test_every_rule_is_documented() -> None:
    for rule in ALL_RULES.values():
        assert rule.doc.what and rule.doc.why and rule.doc.example and rule.doc.fix
        assert rule.code.startswith("SL") and rule.name == rule.name.lower()
