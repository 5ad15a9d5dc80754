"""`stridelens explain` as a user runs it: the real console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "examples" / "layout_basics.py"


def explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stridelens", "explain", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def line_of(path: Path, start: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(start))


def test_json_for_several_positions_in_order(tmp_path: Path) -> None:
    b_line = line_of(LAYOUT, "b = ")
    t_line = line_of(LAYOUT, "tT = ")
    literal = LAYOUT.read_text().splitlines()[b_line - 1].index("1:") + 1  # the `1` literal
    result = explain(
        f"{LAYOUT}:{b_line}:1", f"{LAYOUT}:{b_line}:{literal}", f"{LAYOUT}:{t_line}:1", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    b, one, t = json.loads(result.stdout)
    a = torch.arange(12.0).reshape(3, 4)
    real_b = a[1:, 1:3]
    assert b["shape"] == list(real_b.shape) and b["strides"] == list(real_b.stride())
    assert b["storage_offset"] == real_b.storage_offset() == 5
    assert b["contiguous"] is False and b["view_of"] == "a" and b["is_view"] is True
    assert one is None  # an int literal: nothing to explain
    assert t["strides"] == list(torch.randn(4, 6).T.stride())
    assert set(b) == {
        "expr", "shape", "dtype", "device", "strides", "storage_offset", "contiguous",
        "is_view", "view_of", "requires_grad", "notes",
    }


def test_text_card_draws_the_storage_window() -> None:
    b_line = line_of(LAYOUT, "b = ")
    result = explain(f"{LAYOUT}:{b_line}:1")
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    top = next(i for i, row in enumerate(rows) if row.strip().startswith("storage 12 × float32"))
    assert "in rows of 4" in rows[top]
    # `b = a[1:, 1:3]`: storage cells 5, 6, 9, 10 read as elements 0..3, row by row.
    cells = " ".join(rows[top + 1 : top + 4]).split()
    assert [(i, c) for i, c in enumerate(cells) if c != "·"] == [(5, "0"), (6, "1"), (9, "2"), (10, "3")]
    assert rows[top + 4].strip().startswith("offset 5, strides (4, 1)")


def test_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    binary = tmp_path / "latin1.py"
    binary.write_bytes(b"x = '\xe9'\n")
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nx = torch.zeros(2,\ny = 1\n")
    cases = {
        str(tmp_path / "missing.py") + ":1:1": "no such file",
        f"{binary}:1:1": "not valid UTF-8",
        f"{LAYOUT}:999:1": "past the end of the file",
        f"{LAYOUT}:1:400": "past the end of line 1",
        f"{broken}:2:1": "syntax error",
        "nonsense": "expected FILE:LINE:COL",
    }
    for position, message in cases.items():
        result = explain(position, "--format", "json")
        assert result.returncode == 2, position
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (position, result.stderr)
        assert "Traceback" not in result.stderr


def test_assumes_come_in_the_same_order_in_every_process(tmp_path: Path) -> None:
    """Two `H % …` conditions on one tensor: their order once followed the set's iteration,
    which changes with the per-process string hash seed, so `explain`, `check` and the editor
    could word the same fact differently."""
    source = tmp_path / "patches.py"
    source.write_text(
        "def patches(images, patch, merge):\n"
        "    B, C, H, W = images.shape\n"
        "    gh, gw = H // patch, W // patch\n"
        # The -1: torch's element count check no longer proves the divisions exact.
        "    p = images.reshape(B, C, gh // merge, merge, patch, -1)\n"
        "    return p\n"
    )
    seen = set()
    for seed in ("1", "2", "3", "4", "5", "6"):
        result = subprocess.run(
            [sys.executable, "-m", "stridelens", "explain", f"{source}:4:5", "--format", "json"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert result.returncode == 0, result.stderr
        assumes = json.loads(result.stdout)["assumes"]
        assert {"H % patch == 0", "H % (patch * merge) == 0"} <= set(assumes)
        seen.add(tuple(assumes))
    assert len(seen) == 1, seen


# --------------------------------------------------------------------------- notebooks


def _explain_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stridelens", "explain", *args], cwd=folder, capture_output=True, text=True, timeout=300
    )


def test_a_notebook_position_names_its_cell_as_check_prints_it(tmp_path: Path) -> None:
    from tests.cli.test_check_notebooks import make_notebook

    make_notebook(tmp_path / "nb.ipynb")
    # Cell 3 line 4 is `xt = x.transpose(0, 1)`: x came from cell 2; the magics before it are skipped.
    proc = _explain_in(tmp_path, "--format", "json", "nb.ipynb:cell 3:4:1")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["expr"] == "xt" and answer["shape"] == [3, 2, 4] and answer["contiguous"] is False
    # Two positions in one notebook, and a plain-text answer.
    proc = _explain_in(tmp_path, "nb.ipynb:cell 2:2:1", "nb.ipynb:cell 5:2:1")
    assert proc.returncode == 0, proc.stderr
    assert "nb.ipynb:cell 2:2:1  `x`" in proc.stdout and "nb.ipynb:cell 5:2:1  `y`" in proc.stdout


def test_a_notebook_position_without_a_cell_is_refused(tmp_path: Path) -> None:
    from tests.cli.test_check_notebooks import make_notebook

    make_notebook(tmp_path / "nb.ipynb")
    proc = _explain_in(tmp_path, "nb.ipynb:2:1")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "names its cell, as check prints it: nb.ipynb:cell N:LINE:COL" in proc.stderr
    for spec, words in (
        ("nb.ipynb:cell 1:1:1", "cell 1 is not a code cell"),
        ("nb.ipynb:cell 2:9:1", "line 9 is past the end of cell 2 (2 lines)"),
        ("nb.ipynb:cell 99:1:1", "cell 99 is not a code cell"),
    ):
        proc = _explain_in(tmp_path, spec)
        assert proc.returncode == 2 and words in proc.stderr, (spec, proc.stderr)
