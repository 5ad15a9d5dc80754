"""Coverage-guided fuzzing of the analysis engine and rules with atheris (libFuzzer), by hand.

Not collected by pytest and not a dependency. To run it (atheris kept out of the venv):

    .venv/bin/pip install --target /tmp/atheris_pkgs atheris
    PYTHONPATH=/tmp/atheris_pkgs .venv/bin/python tests/hardening/atheris_engine.py \\
        -max_total_time=120 -rss_limit_mb=4096 -timeout=30 [CORPUS_DIR]

Seeds: the examples and the rule fixtures (written to a temporary corpus directory when none
is given). Each input is decoded as UTF-8 (with replacement), then analysed symbolically and
with meta replay, rules run, and every safe fix applied. A failure is any exception escaping
(the engine promises never to raise on bad input), a finding or fix outside the document, a
fix that breaks a file that parsed, or one analysis overrunning its budget by more than 5 s.
Add `-only_ascii=1` to stay in ASCII; `-dict=` is not needed (seeds carry the tokens).
"""

from __future__ import annotations

import ast
import sys
import tempfile
import time
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from stridelens.server.analysis import analyze_source
    from stridelens.server.rules import run_rules
    from stridelens.server.rules.fixes import apply_fixes, parses

ROOT = Path(__file__).resolve().parents[2]
BUDGET_STEPS = 10_000
SLOW_S = 30.0  # an analysis this long within its budget is a bug (a statement doing unbounded work)


def check(data: bytes) -> None:
    source = data.decode("utf-8", "replace")
    lines = source.split("\n")
    parsed = parses(source)
    for replay in (False, True):
        started = time.monotonic()
        analysis = analyze_source(source, "<fuzz>", replay=replay, budget_steps=BUDGET_STEPS)
        took = time.monotonic() - started
        if took > SLOW_S:
            raise AssertionError(f"analysis took {took:.1f} s (budget {BUDGET_STEPS} statements)")
        findings = run_rules(analysis, select=["ALL"])  # every rule, those off by default too
        for f in findings:
            if not (1 <= f.line <= f.end_line <= len(analysis.lines) + 1):
                raise AssertionError(f"{f.code} at lines {f.line}-{f.end_line} of {len(lines)}")
        result = apply_fixes(source, findings)
        if parsed and result.applied and not parses(result.source):
            raise AssertionError(f"fixes {[f.code for f in result.applied]} broke the file")
    if parsed:
        ast.parse(source)  # sanity: parses() and ast agree


def seeds() -> str:
    corpus = Path(tempfile.mkdtemp(prefix="stridelens-atheris-"))
    files = sorted((ROOT / "examples").rglob("*.py")) + sorted((ROOT / "tests" / "fixtures" / "rules").glob("*.py"))
    for i, path in enumerate(files):
        (corpus / f"seed{i:03d}").write_bytes(path.read_bytes())
    return str(corpus)


def main() -> None:
    args = list(sys.argv)
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(seeds())
    atheris.Setup(args, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
