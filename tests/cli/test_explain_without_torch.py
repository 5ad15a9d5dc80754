"""`explain` imports torch only where replaying ops on meta tensors can change its answer.

The symbolic pass marks the storages whose sizes a replay would know; a position whose code
(its function's body, or the module's own statements) touches none gets the symbolic answer.
That answer must be the one the exact pass gives: checked at every assigned name of the
real-code oracle's files and the bundled examples."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.cli.explain_command import explain_position
from tests.realcode.driver import SOURCES, probes_of

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*SOURCES.glob("*.py"), *(ROOT / "examples").glob("*.py")])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_answer_without_replay_is_the_exact_one(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    exact = analyze_source(source, str(path), replay=True)
    cache: dict = {}
    lines = source.splitlines()
    differ = []
    for probe in probes_of(source):
        col = len(lines[probe.line - 1].encode("utf-8")[: probe.col].decode("utf-8")) + 1
        spec = f"{path}:{probe.line}:{col}"
        got = explain_position(spec, cache)
        want = exact.explain_at(probe.line, col - 1)
        got_answer = got.answer() if got is not None else None
        want_answer = want.answer() if want is not None else None
        if got_answer != want_answer:
            differ.append(f"{path.name}:{probe.line} `{probe.name}`: {got_answer} != {want_answer}")
    assert differ == []


SYMBOLIC = textwrap.dedent(
    """\
    import torch
    from torch import nn

    table = torch.zeros(4, 8)
    flipped = table.t()


    class Attention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.qkv = nn.Linear(dim, dim * 3)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, 8, C // 8).permute(2, 0, 3, 1, 4)
            return qkv
    """
)

RUN = """
import sys
from stridelens.server.cli import main
code = main(["explain", "--verbose", *sys.argv[1:]])
print("torch imported:", "torch" in sys.modules)
raise SystemExit(code)
"""


def _explain(path: Path, *positions: str) -> subprocess.CompletedProcess[str]:
    specs = [f"{path}:{p}" for p in positions]
    return subprocess.run([sys.executable, "-c", RUN, *specs], capture_output=True, text=True, timeout=120)


def test_a_symbolic_position_is_answered_without_importing_torch(tmp_path: Path) -> None:
    path = tmp_path / "attention.py"
    path.write_text(SYMBOLIC)
    result = _explain(path, "15:9")
    assert result.returncode == 0, result.stderr
    assert "permute(2, 0, 3, 1, 4)" in result.stdout
    assert "torch imported: False" in result.stdout
    assert "symbolic analysis only (torch not imported)" in result.stderr


def test_a_literal_size_position_replays_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "attention.py"
    path.write_text(SYMBOLIC)
    result = _explain(path, "5:1")
    assert result.returncode == 0, result.stderr
    assert "strides (1, 8)" in result.stdout
    assert "torch imported: True" in result.stdout
    assert "replayed on meta tensors (torch imported)" in result.stderr
