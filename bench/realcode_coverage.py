"""How much `stridelens explain` states on released PyTorch code, and whether it is right.

Runs the verbatim files of tests/realcode/sources/ for real (tiny inputs, see
tests/realcode/driver.py), asks the engine about every assigned name, and prints, per file and
in total, for each JSON field how many (probe, run) tensor observations the engine states it
for, then every wrong fact (a stated fact that a real run contradicts).

    .venv/bin/python bench/realcode_coverage.py [--json]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realcode import compare  # noqa: E402


def main(argv: list[str]) -> int:
    start = time.perf_counter()
    reports = compare.all_reports()
    wrong = compare.wrong_facts_summary(reports)
    if "--json" in argv:
        rows = [{"file": name, **cells} for name, cells in compare.coverage_rows(reports)]
        print(json.dumps({"coverage": rows, "wrong": wrong}, indent=2))
        return 0
    print(compare.coverage_table(reports))
    print()
    print(f"wrong facts: {len(wrong)}")
    for line in wrong:
        print(f"  {line}")
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
