"""Driving a debuggee through debugpy: launch / connect / PID attach, stop, evaluate, leave.

The request order follows what debugpy 1.8 accepts (measured, see shared FACTS): initialize ->
attach (answered only after configurationDone) -> `initialized` event -> setBreakpoints ->
setExceptionBreakpoints -> configurationDone -> `stopped` -> threads -> stackTrace -> evaluate
-> continue -> disconnect {terminateDebuggee: false}.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from stridelens.i18n import tr
from stridelens.inspector import probe as probe_module
from stridelens.inspector import probe_parts, probe_report
from stridelens.inspector.dap_client import (
    DapClient,
    DapClosed,
    DapError,
    DapFailedInTarget,
    DapTimeout,
)
from stridelens.inspector.target_text import from_target

PROBE = f"__import__('sys').modules[{probe_module.PRIVATE_NAME!r}]"


class InspectError(Exception):
    """The job failed for a reason the user should read (exit code 1, no traceback)."""


class TargetGone(InspectError):
    """The debuggee exited or died while we were talking to it."""


class UsageError(InspectError):
    """Bad command-line input (exit code 2)."""


class NoStop(InspectError):
    """No breakpoint was hit (nor pause taken) within the timeout; the target still runs."""


@dataclass(frozen=True)
class Breakpoint:
    path: str
    line: int
    condition: str | None = None

    @classmethod
    def parse(cls, spec: str, cwd: str | None = None) -> Breakpoint:
        parts = spec.split(":", 2)
        if len(parts) < 2 or not parts[1].strip().isdigit():
            raise UsageError(tr("--break {spec}: expected FILE:LINE[:CONDITION]").format(spec=repr(spec)))
        path = os.path.abspath(os.path.join(cwd or os.getcwd(), parts[0]))
        if not os.path.isfile(path):
            raise UsageError(tr("--break {spec}: no such file {path}").format(spec=repr(spec), path=path))
        line = int(parts[1])
        if line < 1:
            raise UsageError(tr("--break {spec}: line numbers start at 1").format(spec=repr(spec)))
        cond = parts[2].strip() if len(parts) == 3 and parts[2].strip() else None
        lines = code_lines(path)
        # debugpy 1.8 answers verified=true for any line and silently moves the breakpoint to
        # the nearest code line (even line 500 of a 7-line file): check it ourselves.
        if lines and line not in lines:
            near = sorted(lines, key=lambda n: (abs(n - line), n))[:2]
            raise UsageError(
                tr("--break {spec}: line {line} of {file} has no code (blank, comment, or past the end); "
                   "nearest lines with code: {near}").format(
                    spec=repr(spec), line=line, file=parts[0], near=", ".join(map(str, sorted(near)))))
        return cls(path, line, cond)


def code_lines(path: str) -> set[int]:
    """Lines where Python can stop in a file (empty when it cannot be compiled)."""
    try:
        top = compile(Path(path).read_bytes(), path, "exec")
    except (SyntaxError, ValueError, OSError):
        return set()
    out: set[int] = set()
    stack = [top]
    while stack:
        co = stack.pop()
        out.update(ln for _s, _e, ln in co.co_lines() if ln is not None and ln > 0)
        stack.extend(c for c in co.co_consts if isinstance(c, type(top)))
    # A def/class line holds no code of its body but is where decorators and defaults run.
    return out


def parse_address(text: str, allow_remote: bool = False) -> tuple[str, int]:
    """HOST:PORT, checked to be loopback before any socket exists (unless allow_remote)."""
    host, sep, port_s = text.rpartition(":")
    if not sep or not port_s.isdigit() or not host:
        raise UsageError(tr("--connect {address}: expected HOST:PORT").format(address=repr(text)))
    port = int(port_s)
    if not 0 < port < 65536:
        raise UsageError(tr("--connect {address}: port out of range").format(address=repr(text)))
    host = host.strip("[]")
    if host == "localhost":
        return "127.0.0.1", port
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_loopback:
        return host, port
    if not allow_remote:
        # Names other than localhost are not resolved: resolving could itself reach the network.
        raise UsageError(
            tr("--connect {address}: {host} is not a loopback address; debugpy runs arbitrary code for "
               "whoever connects, so remote endpoints need an explicit --allow-remote").format(
                address=repr(text), host=host)
        )
    return host, port


def _library_frame(frame: dict[str, Any]) -> bool:
    path = str((frame.get("source") or {}).get("path") or "")
    norm = path.replace("\\", "/")
    return (not path or path.startswith("<") or "/site-packages/" in norm or "/dist-packages/" in norm
            or "/lib/python3" in norm or "/lib/pypy3" in norm)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _forward(stream: IO[bytes], sink: IO[str], held_back: Callable[[str], bool] | None = None) -> None:
    # The adapter inherits this pipe too, so EOF may never come: a daemon thread, never joined.
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        if held_back is not None and held_back(line):
            continue
        with contextlib.suppress(ValueError, OSError):
            sink.write(line)
            sink.flush()


# pydevd's words when a request fails inside the target (it logs the traceback and never
# answers): under memory pressure `evaluate` dies starting its timeout thread.
_INTERNAL_ERROR = "Error processing internal command"
# Lines of a traceback that are not an exception: its header, and what chains two of them.
_CHAIN_HEADERS = ("During handling of the above exception", "The above exception was")
_TRACEBACK_HEADERS = ("Traceback", *_CHAIN_HEADERS)
_SHORTAGES = ("MemoryError", "can't start new thread", "can't allocate memory", "Cannot allocate memory")


def _out_of_memory(error: str) -> bool:
    return any(word in error for word in _SHORTAGES)


class InternalErrorWatch:
    """Reads the launched target's output for pydevd's "Error processing internal command"
    traceback, hands each error line of it (a chained traceback has several) to `on_error`
    and holds the traceback back from the user's output: it is debugpy's, and the error
    message says what it meant."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self.on_error = on_error
        self._state = "out"  # "in" a traceback, "after" its error line (a chain may go on)

    def __call__(self, line: str) -> bool:
        """Whether `line` belongs to such a traceback."""
        text = line.rstrip("\n")
        if _INTERNAL_ERROR in text:
            self._state = "in"
            return True
        if self._state == "out":
            return False
        if self._state == "after":
            if text.startswith(_CHAIN_HEADERS):
                self._state = "in"
            elif text:
                self._state = "out"
                return False
            return True
        if text and not text[0].isspace() and not text.startswith(_TRACEBACK_HEADERS):
            self._state = "after"
            self.on_error(text.strip())
        return True


def internal_error_message(error: str) -> str:
    """What a user reads when debugpy failed a request inside the target."""
    if _out_of_memory(error):
        return tr("debugpy inside the target could not run the request ({error}): the target is out of memory "
                  "(or of threads), so nothing can be read from it at this stop; break earlier, before the "
                  "memory runs out, or inspect a smaller run").format(error=error)
    return tr("debugpy inside the target could not run the request ({error})").format(error=error)


_STATE_LOCK = threading.Lock()


def _state_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stridelens" / "pid-ports.json"


def _proc_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22: start time in clock ticks


class Session:
    """One debug session. Use as a context manager; `close()` never leaves our children behind."""

    def __init__(self, progress: Callable[[str], None] | None = None, timeout: float = 30.0) -> None:
        self.client: DapClient | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.progress = progress or (lambda _msg: None)
        self.timeout = timeout
        self.breakpoints: list[Breakpoint] = []
        self.unverified: list[tuple[Breakpoint, str]] = []
        self.thread_id: int | None = None
        self.frame_id: int | None = None
        self.frame: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.target: dict[str, Any] = {}
        self._attach_seq: int | None = None
        self._event_cursor = 0

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=self.proc is not None and exc[0] is not None)

    # ------------------------------------------------------------------ getting a client

    def launch(self, script: str, args: list[str], python: str | None = None,
               output: IO[str] | None = None) -> None:
        """Run `script` under debugpy (waiting for us), its output forwarded to `output`."""
        if not os.path.isfile(script):
            raise UsageError(tr("--launch: no such file {path}").format(path=script))
        port = free_port()
        cmd = [python or sys.executable, "-X", "frozen_modules=off", "-m", "debugpy",
               "--listen", f"127.0.0.1:{port}", "--wait-for-client", script, *args]
        self.progress(tr("launching {script} under debugpy").format(script=os.path.basename(script)))
        env = {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env)
        assert self.proc.stdout is not None
        watch = InternalErrorWatch(self._internal_error)
        threading.Thread(target=_forward, args=(self.proc.stdout, output or sys.stderr, watch),
                         daemon=True).start()
        self._connect_retrying("127.0.0.1", port, lambda: self.proc is not None and self.proc.poll() is not None)

    def _internal_error(self, error: str) -> None:
        if self.client is not None:
            self.client.fail_pending(internal_error_message(error))

    def connect(self, host: str, port: int) -> None:
        self.progress(tr("connecting to {address}").format(address=f"{host}:{port}"))
        try:
            self.client = DapClient.connect(host, port, timeout=2.0)
        except DapTimeout as e:
            raise InspectError(
                tr("nothing accepts connections at {address} (is the target running debugpy.listen() / "
                   "python -m debugpy --listen on that port?)").format(address=f"{host}:{port}")) from e

    def attach_pid(self, pid: int, python: str | None = None) -> None:
        """debugpy's PID injection (needs gdb); the port is remembered: inject once per process."""
        if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
            raise InspectError(tr("no process with PID {pid}").format(pid=pid))
        start = _proc_start(pid)
        state = self._load_state()
        known = state.get(str(pid))
        if known and known.get("start") == start:
            port = int(known["port"])
            self.progress(tr("PID {pid}: reusing debugpy on port {port}").format(pid=pid, port=port))
            with contextlib.suppress(DapTimeout):
                self.client = DapClient.connect("127.0.0.1", port, timeout=2.0)
                return
            raise InspectError(
                tr("PID {pid} already had debugpy injected (port {port}) but it does not answer; a second "
                   "injection would fail inside the target").format(pid=pid, port=port))
        if shutil.which("gdb") is None:
            raise InspectError(tr("--pid needs gdb on PATH (Debian/Ubuntu: apt-get install gdb)"))
        port = free_port()
        self.progress(tr("injecting debugpy into PID {pid} with gdb (takes seconds)").format(pid=pid))
        cmd = [python or sys.executable, "-m", "debugpy", "--listen", f"127.0.0.1:{port}", "--pid", str(pid)]
        try:
            out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=max(60.0, self.timeout))
        except subprocess.TimeoutExpired as e:
            raise InspectError(tr("injecting debugpy into PID {pid} timed out").format(pid=pid)) from e
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
            raise InspectError(tr("injecting debugpy into PID {pid} failed: {output}").format(
                pid=pid, output=" / ".join(tail)))
        with _STATE_LOCK:  # --all-ranks injects into several ranks at once: re-read, then add
            state = self._load_state()
            state[str(pid)] = {"port": port, "start": start}
            self._save_state(state)
        try:
            self.client = DapClient.connect("127.0.0.1", port, timeout=self.timeout)
        except DapTimeout as e:
            raise InspectError(
                tr("debugpy did not start listening in PID {pid} (ptrace not permitted? see "
                   "/proc/sys/kernel/yama/ptrace_scope)").format(pid=pid)) from e

    def _connect_retrying(self, host: str, port: int, dead: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if dead():
                raise InspectError(tr("the target exited before debugpy started listening"))
            with contextlib.suppress(DapTimeout):
                self.client = DapClient.connect(host, port, timeout=0.5)
                return
        raise InspectError(tr("debugpy did not listen on {address} within {seconds} s").format(
            address=f"{host}:{port}", seconds=f"{self.timeout:g}"))

    def _load_state(self) -> dict[str, Any]:
        try:
            data = json.loads(_state_file().read_text())
        except (OSError, ValueError):
            return {}
        # Forget processes that are gone (or whose PID was reused).
        return {k: v for k, v in data.items() if isinstance(v, dict) and _proc_start(int(k)) == v.get("start")}

    def _save_state(self, state: dict[str, Any]) -> None:
        path = _state_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(path)

    # ------------------------------------------------------------------ handshake and stops

    def _c(self) -> DapClient:
        if self.client is None:
            raise InspectError(tr("not connected"))
        return self.client

    def handshake(self, breakpoints: list[Breakpoint]) -> None:
        c = self._c()
        self.breakpoints = breakpoints
        try:
            c.request("initialize", {"clientID": "stridelens", "clientName": "stridelens",
                                     "adapterID": "debugpy", "pathFormat": "path",
                                     "linesStartAt1": True, "columnsStartAt1": True,
                                     "supportsRunInTerminalRequest": False}, timeout=self.timeout)
            self._attach_seq = c.send_request("attach", {"justMyCode": False, "subProcess": False})
            attached = self._wait_initialized(c, self._attach_seq)
            by_file: dict[str, list[Breakpoint]] = {}
            for bp in breakpoints:
                by_file.setdefault(bp.path, []).append(bp)
            for path, bps in by_file.items():
                body = c.request("setBreakpoints", {
                    "source": {"path": path},
                    "breakpoints": [{"line": b.line, **({"condition": b.condition} if b.condition else {})}
                                    for b in bps],
                }, timeout=self.timeout)
                for bp, res in zip(bps, body.get("breakpoints", []), strict=False):
                    if not res.get("verified", False):
                        self.unverified.append((bp, res.get("message") or "no code at this line"))
            c.request("setExceptionBreakpoints", {"filters": []}, timeout=self.timeout)
            c.request("configurationDone", {}, timeout=self.timeout)
            if not attached:
                c.wait_response(self._attach_seq, "attach", self.timeout)
        except DapError as e:
            if e.command == "attach" and "already being debugged" in e.message:
                raise InspectError(
                    tr("the target is already attached: another `stridelens inspect` or an editor's "
                       "debugger holds its debugpy session (one client at a time); detach it and retry")
                ) from e
            raise InspectError(tr("debugpy refused {command}: {message}").format(
                command=e.command, message=e.message)) from e
        except DapTimeout as e:
            raise InspectError(
                tr("the target did not answer within {seconds} s ({error}); it may be running C code that "
                   "holds the GIL (debugpy can only act between Python bytecodes) — try again later or "
                   "with a longer --timeout").format(seconds=f"{self.timeout:g}", error=e)) from e
        except DapClosed as e:
            raise InspectError(tr("debug session failed to start: {error}").format(error=e)) from e
        if breakpoints and len(self.unverified) == len(breakpoints):
            bp, msg = self.unverified[0]
            raise InspectError(tr("breakpoint {where} was not accepted by debugpy: {message}").format(
                where=f"{bp.path}:{bp.line}", message=msg))

    def set_breakpoints_now(self, breakpoints: list[Breakpoint]) -> None:
        """Set line breakpoints on a target that already runs under us (after `handshake`);
        `finish` clears them. --all-ranks uses it to arm every rank at the same moment."""
        by_file: dict[str, list[Breakpoint]] = {}
        for bp in breakpoints:
            by_file.setdefault(bp.path, []).append(bp)
        try:
            for path, bps in by_file.items():
                self._c().request("setBreakpoints", {
                    "source": {"path": path},
                    "breakpoints": [{"line": b.line, **({"condition": b.condition} if b.condition else {})}
                                    for b in bps],
                }, timeout=self.timeout)
        except DapError as e:
            raise InspectError(tr("debugpy refused {command}: {message}").format(
                command="setBreakpoints", message=e.message)) from e
        except DapClosed as e:
            raise TargetGone(self._exit_message(tr("while setting breakpoints"))) from e
        self.breakpoints = list(breakpoints)

    def _wait_initialized(self, c: DapClient, attach_seq: int) -> bool:
        """Wait for `initialized`; an early answer to attach is an error (e.g. another client
        is attached: debugpy says so at once, and `initialized` never comes). True when the
        attach response was consumed here."""
        deadline = time.monotonic() + self.timeout
        attached = False
        while True:
            if not attached and c.answered(attach_seq):
                c.wait_response(attach_seq, "attach", 0)  # raises DapError / DapClosed
                attached = True
            try:
                c.wait_event({"initialized"}, timeout=min(0.2, max(0.0, deadline - time.monotonic())))
                return attached
            except DapTimeout:
                if time.monotonic() >= deadline:
                    raise DapTimeout(tr("no {events} event within {seconds} s").format(
                        events="initialized", seconds=f"{self.timeout:g}")) from None

    def wait_stop(self, timeout: float | None = None) -> None:
        """Wait for a breakpoint hit; a target that exits first is an error."""
        c = self._c()
        timeout = self.timeout if timeout is None else timeout
        try:
            i, ev = c.wait_event({"stopped", "terminated", "exited"}, timeout, self._event_cursor)
        except DapClosed as e:
            raise InspectError(self._exit_message(tr("before any breakpoint was hit"))) from e
        except DapTimeout as e:
            raise NoStop(tr("no breakpoint was hit within {seconds} s").format(seconds=f"{timeout:g}")) from e
        self._event_cursor = i + 1
        if ev["event"] != "stopped":
            raise InspectError(self._exit_message(tr("before any breakpoint was hit")))
        body = ev.get("body") or {}
        self.stop_reason = body.get("reason")
        self.thread_id = body.get("threadId")
        self._select_frame()

    def pause(self) -> None:
        c = self._c()
        try:
            threads = c.request("threads", timeout=self.timeout).get("threads", [])
            main = next((t for t in threads if t.get("name") == "MainThread"), threads[0] if threads else None)
            if main is None:
                raise InspectError(tr("the target has no Python threads to pause"))
            c.request("pause", {"threadId": main["id"]}, timeout=self.timeout)
        except DapError as e:
            raise InspectError(tr("pause failed: {message}").format(message=e.message)) from e
        except DapClosed as e:
            raise InspectError(self._exit_message(tr("before it could be paused"))) from e
        self.wait_stop()
        if self.thread_id != main["id"]:
            # pydevd suspends every thread and may name any of them in `stopped` (seen with
            # 200 threads): report the thread that was asked for, when it has stopped too.
            reported, frame, frame_id = self.thread_id, self.frame, self.frame_id
            self.thread_id = main["id"]
            try:
                self._select_frame()
            except (InspectError, DapError, DapTimeout):
                self.thread_id, self.frame, self.frame_id = reported, frame, frame_id

    def _select_frame(self) -> None:
        c = self._c()
        if self.thread_id is None:
            threads = c.request("threads", timeout=self.timeout).get("threads", [])
            self.thread_id = threads[0]["id"] if threads else None
        frames = c.request("stackTrace", {"threadId": self.thread_id, "startFrame": 0, "levels": 20},
                           timeout=self.timeout).get("stackFrames", [])
        if not frames:
            raise InspectError(tr("the stopped thread has no Python frames"))
        frame = frames[0]
        if self.stop_reason == "pause":
            # A pause lands wherever the thread is, often inside the standard library or a
            # package (pathlib, torch): inspect the innermost frame of the user's own code.
            frame = next((f for f in frames if not _library_frame(f)), frame)
        self.frame = frame
        self.frame_id = frame["id"]

    def _target_gone(self) -> bool:
        # A failed request may be the first sign of a dead debuggee ("No more messages").
        if self.proc is not None and self.proc.poll() is not None:
            return True
        try:
            self._c().wait_event({"exited", "terminated"}, timeout=1.5, start=self._event_cursor)
        except DapTimeout:
            return False
        except DapClosed:
            return True
        return True

    def _exit_message(self, when: str) -> str:
        code = self._reported_exit_code(wait_s=2.0)
        if code is None:
            return tr("the target exited {when}").format(when=when)
        return tr("the target exited (exit code {code}) {when}").format(code=code, when=when)

    # ------------------------------------------------------------------ evaluate and the probe

    def evaluate(self, expression: str, timeout: float | None = None) -> str:
        """Evaluate in the stopped frame; the string result, whole (rawString)."""
        try:
            body = self._c().request("evaluate", {
                "expression": expression, "frameId": self.frame_id, "context": "repl",
                "format": {"rawString": True},
            }, timeout=self.timeout if timeout is None else timeout)
        except DapClosed as e:
            raise TargetGone(self._exit_message(tr("during the inspection"))) from e
        except DapTimeout as e:
            raise InspectError(str(e)) from e
        except DapFailedInTarget as e:
            raise InspectError(e.message) from e
        except DapError as e:
            if self._target_gone():
                raise TargetGone(self._exit_message(tr("during the inspection"))) from e
            if _out_of_memory(e.message):
                raise InspectError(internal_error_message(e.message)) from e
            raise InspectError(tr("evaluation failed in the target: {message}").format(message=e.message)) from e
        result = str(body.get("result", ""))
        if result[:1] in "'\"" and result[-1:] == result[:1]:
            with contextlib.suppress(ValueError, SyntaxError):
                return str(ast.literal_eval(result))
        return result

    def ensure_probe(self) -> dict[str, Any]:
        """Inject the probe once per target (a private module that persists across sessions)."""
        self.inject_parts(probe_parts.sources(), probe_module.PRIVATE_NAME)
        self.target = self.call_probe("setup_json()")
        return self.target

    def inject(self, path: str, private_name: str, filename: str) -> None:
        """Evaluate a module's source into `sys.modules[private_name]` of the target, unless
        that exact source is already there."""
        self.inject_parts([(Path(path).read_text(), filename)], private_name)

    def inject_parts(self, parts: list[tuple[str, str]], private_name: str) -> None:
        """Evaluate each (source, filename), in order, into the one module
        `sys.modules[private_name]` of the target, unless those exact sources are already there."""
        digest = hashlib.sha1("\0".join(src for src, _ in parts).encode()).hexdigest()[:16]
        have = self.evaluate(f"getattr(__import__('sys').modules.get({private_name!r}), 'SOURCE_ID', None)")
        if have == digest:
            return
        # The id goes in last: a part that fails leaves the module without it, so the next inject retries.
        parts = [*parts[:-1], (parts[-1][0] + f"\nSOURCE_ID = {digest!r}\n", parts[-1][1])]
        # One expression: a multi-statement snippet would leave temporaries in the user's globals.
        self.evaluate(
            f"[exec(compile(src, filename, 'exec'), d) for d in [__import__('sys').modules.setdefault("
            f"{private_name!r}, __import__('types').ModuleType({private_name!r})).__dict__] "
            f"for src, filename in {parts!r}] and None")

    def call_probe(self, call: str, module: str = probe_module.PRIVATE_NAME,
                   timeout: float | None = None) -> Any:
        raw = self.evaluate(f"__import__('sys').modules[{module!r}].{call}", timeout=timeout)
        try:
            out = json.loads(raw)
        except ValueError as e:
            raise InspectError(tr("the probe did not answer as expected: {answer}").format(answer=raw[:300])) from e
        if not out.get("ok"):
            raise InspectError(from_target(out.get("error")) or tr("probe failed"))
        return out["result"]

    def describe(self, expr: str, stats: bool = False) -> dict[str, Any]:
        return dict(self.call_probe(f"describe_expr_json({expr!r}, globals(), locals(), {stats!r})"))

    def frame_report(self) -> dict[str, Any]:
        return dict(self.call_probe("frame_report_json(locals())"))

    def process_report(self, top: int = 20, min_pin_bytes: int = probe_report.PIN_MIN_BYTES) -> dict[str, Any]:
        return dict(self.call_probe(f"process_report_json({int(top)}, {int(min_pin_bytes)}, locals())"))

    # ------------------------------------------------------------------ running on

    def clear_breakpoints(self) -> None:
        """Drop the line breakpoints set by `handshake` (the target will not stop at them)."""
        c = self._c()
        for path in {bp.path for bp in self.breakpoints}:
            c.request("setBreakpoints", {"source": {"path": path}, "breakpoints": []}, timeout=self.timeout)
        self.breakpoints = []

    def break_on_raised(self, exception_names: list[str]) -> None:
        """Stop wherever one of these exceptions (or a subclass) is raised, caught or not."""
        options = [{"path": [{"names": ["Python Exceptions"]}, {"names": exception_names}],
                    "breakMode": "always"}] if exception_names else []
        self._c().request("setExceptionBreakpoints", {"filters": [], "exceptionOptions": options},
                          timeout=self.timeout)

    def resume(self) -> None:
        if self.thread_id is None:
            raise InspectError(tr("the target is not stopped"))
        try:
            self._c().request("continue", {"threadId": self.thread_id}, timeout=self.timeout)
        except DapClosed as e:
            raise TargetGone(self._exit_message(tr("while resuming"))) from e

    def next_stop(self, timeout: float) -> int | None:
        """Wait for the next stop (then None) or the target's exit (then its exit code, or -1
        when unknown); DapTimeout when neither comes in time."""
        c = self._c()
        try:
            i, ev = c.wait_event({"stopped", "terminated", "exited"}, timeout, self._event_cursor)
        except DapClosed:
            return self._exit_code()
        self._event_cursor = i + 1
        if ev["event"] != "stopped":
            return self._exit_code()
        body = ev.get("body") or {}
        self.stop_reason = body.get("reason")
        self.thread_id = body.get("threadId")
        self._select_frame()
        return None

    def _exit_code(self) -> int:
        code = self._reported_exit_code(wait_s=5.0)
        return -1 if code is None else int(code)

    def _reported_exit_code(self, wait_s: float) -> int | None:
        """The exit code debugpy reported, or the launched process's own (waited for)."""
        code = None
        for ev in self._c().events():
            if ev.get("event") == "exited":
                code = (ev.get("body") or {}).get("exitCode")
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=wait_s)
        return code

    def stack(self, levels: int = 64) -> list[dict[str, Any]]:
        """The stopped thread's frames, innermost first; `user` marks frames outside libraries."""
        frames = self._c().request("stackTrace", {"threadId": self.thread_id, "startFrame": 0,
                                                  "levels": levels}, timeout=self.timeout)
        return [{**f, "user": not _library_frame(f)} for f in frames.get("stackFrames", [])]

    def in_frame(self, frame_id: int) -> contextlib.AbstractContextManager[None]:
        """Evaluate in another frame of the stopped thread for the duration of the block."""
        @contextlib.contextmanager
        def switch() -> Any:
            saved, self.frame_id = self.frame_id, frame_id
            try:
                yield
            finally:
                self.frame_id = saved
        return switch()

    # ------------------------------------------------------------------ leaving

    def finish(self, kill: bool = False) -> None:
        """Detach leaving the target running (breakpoints cleared), or end it."""
        c = self.client
        if c is None or c.closed:
            return
        with contextlib.suppress(DapError, DapTimeout, DapClosed):
            if kill:
                c.request("disconnect", {"terminateDebuggee": True}, timeout=5.0)
                return
            for path in {bp.path for bp in self.breakpoints}:
                c.request("setBreakpoints", {"source": {"path": path}, "breakpoints": []}, timeout=5.0)
            if self.thread_id is not None:
                c.request("continue", {"threadId": self.thread_id}, timeout=5.0)
            c.request("disconnect", {"terminateDebuggee": False}, timeout=5.0)

    def wait_target(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self, kill: bool = False) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if kill and self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None and self.proc.poll() is not None and self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
