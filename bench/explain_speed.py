"""How long the static analysis takes: each example and a generated 3,000-line model file,
cold (a fresh process: torch not yet imported) and warm (same process, again), with the
share of the time spent replaying ops on meta tensors (exact run vs symbolic-only run).

    .venv/bin/python bench/explain_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from generate_model import generate_model_source  # noqa: E402

from stridelens.server.analysis import analyze_source  # noqa: E402

COLD = """
import sys, time
start = time.perf_counter()
from stridelens.server.analysis import analyze_file
analyze_file(sys.argv[1])
print(time.perf_counter() - start)
"""


def best_of(fn: Any, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="stridelens-bench-"))
    model = workdir / "generated_model.py"
    model.write_text(generate_model_source(3000))
    files = [*sorted((ROOT / "examples").glob("*.py")), model]
    print(f"{'file':32} {'lines':>6} {'cold s':>8} {'warm ms':>9} {'symbolic ms':>12} {'replay share':>13}")
    warm_total = sym_total = 0.0
    for path in files:
        text = path.read_text()
        cold = float(subprocess.run([sys.executable, "-c", COLD, str(path)], capture_output=True, text=True, check=True).stdout)
        analyze_source(text, str(path))  # warm torch and the op caches
        warm = best_of(lambda text=text, path=path: analyze_source(text, str(path)))
        symbolic = best_of(lambda text=text, path=path: analyze_source(text, str(path), replay=False))
        warm_total += warm
        sym_total += symbolic
        share = max(0.0, (warm - symbolic) / warm) if warm else 0.0
        print(f"{path.name:32} {len(text.splitlines()):>6} {cold:>8.2f} {warm * 1000:>9.1f} {symbolic * 1000:>12.1f} {share:>12.0%}")
    import ast

    text = model.read_text()
    parse = best_of(lambda: ast.parse(text))
    exact = best_of(lambda: analyze_source(text))
    print()
    print(f"generated model: ast.parse {parse * 1000:.1f} ms; exact analysis {exact * 1000:.1f} ms "
          f"({exact / parse:.1f}x parse); symbolic {best_of(lambda: analyze_source(text, replay=False)) * 1000:.1f} ms")
    print(f"all files: warm {warm_total * 1000:.1f} ms, symbolic {sym_total * 1000:.1f} ms, "
          f"replay share {statistics.fmean([max(0.0, 1 - sym_total / warm_total)]):.0%}")
    explain_cli(workdir)
    return 0


def explain_cli(workdir: Path) -> None:
    """`stridelens explain` as a user runs it (a fresh process), on a position inside a function
    of unknown inputs, in a file that also has literal-size code at module level (the case that
    imported torch for every position), against the bare interpreter start (`python -c pass`)
    and a literal-size position of the same file (torch imported, replayed)."""
    path = workdir / "mixed.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\ntable = torch.zeros(4, 8)\nflipped = table.t()\n\n\n"
        "class Attention(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.qkv = nn.Linear(dim, dim * 3)\n\n    def forward(self, x):\n        B, N, C = x.shape\n"
        "        qkv = self.qkv(x).reshape(B, N, 3, 8, C // 8).permute(2, 0, 3, 1, 4)\n        return qkv\n"
    )

    def wall(*args: str) -> tuple[float, str]:
        best, err = float("inf"), ""
        for _ in range(3):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True)
            best = min(best, time.perf_counter() - start)
            err = done.stderr.strip()
        return best, err

    bare, _ = wall("-c", "pass")
    symbolic, said = wall("-m", "stridelens", "explain", "--verbose", f"{path}:15:9")
    exact, said_exact = wall("-m", "stridelens", "explain", "--verbose", f"{path}:5:1")
    print()
    print(f"explain CLI, symbolic position: {symbolic:.2f} s wall ({symbolic / bare:.1f}x a bare `python -c pass`, "
          f"{bare * 1000:.0f} ms); {said.rsplit(': ', 1)[-1]}")
    print(f"explain CLI, literal-size position: {exact:.2f} s wall ({exact / symbolic:.1f}x the symbolic one); "
          f"{said_exact.rsplit(': ', 1)[-1]}")


if __name__ == "__main__":
    raise SystemExit(main())
