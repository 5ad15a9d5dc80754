"""`make demo`: three screens in order (explain card, a finding with its fix, a leak report),
each short, with no warnings; the `# explain` marker is a comment, never docstring text."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCREEN_LINES = 45


def _demo_module():  # examples/ is not a package: load the script as a module
    spec = importlib.util.spec_from_file_location("stridelens_demo", ROOT / "examples" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_prints_three_short_screens_in_order_without_warnings() -> None:
    proc = subprocess.run(
        [sys.executable, "examples/demo.py"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "warning" not in out.lower(), out
    sections = out.split("\n$ stridelens ")[1:]
    commands = [s.splitlines()[0] for s in sections]
    assert [c.split()[0] for c in commands] == ["explain", "check", "check", "inspect"], commands
    explain, finding, diff, leak = sections
    assert "shape           (B, self.n_head, T, C // self.n_head)" in explain
    assert "SL101" in finding and "= fix: Replace `.view(` with `.reshape(`" in finding
    assert "+fails = xt.reshape(-1)" in diff
    assert "graph_kept_alive" in leak and "losses" in leak
    for section in sections:
        assert len(section.splitlines()) <= SCREEN_LINES, section


def test_explain_marker_inside_a_docstring_is_not_a_marker(tmp_path: Path, monkeypatch) -> None:
    demo = _demo_module()
    source = tmp_path / "sample.py"
    source.write_text('"""Run explain on lines marked\nx = 1  # explain: inside the docstring\n"""\n\ny = 2  # explain: real\n')
    monkeypatch.chdir(tmp_path)
    assert demo.explain_positions(source) == ["sample.py:5:1"]
