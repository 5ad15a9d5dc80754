"""Wall time of `stridelens inspect --all-ranks --launch` for 1, 2, 4 and 8 ranks (CPU, gloo).

Each run: torchrun --nproc-per-node N tests/fixtures/all_ranks/ddp_train.py under the inspector,
stopped at the training loop's breakpoint, every rank's frame and memory read, then detached
(the job runs its 2 steps to the end). Printed per N: the whole command, the inspector's own
phases (attach = connect + configure every rank; stop; report = probe + memory + frame on every
rank), the sum of the per-rank report times (what one-after-another would cost), and ratios to
1 rank measured in the same run.

    .venv/bin/python bench/all_ranks.py [--ranks 1 2 4 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "tests" / "fixtures" / "all_ranks" / "ddp_train.py"


def line() -> int:
    return next(i for i, t in enumerate(TRAIN.read_text().splitlines(), 1) if "# inspect here" in t)


def run(n: int) -> dict[str, float]:
    cmd = [sys.executable, "-c", "from stridelens.server.cli import main; raise SystemExit(main())",
           "inspect", "--all-ranks", "--launch", "--break", f"{TRAIN}:{line()}", "--format", "json",
           "--timeout", "300", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           str(TRAIN), "--steps", "2"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{n} ranks failed ({out.returncode}): {out.stderr[-2000:]}")
    rep = json.loads(out.stdout)
    ok = sum(r["status"] == "ok" for r in rep["ranks"])
    assert ok == n, rep["ranks"]
    ph = rep["phase_seconds"]
    return {"wall": wall, "to_report": rep["seconds"], "attach": ph.get("attach", 0.0), "stop": ph.get("stop", 0.0),
            "report": ph.get("report", 0.0), "detach": ph.get("detach", 0.0),
            "report_serial": sum(r["seconds"].get("report", 0.0) for r in rep["ranks"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    ns = ap.parse_args()
    counts = sorted(set([1, *ns.ranks]))
    rows = {n: run(n) for n in counts}
    base = rows[1]
    print(f"{'ranks':>5} {'command s':>10} {'x1':>5} {'report s':>9} {'x1':>5} {'serial sum s':>13} "
          f"{'parallel gain':>14} {'attach s':>9} {'stop s':>7}")
    for n, r in rows.items():
        print(f"{n:>5} {r['wall']:>10.1f} {r['wall'] / base['wall']:>5.2f} {r['report']:>9.2f} "
              f"{r['report'] / base['report']:>5.2f} {r['report_serial']:>13.2f} "
              f"{r['report_serial'] / r['report']:>14.2f} {r['attach']:>9.2f} {r['stop']:>7.2f}")


if __name__ == "__main__":
    main()
