"""Where `explain` states nothing on the real-code oracle: the probes that miss a field, by
how many tensor observations they cost, with the source line and the engine's reason.

    .venv/bin/python bench/realcode_gaps.py [FIELD] [--top N] [--file NAME]

FIELD is one of the explain JSON fields (default: dtype). The counts are the same
observations bench/realcode_coverage.py reports; a probe whose every run is a tensor and
that misses FIELD costs its number of runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realcode import compare  # noqa: E402
from tests.realcode.driver import FILES  # noqa: E402


def main(argv: list[str]) -> int:
    field = next((a for a in argv if a in compare.FIELDS), "dtype")
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 40
    only = argv[argv.index("--file") + 1] if "--file" in argv else None
    rows: list[tuple[int, str, int, str, str, str]] = []
    for name in FILES:
        if only and name != only:
            continue
        answers = compare.engine_answers(name)
        run = compare.real_run(name)
        lines = run.source.splitlines()
        for probe in run.probes:
            cost = sum(r.tensor is not None for r in run.runs[probe])
            answer = answers.get(probe)
            if not cost or (answer and answer.get(field) is not None):
                continue
            reason = str((answer or {}).get("reason") or ("nothing known" if not answer else "other fields only"))
            rows.append((cost, name, probe.line, probe.name, lines[probe.line - 1].strip()[:90], reason[:70]))
    rows.sort(key=lambda r: -r[0])
    print(f"{field}: {sum(r[0] for r in rows)} observations missing, {len(rows)} probes")
    for cost, name, line, probe_name, text, reason in rows[:top]:
        print(f"{cost:5d}  {name}:{line} `{probe_name}`  {text}\n       {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
