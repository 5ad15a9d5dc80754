"""The generated documentation: the CLI reference from the argparse parsers, the rule pages from
the rules' docs (stridelens.server.cli.reference, through docs/hooks.py), and the site's strict
build (what `make docs` and CI run)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from stridelens import i18n
from stridelens.server.cli import reference
from stridelens.server.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _english_after() -> object:
    yield None
    i18n.set_language("en")


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stridelens_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_option_of_every_command_has_a_help_text() -> None:
    assert reference.undocumented_options() == []


def test_the_cli_reference_has_every_command_and_option() -> None:
    text = reference.cli_reference()
    _, commands = reference.parsers()
    assert [name for name, _ in commands] == ["explain", "serve", "check", "rule", "record", "inspect"]
    for name, parser in commands:
        assert f"## `stridelens {name}`\n" in text
        assert parser.description and parser.description.split(".")[0].replace("|", "") in text.replace("\\|", "|")
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                assert option in text, (name, option)
    check = text[text.index("## `stridelens check`") : text.index("## `stridelens rule`")]
    assert "| `--format {text,json,sarif}` | text for people; json" in check
    assert "usage: stridelens check [-h]" in check


def test_the_cli_reference_follows_the_language() -> None:
    with reference.language("zh-CN"):
        chinese = reference.cli_reference()
    assert "用法：stridelens check" in chinese and "| 选项 | 含义 |" in chinese
    assert i18n.language() == "en"  # put back
    assert "usage: stridelens check" in reference.cli_reference()


def test_rule_pages_and_tables_come_from_the_rules() -> None:
    pages = reference.rule_pages()
    assert sorted(pages) == sorted(ALL_RULES)
    for code, rule in ALL_RULES.items():
        assert pages[code].startswith(f"# {code} {rule.name}\n")
        assert "## What it does" in pages[code] and "## Fix" in pages[code]
    table = reference.rule_table()
    assert "| [SL101](SL101.md) | view-noncontiguous |" in table
    assert table.count("\n") == len(ALL_RULES) + 2
    summary = reference.rule_summary()
    assert "| SL204 | data-attr |" in summary and summary.count("| off |") == sum(not r.default for r in ALL_RULES.values())


def test_update_summary_needs_its_markers() -> None:
    text = f"a\n{reference.SUMMARY_START}\nold\n{reference.SUMMARY_END}\nb\n"
    assert reference.update_summary(text) == f"a\n{reference.SUMMARY_START}\n{reference.rule_summary()}{reference.SUMMARY_END}\nb\n"
    with pytest.raises(ValueError):
        reference.update_summary("no markers")


def test_the_hooks_fill_the_markers_and_plain_the_links_outside_the_docs() -> None:
    module = hooks()
    filled = module.MARKER.sub(lambda m: module._generated(m.group(1)), "x\n<!-- generated: rule-table -->\n")
    assert "| [SL213](SL213.md) | inplace-on-saved |" in filled
    docs = ROOT / "docs"
    text = "[demo](../examples/demo.py) [a page](check.md) [gone](../no-such-file.py) [web](https://example.org/x)"
    assert module._repository_links(text, docs) == "demo [a page](check.md) [gone](../no-such-file.py) [web](https://example.org/x)"
    zh = module._zh_readme()
    assert "](../index.md)" in zh and "](../glossary.zh-CN.md)" in zh and "](docs/" not in zh
    assert "](../../vscode-client/README.md)" in zh
    rules = module._zh_rules()
    assert "{#SL101}" in rules and "| [SL101](#SL101) |" in rules
    assert "\n### 示例\n" in rules and "\n## 示例\n" not in rules  # the rule docs' headings one level down


@pytest.mark.timeout(120)
def test_the_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=110, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    assert "generated: cli" not in cli and "--unsafe-fixes" in cli
    assert all((site / "rules" / f"{code}.html").is_file() for code in ALL_RULES)
    zh = (site / "zh-CN" / "index.html").read_text(encoding="utf-8")
    assert "两条命令" in zh and "SL101" in zh
    assert "用法：stridelens check" in (site / "zh-CN" / "cli.html").read_text(encoding="utf-8")
