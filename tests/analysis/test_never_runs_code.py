"""Analysing a file never executes it: no file written, no command run, no hang."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HOSTILE = """
import os, subprocess, torch
open({marker!r}, "w").write("ran")
os.system("touch " + {marker2!r})
subprocess.run(["touch", {marker2!r}])
exec("open({marker!r}, 'w')")
__import__("os").system("touch " + {marker2!r})

class Evil:
    def __init__(self):
        open({marker!r}, "w")
    def __call__(self, x):
        open({marker!r}, "w")

evil = Evil()
x = torch.randn(10**10**10)
y = evil(torch.zeros(3))
z = torch.load({marker!r})
w = torch.zeros(2, 3).view(6)
"""

AUDIT = """
import sys
allowed = {path!r}
def hook(event, args):
    if event in ("os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"):
        raise SystemExit("ran a command: " + event)
    if event == "open" and isinstance(args[0], str) and args[0].startswith({tmp!r}) and args[0] != allowed:
        raise SystemExit("opened " + args[0])
sys.addaudithook(hook)
from stridelens.server.cli import main
sys.exit(main(["explain", "--format", "json"] + [allowed + ":" + p for p in {positions!r}]))
"""


def test_explain_does_not_run_the_file(tmp_path: Path) -> None:
    marker, marker2 = tmp_path / "marker", tmp_path / "marker2"
    target = tmp_path / "hostile.py"
    text = textwrap.dedent(HOSTILE.format(marker=str(marker), marker2=str(marker2)))
    target.write_text(text)
    lines = text.splitlines()
    positions = [f"{i}:1" for i, line in enumerate(lines, 1) if line.startswith(("y =", "w ="))]
    runner = AUDIT.format(path=str(target), tmp=str(tmp_path), positions=positions)
    result = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists() and not marker2.exists()
    assert '"shape": [\n      6\n    ]' in result.stdout  # the analysis did its job
