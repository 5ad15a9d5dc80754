"""`inspect --pid PID --snapshot`: a process report from a live target, with no debugger left in it.

How one snapshot runs:
1. A private directory (mkdtemp: 0700) gets the boot file (`snapshot_boot`: the probe's source
   and the call that writes the report).
2. The addresses of Py_AddPendingCall, PyRun_SimpleString and mmap come from the ELF dynamic
   symbol tables of the mapped libpython (or executable) and libc (`snapshot_elf`), read before
   anything attaches: a process without them is not Python and is never touched. gdb then
   attaches reading no symbols (torch's libraries, or libpython's DWARF, would cost seconds of
   stopped target), maps one page with `mmap`, writes the entry statement into it through
   ptrace (no `malloc` in the target: another thread may hold its lock), and queues
   `PyRun_SimpleString(page)` with `Py_AddPendingCall`, then detaches. The target is stopped
   for that much only (measured: `ptrace_stop_s`, its /proc state polled while gdb runs).
   On Python >= 3.14, the target's own interpreter runs `sys.remote_exec(pid, entry file)`
   instead: the same entry statement, with no gdb at all.
3. The main thread runs the pending call at its next safe point (between two bytecodes, holding
   the GIL), so the report walks a consistent heap while the main thread waits; other threads
   keep running whenever the walk releases the GIL.
4. We wait for the 0600 report file, read it, and delete the directory. When it does not come
   within the timeout (the main thread is in C code: a long kernel, a blocking call holding the
   GIL), the directory goes first: the queued call then finds no boot file and does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stridelens.i18n import tr
from stridelens.inspector import snapshot_boot, snapshot_elf
from stridelens.inspector.session import InspectError
from stridelens.inspector.target_text import from_target

GDB_TIMEOUT = 30.0  # attach + one call; seconds only when the symbols of libpython are large
PAGE = 4096

# gdb runs this with Python; it prints one STRIDELENS line that we parse.
_GDB_SCRIPT = r'''
import time
import gdb
t0 = time.perf_counter()

def say(what, detail=""):
    print("STRIDELENS " + what + " " + detail.replace("\n", " "), flush=True)

def call(expr):
    return int(gdb.parse_and_eval(expr))

def queue():
    if gdb.selected_inferior().pid == 0:
        return say("attach-failed")
    entry = open(ENTRY_FILE, "rb").read() + b"\0"
    page = call("((void *(*)(void *, unsigned long, int, int, int, long))%d)(0, %d, 3, 34, -1, 0)"
                % (ADDR["mmap"], PAGE))
    if page in (-1, 0) or page == (1 << 64) - 1:
        return say("mmap-failed")
    gdb.selected_inferior().write_memory(page, entry)
    rc = call("((int (*)(void *, void *))%d)((void *)%d, (void *)%d)"
              % (ADDR["Py_AddPendingCall"], ADDR["PyRun_SimpleString"], page))
    say("queued" if rc == 0 else "queue-full", "%.6f" % (time.perf_counter() - t0))

try:
    queue()
except gdb.error as e:
    say("gdb-error", str(e))
if gdb.selected_inferior().pid:
    gdb.execute("detach", to_string=True)
'''


@dataclass
class Snapshot:
    """One report read from the target, and what it cost the target."""

    report: dict[str, Any]
    target: dict[str, Any]
    method: str  # "gdb" or "sys.remote_exec"
    inject_s: float  # wall time of the injector (gdb's own start-up included)
    ptrace_stop_s: float  # the target seen in ptrace stop (/proc state 't'), all threads
    wait_s: float  # from queueing to the main thread starting the report
    report_s: float  # the main thread ran the report (holding the GIL, except where torch releases it)
    report_cpu_s: float  # the main thread's CPU time in it (report_s less time the machine gave others)
    notes: list[str] = field(default_factory=list)

    def timing(self) -> dict[str, Any]:
        return {"method": self.method, "injector_s": round(self.inject_s, 4),
                "ptrace_stop_s": round(self.ptrace_stop_s, 4),
                "wait_for_safe_point_s": round(self.wait_s, 4), "report_s": round(self.report_s, 4),
                "report_cpu_s": round(self.report_cpu_s, 4),
                "main_thread_stopped_s": round(self.report_s + self.ptrace_stop_s, 4)}


class _StopWatch:
    """Polls /proc/PID/stat while gdb runs: how long the target sat in ptrace stop."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/stat"
        self.first: float | None = None
        self.last: float | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.done.is_set():
            try:
                state = Path(self.path).read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                return
            now = time.perf_counter()
            if state == "t":
                self.first = self.first if self.first is not None else now
                self.last = now
            self.done.wait(0.002)

    def __enter__(self) -> _StopWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def seconds(self) -> float:
        # Seen stopped from `first` to `last`, give or take one poll interval.
        return 0.0 if self.first is None or self.last is None else self.last - self.first + 0.002


def _python_version_of(pid: int) -> tuple[int, int] | None:
    """The target's CPython version from its mapped libpython or its executable's name."""
    names = []
    with contextlib.suppress(OSError):
        names.append(os.path.basename(os.readlink(f"/proc/{pid}/exe")))
    with contextlib.suppress(OSError):
        names.extend(line.rsplit("/", 1)[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                     if "libpython" in line)
    for n in names:
        m = re.match(r"(?:lib)?python(\d)\.(\d+)", n)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def _check_target(pid: int) -> None:
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        raise InspectError(tr("no process with PID {pid}").format(pid=pid))
    if pid == os.getpid():
        raise InspectError(tr("--snapshot of this stridelens process itself"))
    # The target opens the boot file by our path: it must see our file system (no container).
    with contextlib.suppress(OSError):
        if os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
            raise InspectError(tr("PID {pid} runs in another mount namespace (a container?): it would not "
                                  "see the snapshot's files; run stridelens inside it").format(pid=pid))


def _tracer_of(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


def _ptrace_hint(pid: int) -> str:
    tracer = _tracer_of(pid)
    if tracer:
        return tr("PID {pid} is already traced by PID {tracer} (a debugger, strace, or a PTRACE_TRACEME "
                  "parent); a process has one tracer at a time").format(pid=pid, tracer=tracer)
    scope = None
    with contextlib.suppress(OSError, ValueError):
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    parts = []
    if scope is not None and scope > 0:
        parts.append(tr("kernel.yama.ptrace_scope is {scope} (0 lets a process trace others of its user; "
                        "`sudo sysctl kernel.yama.ptrace_scope=0`, or run as root)").format(scope=scope))
    if os.geteuid() != 0:
        parts.append(tr("the target must run as your user, or stridelens as root / with CAP_SYS_PTRACE"))
    parts.append(tr("in a container, ptrace needs --cap-add=SYS_PTRACE"))
    return tr("; ").join(parts)


def take(pid: int, top: int, min_pin_bytes: int, timeout: float, python: str | None = None,
         named: bool = False) -> Snapshot:
    """One snapshot of PID; raises InspectError with a message when it cannot be taken, having
    left nothing in the target that will run. `named`: add the bytes per name (for diffs)."""
    _check_target(pid)
    version = _python_version_of(pid)
    use_remote_exec = version is not None and version >= (3, 14)
    if not use_remote_exec and shutil.which("gdb") is None:
        raise InspectError(tr("--snapshot needs gdb on PATH (Debian/Ubuntu: apt-get install gdb); on "
                              "Python >= 3.14 targets it uses sys.remote_exec instead"))
    with _private_dir(pid) as d:
        queued = time.time()
        boot = os.path.join(d, snapshot_boot.BOOT_NAME)
        _write_private(boot, snapshot_boot.boot_source(d, top, min_pin_bytes, queued, named))
        entry = os.path.join(d, "entry.py")
        _write_private(entry, snapshot_boot.entry_statement(boot))
        t0 = time.perf_counter()
        with _StopWatch(pid) as watch:
            if use_remote_exec:
                method = "sys.remote_exec"
                _remote_exec(pid, entry, python)
            else:
                method = "gdb"
                _gdb_queue(pid, entry)
        inject_s = time.perf_counter() - t0
        raw = _wait_report(pid, os.path.join(d, snapshot_boot.REPORT_NAME), timeout, boot)
    out = json.loads(raw)
    body = out["body"]
    if not body.get("ok"):
        raise InspectError(from_target(body.get("error")) or tr("the snapshot failed in the target"))
    timing = out["timing"]
    return Snapshot(report=body["result"], target=out["target"], method=method, inject_s=inject_s,
                    ptrace_stop_s=watch.seconds(), wait_s=max(0.0, timing["started_at"] - timing["queued_at"] - inject_s),
                    report_s=float(timing["report_s"]), report_cpu_s=float(timing["report_cpu_s"]))


@contextlib.contextmanager
def _private_dir(pid: int) -> Any:
    d = tempfile.mkdtemp(prefix="stridelens-snapshot-")  # 0700, ours
    try:
        # Root snapshotting another user's process: that process must be able to write here.
        st = os.stat(f"/proc/{pid}")
        if os.geteuid() == 0 and st.st_uid != 0:
            os.chown(d, st.st_uid, st.st_gid)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _addresses(pid: int) -> dict[str, int]:
    """Where Py_AddPendingCall, PyRun_SimpleString and mmap are in PID (read before attaching)."""
    try:
        return snapshot_elf.resolve(pid, {"libpython3": {"Py_AddPendingCall", "PyRun_SimpleString"},
                                          "libc.so": {"mmap"}})
    except PermissionError as e:
        raise InspectError(tr("ptrace is not permitted on PID {pid} (its memory map is not readable): "
                              "{hint}").format(pid=pid, hint=_ptrace_hint(pid))) from e
    except snapshot_elf.NotFound as e:
        if "mmap" in str(e):
            raise InspectError(tr("PID {pid}: no mmap in its C library ({error})").format(pid=pid, error=e)) from e
        raise InspectError(tr("PID {pid} is not a Python process (no Py_AddPendingCall / PyRun_SimpleString "
                              "in it)").format(pid=pid)) from e


def _gdb_queue(pid: int, entry: str) -> None:
    addr = _addresses(pid)
    script = os.path.join(os.path.dirname(entry), "inject-gdb.py")
    _write_private(script, f"ENTRY_FILE = {entry!r}\nPAGE = {PAGE}\nADDR = {addr!r}\n" + _GDB_SCRIPT)
    # -iex runs before the attach: with -ex gdb would first read every library's symbols
    # (torch's take over 10 s) while the target is stopped; the addresses come from
    # snapshot_elf, and --readnever keeps gdb off the executable's DWARF too.
    cmd = ["gdb", "-nx", "-q", "-batch", "--readnever", "-iex", "set auto-solib-add off", "-iex", "set auto-load off",
           "-iex", "set confirm off", "-p", str(pid), "-x", script]
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GDB_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise InspectError(tr("gdb did not finish attaching to PID {pid} within {seconds} s").format(
            pid=pid, seconds=f"{GDB_TIMEOUT:g}")) from e
    text = out.stdout + out.stderr
    said = re.search(r"^STRIDELENS (\S+) ?(.*)$", out.stdout, re.M)
    if said is None or said.group(1) == "attach-failed":
        if "ptrace: Operation not permitted" in text or "Could not attach" in text:
            raise InspectError(tr("ptrace is not permitted on PID {pid}: {hint}").format(pid=pid, hint=_ptrace_hint(pid)))
        if "No such process" in text:
            raise InspectError(tr("no process with PID {pid}").format(pid=pid))
        tail = " / ".join(line for line in text.strip().splitlines()[-3:])
        raise InspectError(tr("gdb could not attach to PID {pid}: {output}").format(pid=pid, output=tail))
    what, detail = said.group(1), said.group(2)
    if what == "queued":
        return
    if what == "queue-full":
        raise InspectError(tr("PID {pid}: Python's pending-call queue is full (the main thread has not "
                              "reached Python code for a while); nothing was queued").format(pid=pid))
    raise InspectError(tr("gdb failed in PID {pid} ({what}): {detail}").format(pid=pid, what=what, detail=detail))


def _remote_exec(pid: int, entry: str, python: str | None) -> None:
    # sys.remote_exec needs an interpreter of the target's own version: the target's executable.
    exe = python or os.readlink(f"/proc/{pid}/exe")
    code = "import sys; sys.remote_exec(int(sys.argv[1]), sys.argv[2])"
    try:
        out = subprocess.run([exe, "-I", "-c", code, str(pid), entry], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=GDB_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InspectError(tr("sys.remote_exec into PID {pid} failed: {error}").format(pid=pid, error=e)) from e
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["?"]
        if "PermissionError" in tail[0] or "Operation not permitted" in tail[0]:
            raise InspectError(tr("ptrace is not permitted on PID {pid}: {hint}").format(pid=pid, hint=_ptrace_hint(pid)))
        raise InspectError(tr("sys.remote_exec into PID {pid} failed: {error}").format(pid=pid, error=tail[0]))


def _wait_report(pid: int, path: str, timeout: float, boot: str) -> str:
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        with contextlib.suppress(FileNotFoundError):
            return Path(path).read_text()
        if not os.path.exists(f"/proc/{pid}"):
            raise InspectError(tr("PID {pid} exited before the snapshot ran").format(pid=pid))
        if time.monotonic() > deadline:
            # Disarm first: the queued call stays in the target and finds no boot file.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(boot)
            with contextlib.suppress(FileNotFoundError):
                return Path(path).read_text()  # it finished in between
            raise InspectError(tr(
                "PID {pid}: the main thread did not reach Python code within {seconds} s (it is in C code: a "
                "long kernel, a blocking call, or an extension holding the GIL); the snapshot was called off and "
                "will do nothing when the main thread gets there (--timeout S to wait longer)").format(
                pid=pid, seconds=f"{timeout:g}"))
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
