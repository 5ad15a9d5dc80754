"""Every `inspect` text report fits the terminal: with COLUMNS=80 no line is longer than 80 and
none ends in a blank (real targets under real debugpy, gdb for --snapshot, torchrun for
--all-ranks); the least essential columns are left out and the report says which; `--wide`
shows them all."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, Result, marker_line, run_inspect
from .test_snapshot import TRAIN, skip_without_ptrace, start  # noqa: F401 -- the snapshot fixtures

pytestmark = pytest.mark.timeout(400)

TARGET = """\
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("encoder_with_a_long_name", torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.Sigmoid(), torch.nn.Linear(64, 64), torch.nn.Sigmoid()))
    model.add_module("head", torch.nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    history = []
    for step in range(6):
        x = torch.randn(128, 64)
        out = model(x)
        loss = out.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        history.append(out[:1].detach().clone())
        kept = model(x).sum()  # a graph kept to the next stop
        view = x.t()[1:]
        print(step)  # inspect here
"""


def run(*args: str, tmp_path: Path, columns: str = "80", timeout: float = 240) -> Result:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path / "tmp"),
           "COLUMNS": columns}
    return run_inspect(args, env, timeout)


def assert_fits(out: str, width: int = 80) -> None:
    assert out.strip(), "no report"
    long = [(len(line), line) for line in out.splitlines() if len(line) > width]
    assert not long, long
    trailing = [line for line in out.splitlines() if line != line.rstrip()]
    assert not trailing, trailing


def test_every_report_of_a_stop_fits_80_columns(tmp_path: Path) -> None:
    p = tmp_path / "train.py"
    p.write_text(__import__("textwrap").dedent(TARGET))
    where = f"{p}:{marker_line(p)}:step >= 2"
    kinds = ("--expr", "view", "--frame", "--memory", "--grads", "--graph", "kept", "--diff-steps", "2",
             "--cuda-summary")
    res = run("--launch", str(p), "--break", where, *kinds, "--kill", tmp_path=tmp_path)
    assert res.rc == 0, res.err
    assert_fits(res.out)
    for title in ("Tensors in this frame", "Live tensors per device", "Largest storages", "Gradient health",
                  "Step diff", "What keeps them", "Memory explained"):
        assert title in res.out, title
    assert "(left out to fit 80 columns: " in res.out and "--wide shows them)" in res.out
    # Wrapped findings keep their indent: a bullet's next line starts under its text.
    lines = res.out.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith(("  ⚠ ", "  • ")) and lines[i + 1].startswith("    ") and not lines[i + 1].startswith(" " * 5):
            assert lines[i + 1][4] != " "
    # Unknown width (no COLUMNS, not a terminal): 80 as well, not 132.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    res = run_inspect(("--launch", str(p), "--break", where, "--frame", "--grads", "--kill"), env, 240)
    assert res.rc == 0, res.err
    assert_fits(res.out)
    # --wide: every column, and no trailing blanks either.
    res = run("--launch", str(p), "--break", where, "--frame", "--grads", "--wide", "--kill", tmp_path=tmp_path)
    assert res.rc == 0, res.err
    assert "left out to fit" not in res.out
    header = next(line for line in res.out.splitlines() if "grad/weight" in line).split()
    assert {"NaN", "Inf", "zeros", "#"} <= set(header), header
    assert "offset" in res.out and "contig." in res.out
    assert all(line == line.rstrip() for line in res.out.splitlines())


def test_explain_errors_fits_80_columns(tmp_path: Path) -> None:
    script = REPO / "tests" / "fixtures" / "explain_errors" / "view_transposed.py"
    res = run("--launch", str(script), "--explain-errors", "--kill", tmp_path=tmp_path)
    assert "view" in res.out, res.err
    assert_fits(res.out)


def test_snapshots_fit_80_columns(start: Any, tmp_path: Path) -> None:  # noqa: F811 -- the imported fixture
    proc = start(TRAIN)
    res = run("--pid", str(proc.pid), "--snapshot", "--every", "1", "--count", "2", tmp_path=tmp_path)
    skip_without_ptrace(res)
    assert res.rc == 0, res.err
    assert_fits(res.out)


def test_all_ranks_fits_80_columns(tmp_path: Path) -> None:
    train = REPO / "tests" / "fixtures" / "all_ranks" / "ddp_train.py"
    res = run("--all-ranks", "--launch", "--break", f"{train}:{marker_line(train)}", "--samples", "2", "--kill",
              "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(train),
              "--leak-rank", "1", "--steps", "4", tmp_path=tmp_path)
    assert res.rc == 0, res.err
    assert "rank" in res.out
    assert_fits(res.out)
