"""Fixtures for the inspector's end-to-end tests: real debugpy, real torch, loopback only."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "runtime"


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def marker_line(path: Path, marker: str = "# inspect here") -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not in {path}")


def run_inspect(args: tuple[str, ...], env: dict[str, str], timeout: float) -> Result:
    """`stridelens inspect ARGS` as a subprocess that never hangs the suite."""
    cmd = [sys.executable, "-c", "from stridelens.server.cli import main; raise SystemExit(main())",
           "inspect", *args]
    # Own session: if the CLI hangs, the whole group (CLI, debuggee, adapter) is killed.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"inspect {args} hung; stderr: {err[-2000:]}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the CLI left behind in its group
    return Result(proc.returncode, out, err)


@pytest.fixture
def inspect_cli(tmp_path: Path) -> Any:
    """Run `stridelens inspect ...` as a subprocess; never hangs the suite."""

    def run(*args: str, timeout: float = 120) -> Result:
        env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "200"}
        return run_inspect(args, env, timeout)

    return run


@pytest.fixture
def script(tmp_path: Path) -> Any:
    def write(name: str, source: str) -> Path:
        p = tmp_path / name
        p.write_text(textwrap.dedent(source))
        return p

    return write


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Any]:
    """Start a long-running Python target (own process group); always killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(source: str, ready_file: Path | None = None, timeout: float = 60) -> subprocess.Popen[bytes]:
        p = tmp_path / f"target{len(procs)}.py"
        p.write_text(textwrap.dedent(source))
        log = open(tmp_path / f"target{len(procs)}.log", "wb")  # noqa: SIM115 -- closed with the process
        proc = subprocess.Popen([sys.executable, str(p)], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
        log.close()
        procs.append(proc)
        if ready_file is not None:
            deadline = time.monotonic() + timeout
            while not ready_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((tmp_path / f"target{len(procs) - 1}.log").read_text())
                time.sleep(0.05)
        return proc

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the target and the debugpy adapter it spawned
        proc.wait(timeout=10)
