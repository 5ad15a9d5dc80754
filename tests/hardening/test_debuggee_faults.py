"""Dying, stuck and crowded debuggees: `stridelens inspect` ends with one clear message.

Real debugpy targets on loopback (fixtures from tests/inspector/conftest.py). A target can
kill itself at a chosen moment: a watcher thread that pydevd does not trace (so a pause does
not stop it) SIGKILLs the process when a debug client connects, or once the probe has been
injected. After each fault: the CLI exits != 0 with one line and no traceback, and a target
that is still alive keeps running (its heartbeat file keeps changing).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.inspector.conftest import free_port

pytestmark = pytest.mark.timeout(150)

# {port}, {when}: "connect" | "probe"; {after}: seconds after that moment.
SUICIDAL = """
    import os, pathlib, signal, sys, threading, time
    import debugpy, torch
    debugpy.listen(("127.0.0.1", {port}))
    tensors = [torch.empty(1) for _ in range({tensors})]
    t = torch.arange(10.0)

    def watch():
        while True:
            if {when!r} == "connect" and debugpy.is_client_connected():
                break
            if {when!r} == "probe" and "_stridelens_probe" in sys.modules:
                break
            time.sleep(0.002)
        time.sleep({after})
        os.kill(os.getpid(), signal.SIGKILL)

    w = threading.Thread(target=watch, daemon=True)
    w.is_pydev_daemon_thread = True  # pydevd neither traces nor suspends it
    w.start()
    pathlib.Path("ready").write_text("1")
    while True:
        time.sleep(0.01)
"""

ALIVE = """
    import pathlib, sys, threading, time
    import debugpy, torch
    debugpy.listen(("127.0.0.1", {port}))
    t = torch.arange(10.0)
    keep = t[2:5]
    beat = pathlib.Path("beat")
    def worker(i):
        while True:
            time.sleep(0.05)
    for i in range({threads}):
        threading.Thread(target=worker, args=(i,), daemon=True, name=f"w{{i}}").start()
    pathlib.Path("ready").write_text("1")
    n = 0
    while True:
        n += 1
        beat.write_text(str(n))
        {busy}
        time.sleep(0.01)
"""


def one_clear_line(err: str) -> None:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and "stridelens inspect:" in ln]
    assert len(lines) == 1, err


def beating(tmp_path: Path, wait: float = 3.0) -> bool:
    beat = tmp_path / "beat"
    first = beat.read_text() if beat.exists() else ""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if beat.exists() and beat.read_text() != first:
            return True
    return False


@pytest.mark.parametrize(
    ("when", "after", "args", "tensors"),
    [
        ("connect", 0.0, ["--memory"], 1),  # during attach
        ("probe", 0.3, ["--expr", "__import__('time').sleep(10) or t"], 1),  # during an evaluate
        ("probe", 0.2, ["--memory"], 300_000),  # during the process report's walk
    ],
    ids=["attach", "evaluate", "process-report"],
)
def test_target_killed(when: str, after: float, args: list[str], tensors: int, target: Any,
                       inspect_cli: Any, tmp_path: Path) -> None:  # fmt: skip
    port = free_port()
    proc = target(SUICIDAL.format(port=port, when=when, after=after, tensors=tensors),
                  ready_file=tmp_path / "ready", timeout=120)  # fmt: skip
    r = inspect_cli("--connect", f"127.0.0.1:{port}", *args, "--timeout", "20", timeout=90)
    assert proc.wait(timeout=30) != 0  # it did die
    assert r.rc == 1, (r.rc, r.out, r.err)
    one_clear_line(r.err)
    assert any(w in r.err for w in ("exited", "gone", "closed", "lost", "not answer", "failed")), r.err


def test_gil_held_in_c_code_times_out(target: Any, inspect_cli: Any, tmp_path: Path) -> None:
    """`sum(range(...))` loops in C holding the GIL: pydevd's threads cannot run, no pause."""
    port = free_port()
    busy = "if n == 20: sum(range(10**12))"
    proc = target(ALIVE.format(port=port, threads=0, busy=busy), ready_file=tmp_path / "ready")
    time.sleep(0.5)  # n reaches 20 after ~0.2 s: the loop has started
    started = time.monotonic()
    r = inspect_cli("--connect", f"127.0.0.1:{port}", "--memory", "--timeout", "4", timeout=60)
    assert r.rc == 1, (r.out, r.err)
    one_clear_line(r.err)
    assert "GIL" in r.err and "did not answer" in r.err, r.err
    assert time.monotonic() - started < 30
    assert proc.poll() is None  # still summing, untouched


def test_two_hundred_threads(target: Any, inspect_cli: Any, tmp_path: Path) -> None:
    port = free_port()
    proc = target(ALIVE.format(port=port, threads=220, busy="pass"), ready_file=tmp_path / "ready")
    r = inspect_cli("--connect", f"127.0.0.1:{port}", "--pause", "--expr", "keep", "--memory",
                    "--format", "json", "--timeout", "60", timeout=120)  # fmt: skip
    assert r.rc == 0, (r.err, r.json().get("expressions"), r.json().get("stop"))
    rep = r.json()
    assert rep["expressions"][0]["result"]["storage_offset"] == 2
    assert rep["stop"]["function"] == "<module>"
    assert proc.poll() is None and beating(tmp_path)


def test_port_taken_by_something_else(inspect_cli: Any) -> None:
    """A loopback port held by a server that is not debugpy: silent, or answering garbage."""
    for reply in (b"", b"HTTP/1.1 400 Bad Request\r\n\r\n", b"Content-Length: 3\r\n\r\n{{{"):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        conns: list[socket.socket] = []

        def serve(srv: socket.socket = srv, reply: bytes = reply, conns: list[socket.socket] = conns) -> None:
            try:
                while True:
                    conn, _ = srv.accept()
                    conns.append(conn)
                    if reply:
                        conn.sendall(reply)
            except OSError:
                return

        threading.Thread(target=serve, daemon=True).start()
        try:
            r = inspect_cli("--connect", f"127.0.0.1:{port}", "--memory", "--timeout", "3", timeout=60)
        finally:
            srv.close()
            for conn in conns:
                conn.close()
        assert r.rc == 1, (reply, r.err)
        one_clear_line(r.err)


def test_second_session_is_told_already_attached(target: Any, inspect_cli: Any, tmp_path: Path) -> None:
    """Regression: the second client waited the whole --timeout for an `initialized` event that
    never comes, then said "debug session failed to start"; debugpy answers its attach at once."""
    from stridelens.inspector.session import Session

    port = free_port()
    proc = target(ALIVE.format(port=port, threads=2, busy="pass"), ready_file=tmp_path / "ready")
    first = Session(timeout=30)
    try:
        first.connect("127.0.0.1", port)
        first.handshake([])
        first.pause()
        started = time.monotonic()
        r = inspect_cli("--connect", f"127.0.0.1:{port}", "--memory", "--timeout", "30", timeout=60)
        assert r.rc == 1 and "already attached" in r.err, r.err
        one_clear_line(r.err)
        assert time.monotonic() - started < 20  # answered, not timed out
        first.ensure_probe()
        assert first.describe("keep")["storage_offset"] == 2  # the first session is unharmed
        first.finish()
    finally:
        first.close()
    assert proc.poll() is None and beating(tmp_path)
    # Once the first has left, a new session works.
    r = inspect_cli("--connect", f"127.0.0.1:{port}", "--expr", "keep", "--format", "json", timeout=90)
    assert r.rc == 0, r.err
    assert beating(tmp_path)
