"""Fixture-driven rule tests: `tests/fixtures/rules/<rule>_*.py` declare their expected
findings inline (`# expect: SL201`, several codes for several findings on one line); the
`.in.py` / `.out.py` pairs hold a file before and after its fixes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from stridelens.server.analysis import analyze_file
from stridelens.server.rules import ALL_RULES, run_rules
from stridelens.server.rules.fixes import apply_fixes, parses

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rules"
EXPECT = re.compile(r"#\s*expect:\s*((?:SL\d{3}\s*)+)")

CASES = sorted(p for p in FIXTURES.glob("sl*.py") if not p.name.endswith((".in.py", ".out.py")))
FIX_CASES = sorted(FIXTURES.glob("*.in.py"))


def expected(path: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            out.extend((number, code) for code in match.group(1).split())
    return sorted(out)


def code_of(path: Path) -> str:
    return path.name[:5].upper()


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_fixture_findings(path: Path) -> None:
    code = code_of(path)
    assert code in ALL_RULES
    analysis = analyze_file(str(path))
    found = sorted((f.line, f.code) for f in run_rules(analysis, select=[code]))
    assert found == expected(path)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_fixture_other_rules_columns_are_sane(path: Path) -> None:
    analysis = analyze_file(str(path))
    for f in run_rules(analysis, select=["ALL"]):  # every rule, those off by default too
        text = analysis.lines[f.line - 1]
        assert 1 <= f.col <= len(text) + 1
        assert (f.end_line, f.end_col) >= (f.line, f.col)
        if f.fix is not None:
            fixed = apply_fixes(analysis.source, [f], unsafe=True)
            assert parses(fixed.source)


def test_every_rule_has_a_fixture() -> None:
    covered = {code_of(p) for p in CASES}
    assert covered == set(ALL_RULES)


@pytest.mark.parametrize("path", FIX_CASES, ids=lambda p: p.name)
def test_fix_pairs(path: Path) -> None:
    out_path = path.with_name(path.name.replace(".in.py", ".out.py"))
    analysis = analyze_file(str(path))
    code = code_of(path)
    findings = run_rules(analysis, select=[code])
    assert findings, "the .in.py file should have findings to fix"
    result = apply_fixes(analysis.source, findings, unsafe=True)
    assert result.source == out_path.read_text(encoding="utf-8")
    ast.parse(result.source)


def test_fixed_outputs_run() -> None:
    """Every `.out.py` runs for real (one interpreter for all: torch is imported once)."""
    import subprocess
    import sys

    outs = [str(p.with_name(p.name.replace(".in.py", ".out.py"))) for p in FIX_CASES]
    script = (
        "import runpy, sys, traceback\n"
        "bad = []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        "    except Exception:\n"
        "        bad.append(path + ': ' + traceback.format_exc(limit=1))\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, *outs], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sl104_says_whether_it_is_a_view_or_the_same_tensor() -> None:
    analysis = analyze_file(str(FIXTURES / "sl104_write_view.py"))
    messages = {f.line: f.message for f in run_rules(analysis, select=["SL104"])}
    assert "`row`, a view of `x`" in messages[7]
    assert "`queries`, the same tensor as `point_embeddings`" in messages[43]
