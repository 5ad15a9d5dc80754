"""`stridelens check` on a 200-cell notebook against the same code as one `.py` file.

    python bench/notebook_check.py [--cells 200] [--repeat 3]

The code is bench/generate_model.py's realistic model file, split at its top-level
statements into about `--cells` code cells (with a markdown cell and an IPython line every few
cells, as notebooks have). Both are checked in-process, best of `--repeat`, and the ratio
notebook / .py is printed (the goal is under 2x). Findings must be the same, cell for line.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat import v4

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate_model import generate_model_source

from stridelens.server.cli.check_command import Settings, check_file


def split_cells(source: str, cells: int) -> list[str]:
    tree = ast.parse(source)
    lines = source.splitlines()
    starts = [node.lineno - 1 for node in tree.body]
    per_cell = max(1, len(starts) // cells)
    chunks = []
    for i in range(0, len(starts), per_cell):
        end = starts[i + per_cell] if i + per_cell < len(starts) else len(lines)
        chunks.append("\n".join(lines[starts[i] : end]).rstrip())
    return chunks


def best(path: str, settings: Settings, repeat: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = check_file(path, settings)
        times.append(time.perf_counter() - start)
        assert result.error is None, result.error
        count = len(result.findings)
    return min(times), count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    # Enough top-level statements for one per cell (the generator gives ~6 per 100 lines).
    source = generate_model_source(max(3000, args.cells * 17))
    chunks = split_cells(source, args.cells)
    nb = v4.new_notebook()
    for i, chunk in enumerate(chunks):
        if i % 10 == 0:
            nb.cells.append(v4.new_markdown_cell(f"## Part {i // 10}"))
        nb.cells.append(v4.new_code_cell(chunk))
        if i % 25 == 0:
            nb.cells.append(v4.new_code_cell("%timeit -n1 pass"))
    settings = Settings(select=None, ignore=(), severity=(), keep_source=False)
    with tempfile.TemporaryDirectory() as folder:
        py = Path(folder) / "model.py"
        py.write_text(source)
        ipynb = Path(folder) / "model.ipynb"
        nbformat.write(nb, str(ipynb))
        check_file(str(py), settings)  # warm-up: torch's import is no file's cost
        py_s, py_found = best(str(py), settings, args.repeat)
        nb_s, nb_found = best(str(ipynb), settings, args.repeat)
    code_cells = sum(1 for c in nb.cells if c.cell_type == "code")
    print(f"{'input':<28} {'lines':>6} {'cells':>6} {'seconds':>8} {'findings':>9}")
    print(f"{'model.py':<28} {len(source.splitlines()):>6} {'-':>6} {py_s:>8.3f} {py_found:>9}")
    print(f"{'model.ipynb':<28} {len(source.splitlines()):>6} {code_cells:>6} {nb_s:>8.3f} {nb_found:>9}")
    print(f"notebook / .py: {nb_s / py_s:.2f}x (goal < 2x)")
    return 0 if py_found == nb_found else 1


if __name__ == "__main__":
    raise SystemExit(main())
