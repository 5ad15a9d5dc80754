"""`inspect --pid PID --snapshot`: real CPU training loops snapshotted through gdb.

Each target reports on itself into a JSON file every few steps (its tracer, thread trace hook,
threads, modules, main-module globals), so the tests read what the snapshot left behind from
inside the target, after it ran.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.inspector.conftest import Result, run_inspect

pytestmark = pytest.mark.skipif(shutil.which("gdb") is None,
                                reason="gdb is not installed: --snapshot on Python < 3.14 needs it")

SELF_REPORT = """
    import json, os, sys, threading
    def self_report(path, **extra):
        state = {"gettrace": repr(sys.gettrace()), "thread_trace": repr(threading._trace_hook),
                 "threads": threading.active_count(), "native_threads": len(sys._current_frames()),
                 "modules": sorted(sys.modules), "main_globals": sorted(globals()), **extra}
        with open(path + ".part", "w") as f:
            json.dump(state, f)
        os.replace(path + ".part", path)
"""



def program(body: str) -> str:
    """A target: the self-report helper, then `body` (each dedented on its own)."""
    return textwrap.dedent(SELF_REPORT) + textwrap.dedent(body)


TRAIN = program("""
    import time, torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    history = []  # the leak: one 64 KiB tensor kept per step
    step = 0
    while True:
        x = torch.randn(16, 32)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(torch.randn(16384))
        step += 1
        if step % 5 == 0:
            self_report("state.json", step=step)
        time.sleep(0.01)
""")


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    """`stridelens inspect` in its own session, with its own TMPDIR (the private dirs land there)."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        (tmp_path / "tmp").mkdir(exist_ok=True)
        full = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "COLUMNS": "200", **(env or {})}
        return run_inspect(args, full, timeout)

    return run


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    """Start a target (own process group) running `source`; killed with its group afterwards."""
    procs: list[subprocess.Popen[bytes]] = []

    def go(source: str, argv: list[str] | None = None, wait_state: bool = True) -> subprocess.Popen[bytes]:
        script = tmp_path / f"target{len(procs)}.py"
        script.write_text(textwrap.dedent(source))
        log = open(tmp_path / f"target{len(procs)}.log", "wb")  # noqa: SIM115 -- closed with the process
        proc = subprocess.Popen(argv or [sys.executable, str(script)], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
        log.close()
        procs.append(proc)
        if wait_state:
            state_after(tmp_path, proc, after=-1)
        return proc

    yield go
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def state_after(tmp_path: Path, proc: subprocess.Popen[bytes], after: float, timeout: float = 90) -> dict[str, Any]:
    """The target's next self-report written after `after` (a time.time())."""
    path = tmp_path / "state.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("target exited: " + "".join(p.read_text() for p in tmp_path.glob("target*.log")))
        with contextlib.suppress(FileNotFoundError, ValueError):
            if path.stat().st_mtime > after:
                return dict(json.loads(path.read_text()))
        time.sleep(0.05)
    raise AssertionError("the target wrote no self-report")


def skip_without_ptrace(r: Result) -> None:
    if r.rc != 0 and "ptrace is not permitted" in r.err and "already traced" not in r.err:
        pytest.skip(f"ptrace is not permitted on this machine: {r.err.strip()[-200:]}")


def assert_untouched(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert after["gettrace"] == "None" and after["thread_trace"] == "None"
    assert after["threads"] == before["threads"] and after["native_threads"] == before["native_threads"]
    assert set(after["modules"]) == set(before["modules"]), set(after["modules"]) ^ set(before["modules"])
    assert after["main_globals"] == before["main_globals"]


def test_snapshot_names_the_growing_list_and_leaves_nothing(start: Any, cli: Any, tmp_path: Path) -> None:
    proc = start(TRAIN)
    before = state_after(tmp_path, proc, after=time.time())
    r = cli("--pid", str(proc.pid), "--snapshot", "--format", "json")
    skip_without_ptrace(r)
    assert r.rc == 0, r.err
    rep = r.json()
    assert rep["target"]["pid"] == proc.pid and rep["target"]["torch"]
    names = [n for g in rep["memory"]["top"] for n in g["names"]]
    assert any(n.startswith("history[") for n in names), names
    assert rep["memory"]["tensor_count"] >= before["step"]
    t = rep["snapshot"]
    assert t["method"] == "gdb" and 0 < t["report_s"] <= t["main_thread_stopped_s"]
    after = state_after(tmp_path, proc, after=time.time())
    assert after["step"] > before["step"]
    assert_untouched(before, after)
    assert "_stridelens_probe" not in after["modules"]
    assert list((tmp_path / "tmp").iterdir()) == []  # the private directory is gone

    text = cli("--pid", str(proc.pid), "--snapshot", "--top", "3")
    assert text.rc == 0, text.err
    assert "through gdb" in text.out and "main thread stopped" in text.out and "history[" in text.out


def test_periodic_snapshots_name_what_grew(start: Any, cli: Any, tmp_path: Path) -> None:
    proc = start(TRAIN)
    before = state_after(tmp_path, proc, after=time.time())
    r = cli("--pid", str(proc.pid), "--snapshot", "--every", "1.5", "--count", "3", "--format", "json")
    skip_without_ptrace(r)
    assert r.rc == 0, r.err
    shots = r.json()["snapshots"]
    assert len(shots) == 3 and "grew" not in shots[0]
    grew = shots[-1]["grew"]
    assert grew and grew[0]["holder"] == "history" and grew[0]["kind"] == "container", grew
    assert grew[0]["storages_now"] > grew[0]["storages_first"]
    assert shots[-1]["tensors"] > shots[0]["tensors"]
    assert_untouched(before, state_after(tmp_path, proc, after=time.time()))

    text = cli("--pid", str(proc.pid), "--snapshot", "--every", "1", "--count", "2")
    assert text.rc == 0, text.err
    assert "Grew from the first to the last snapshot, by owner" in text.out and "history" in text.out


# ---------------------------------------------------------------- errors leave the target as it was


def test_target_without_torch(start: Any, cli: Any, tmp_path: Path) -> None:
    proc = start(program("""
        import time
        step = 0
        while True:
            step += 1
            self_report("state.json", step=step)
            time.sleep(0.05)
    """))
    before = state_after(tmp_path, proc, after=time.time())
    r = cli("--pid", str(proc.pid), "--snapshot")
    skip_without_ptrace(r)
    assert r.rc == 1 and "has not imported torch" in r.err and "Traceback" not in r.err, r.err
    assert_untouched(before, state_after(tmp_path, proc, after=time.time()))


def test_target_that_is_not_python(start: Any, cli: Any) -> None:
    proc = start("", argv=["sleep", "60"], wait_state=False)
    time.sleep(0.2)
    r = cli("--pid", str(proc.pid), "--snapshot")
    skip_without_ptrace(r)
    assert r.rc == 1 and f"PID {proc.pid} is not a Python process" in r.err, r.err
    assert proc.poll() is None


def test_no_gdb_on_path(start: Any, cli: Any, tmp_path: Path) -> None:
    proc = start(TRAIN)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    r = cli("--pid", str(proc.pid), "--snapshot", env={"PATH": str(empty)})
    assert r.rc == 1 and "--snapshot needs gdb on PATH" in r.err, r.err


def test_ptrace_refused_when_already_traced(start: Any, cli: Any, tmp_path: Path) -> None:
    # PTRACE_TRACEME makes pytest its tracer: a second tracer (gdb) gets EPERM, as with
    # ptrace_scope or a missing CAP_SYS_PTRACE.
    proc = start(TRAIN.replace("import time, torch", "import ctypes, time, torch\n"
                               "ctypes.CDLL(None, use_errno=True).ptrace(0, 0, 0, 0)"))
    before = state_after(tmp_path, proc, after=time.time())
    r = cli("--pid", str(proc.pid), "--snapshot")
    assert r.rc == 1 and "ptrace is not permitted" in r.err and "already traced" in r.err, r.err
    assert_untouched(before, state_after(tmp_path, proc, after=time.time()))


def test_gil_held_in_c_past_the_timeout(start: Any, cli: Any, tmp_path: Path) -> None:
    # PyDLL keeps the GIL across the call: the main thread sits in C for 8 s.
    proc = start(program("""
        import ctypes, time, torch
        keep = torch.zeros(1000)
        self_report("state.json", phase="before")
        time.sleep(0.5)
        ctypes.PyDLL(None).sleep(8)
        while True:
            self_report("state.json", phase="after")
            time.sleep(0.05)
    """))
    before = state_after(tmp_path, proc, after=0)
    assert before["phase"] == "before"
    time.sleep(1)
    t0 = time.monotonic()
    r = cli("--pid", str(proc.pid), "--snapshot", "--timeout", "2")
    skip_without_ptrace(r)
    assert r.rc == 1 and "did not reach Python code within 2 s" in r.err, r.err
    assert time.monotonic() - t0 < 8
    after = state_after(tmp_path, proc, after=time.time(), timeout=30)
    while after["phase"] != "after":
        after = state_after(tmp_path, proc, after=time.time(), timeout=30)
    time.sleep(0.3)  # the queued call has run by now (it found no boot file and did nothing)
    after = state_after(tmp_path, proc, after=time.time())
    assert_untouched(before, after)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_usage_errors(cli: Any) -> None:
    r = cli("--pid", "1", "--snapshot", "--every", "2")
    assert r.rc == 2 and "--every S and --count N go together" in r.err
    r = cli("--pid", "1", "--snapshot", "--expr", "x")
    assert r.rc == 2 and "drop --expr" in r.err
    r = cli("--launch", "x.py", "--break", "x.py:1", "--every", "2", "--count", "2")
    assert r.rc == 2


def test_refuses_while_the_main_thread_imports(start: Any, cli: Any, tmp_path: Path) -> None:
    (tmp_path / "slowmod.py").write_text(textwrap.dedent("""
        import os, time
        while not os.path.exists("go"):  # an import that takes its time, as torch's does
            time.sleep(0.01)
    """))
    proc = start(program("""
        import sys, time, torch
        sys.path.insert(0, ".")
        keep = torch.zeros(10)
        self_report("state.json", phase="before")
        import slowmod
        while True:
            self_report("state.json", phase="after")
            time.sleep(0.05)
    """))
    before = state_after(tmp_path, proc, after=0)
    r = cli("--pid", str(proc.pid), "--snapshot")
    skip_without_ptrace(r)
    assert r.rc == 1 and "the main thread is importing modules" in r.err, r.err
    (tmp_path / "go").write_text("")
    after = state_after(tmp_path, proc, after=time.time())
    assert after["phase"] == "after"
    before["modules"].append("slowmod")
    before["main_globals"] = sorted([*before["main_globals"], "slowmod"])
    assert_untouched(before, after)
