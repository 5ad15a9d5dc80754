"""The rule tables are generated from the rules' metadata: README's short one must be current
(the docs' full table and rule pages are generated when the site is built, tests/docs)."""

from __future__ import annotations

from pathlib import Path

from stridelens.server.rules import ALL_RULES
from stridelens.server.rules.catalogue import END, START, markdown_table, update_readme

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_rule_table_is_current() -> None:
    from stridelens.server.cli.reference import rule_summary, update_summary

    text = README.read_text(encoding="utf-8")
    assert update_summary(text) == text, "run: python -m stridelens.server.cli.reference --write README.md"
    for code, rule in ALL_RULES.items():
        assert f"| {code} | {rule.name} |" in text
    assert rule_summary().count("\n") == len(ALL_RULES) + 2
    # The full table (severity, precision, quick fix) is the docs' and README.zh-CN.md's.
    assert "| SL101 | view-noncontiguous |" in update_readme(f"{START}\n{END}")


def test_table_lists_every_rule() -> None:
    table = markdown_table()
    for code in ALL_RULES:
        assert f"| {code} |" in table
    assert START != END


def test_every_rule_is_documented() -> None:
    for rule in ALL_RULES.values():
        assert rule.doc.what and rule.doc.why and rule.doc.example and rule.doc.fix
        assert rule.code.startswith("SL") and rule.name == rule.name.lower()


# ---------------------------------------------------------------- rules off by default (issue 30)
ROOT = README.parent
AUDIT = ROOT / "bench" / "audits" / "fresh-audit-2026-12-03.md"
SAMPLE = ROOT / "tests" / "fixtures" / "default_selection.py"


def _audit_rows() -> dict[str, tuple[int, int, int]]:
    """The fresh audit's per-rule table: code -> (TP, FP, unsure)."""
    rows = {}
    section = AUDIT.read_text(encoding="utf-8").split("## Per rule", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("SL"):
            rows[cells[0]] = (int(cells[2]), int(cells[3]), int(cells[4]))
    return rows


def _later_audit_rows(audit: Path) -> dict[str, tuple[int, int, int]]:
    """A later fresh audit's table of the rules that were on by default: code -> (TP, FP, unsure)."""
    rows = {}
    section = audit.read_text(encoding="utf-8").split("## Per rule", 1)[1].split("Off by default", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9 and cells[0].startswith("SL") and " " not in cells[0]:
            rows[cells[0]] = (int(cells[3]), int(cells[4]), int(cells[5]))
    return rows


def test_off_by_default_is_what_the_fresh_audit_measured_below_09() -> None:
    from stridelens.server.rules import (
        ALWAYS_REPORTED,
        FRESH_AUDIT_2026_12_03,
        FRESH_AUDIT_2026_12_07F,
        OFF_BY_DEFAULT,
    )

    rows = _audit_rows()
    assert len(rows) == 14 and sum(tp + fp + unsure for tp, fp, unsure in rows.values()) == 148
    below = {code for code, (tp, fp, _) in rows.items() if tp / (tp + fp) < 0.9}
    assert below == {"SL104", "SL105", "SL201", "SL202", "SL204", "SL205", "SL206", "SL210", "SL211", "SL217"}
    # A rule still on after 12-03 goes off when a later fresh audit measures it below 0.9.
    later = _later_audit_rows(ROOT / FRESH_AUDIT_2026_12_07F)
    assert set(later) == {"SL102", "SL103", "SL216", "SL218"}, later
    below_later = {code for code, (tp, fp, _) in later.items() if tp / (tp + fp) < 0.9}
    assert below_later == {"SL216"}
    assert set(OFF_BY_DEFAULT) == below | below_later
    assert (ROOT / FRESH_AUDIT_2026_12_03) == AUDIT and AUDIT.is_file()
    for code, rule in ALL_RULES.items():
        if code in OFF_BY_DEFAULT:
            audit, (tp, fp, _) = (FRESH_AUDIT_2026_12_07F, later[code]) if code in below_later else (FRESH_AUDIT_2026_12_03, rows[code])
            assert not rule.default and rule.measured_in == audit
            assert rule.precision is not None and rule.precision.startswith(f"{tp / (tp + fp):.2f} ({tp}/{tp + fp}")
        else:
            assert rule.default and rule.precision is None and rule.measured_in is None, code
    assert not ALWAYS_REPORTED & set(OFF_BY_DEFAULT)


def test_selection_default_codes_prefixes_and_all() -> None:
    from stridelens.server.rules import OFF_BY_DEFAULT, default_rules, selected_rules

    def codes(*args: list[str] | None) -> set[str]:
        return {r.code for r in selected_rules(*args)}

    on = set(ALL_RULES) - set(OFF_BY_DEFAULT)
    assert codes() == codes(None) == codes([]) == {r.code for r in default_rules()} == on
    assert codes(["SL204"]) == {"SL204"}
    assert codes(["SL20"]) == {c for c in ALL_RULES if c.startswith("SL20")}  # off ones included
    assert codes(["ALL"]) == codes(["all"]) == codes(["SL"]) == set(ALL_RULES)
    assert codes(["ALL"], ["SL2"]) == {c for c in ALL_RULES if not c.startswith("SL2")}
    assert codes(None, ["SL102"]) == on - {"SL102"}


def test_run_rules_default_leaves_off_by_default_rules_out() -> None:
    from stridelens.server.analysis import analyze_file
    from stridelens.server.rules import run_rules

    analysis = analyze_file(str(SAMPLE))
    assert [(f.code, f.line) for f in run_rules(analysis)] == [("SL102", 9)]
    assert [(f.code, f.line) for f in run_rules(analysis, select=["SL204"])] == [("SL204", 19)]
    assert [(f.code, f.line) for f in run_rules(analysis, select=["ALL"])] == [("SL102", 9), ("SL204", 19)]


def test_rule_doc_and_table_say_off_by_default() -> None:
    from stridelens.server.rules.catalogue import render_rule

    doc = render_rule(ALL_RULES["SL206"])
    assert "Off by default (precision 0.79 (27/34) on fresh real code, bench/audits/fresh-audit-2026-12-03.md" in doc
    assert "`--select SL206`" in doc and "`SL2`" in doc and 'select = ["SL206"]' in doc
    assert "Off by default" not in render_rule(ALL_RULES["SL102"])
    table = markdown_table()
    assert "| severity | default | quick fix |" in table
    row = {line.split(" | ")[0][2:]: line for line in table.splitlines()[2:]}
    assert "| warning | off: precision 0.32 (14/44) |" in row["SL204"]
    assert "| information | on |" in row["SL102"]
    assert "| error | always |" in row["SL001"]


def test_project_and_server_settings_share_the_selection() -> None:
    from stridelens.server.config import parse_config
    from stridelens.server.lsp.configuration import Settings, merge_settings

    assert parse_config({"tool": {"stridelens": {"select": ["ALL"]}}}, "p").select == ["SL"]
    assert Settings().select == ()  # the default selection
    settings, problems = merge_settings(Settings(), {"select": ["all", "SL204"]}, "init")
    assert not problems and settings.select == ("ALL", "SL204")
    base = Settings(select=("SL204",))  # pyproject's select
    assert merge_settings(base, {"select": []}, "client")[0].select == ("SL204",)  # [] keeps it
    assert merge_settings(base, {"select": ["SL1"]}, "client")[0].select == ("SL1",)
