"""A small Debug Adapter Protocol client over TCP, enough to drive debugpy.

Why our own: no maintained Python DAP client fits. debugpy's own messaging module is private
and has no request timeouts; we need timeouts on every request, events kept in order for the
caller to wait on (`stopped`, `terminated`, `exited`, `output`, `breakpoint`), and a clear error
when the debuggee (or its adapter) dies mid-request instead of a hang.

One reader thread parses `Content-Length` frames; callers block on per-request slots or on
the event log with a deadline.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from stridelens.i18n import tr


class DapError(Exception):
    """A request the adapter answered with success=false."""

    def __init__(self, command: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{command}: {message}")
        self.command = command
        self.message = message
        self.body = body or {}


class DapFailedInTarget(DapError):
    """A request debugpy failed inside the target without answering (`fail_pending`)."""


class DapTimeout(Exception):
    """No answer (or no awaited event) before the deadline."""


class DapClosed(Exception):
    """The connection to the adapter is gone (debuggee exited or was killed)."""


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    message: dict[str, Any] | None = None
    failed: str | None = None  # why no answer will come (see `fail_pending`)


class DapClient:
    """Requests with timeouts and an ordered event log, over one TCP connection."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        # Requests are small and latency-bound: don't let Nagle hold them back.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._seq = 0
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, name="stridelens-dap", daemon=True)
        self._reader.start()

    @classmethod
    def connect(cls, host: str, port: int, timeout: float = 10.0) -> DapClient:
        """Connect, retrying while the adapter is still starting to listen."""
        deadline = time.monotonic() + timeout
        last: OSError | None = None
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection((host, port), timeout=2.0)
                sock.settimeout(None)
                return cls(sock)
            except OSError as e:
                last = e
                time.sleep(0.1)
        raise DapTimeout(tr("could not connect to {address}: {error}").format(address=f"{host}:{port}", error=last))

    # ------------------------------------------------------------------ wire

    def _read_loop(self) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = self._sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(buf) < length:
                    chunk = self._sock.recv(max(65536, length - len(buf)))
                    if not chunk:
                        return
                    buf += chunk
                body, buf = buf[:length], buf[length:]
                self._dispatch(json.loads(body))
        except (OSError, ValueError):
            return
        finally:
            self._closed = True
            with self._cond:
                self._cond.notify_all()
            for p in list(self._pending.values()):
                p.done.set()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "response":
            p = self._pending.get(msg.get("request_seq", -1))
            if p is not None:
                p.message = msg
                p.done.set()
        elif kind == "event":
            with self._cond:
                self._events.append(msg)
                self._cond.notify_all()
        elif kind == "request":  # reverse requests (runInTerminal, startDebugging): decline
            self._send({"type": "response", "request_seq": msg.get("seq"), "success": False,
                        "command": msg.get("command"), "message": "not supported"})

    def _send(self, msg: dict[str, Any], pending: _Pending | None = None) -> int:
        with self._lock:
            self._seq += 1
            if pending is not None:
                self._pending[self._seq] = pending
            msg = {"seq": self._seq, **msg}
            data = json.dumps(msg).encode()
            try:
                self._sock.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            except OSError as e:
                raise DapClosed(tr("connection to the debug adapter lost: {error}").format(error=e)) from e
            return self._seq

    # ------------------------------------------------------------------ API

    @property
    def closed(self) -> bool:
        return self._closed

    def send_request(self, command: str, arguments: dict[str, Any] | None = None) -> int:
        """Send without waiting (e.g. `attach`, answered only after configurationDone)."""
        if self._closed:
            raise DapClosed(tr("{command}: the debug adapter closed the connection (debuggee gone?)").format(command=command))
        return self._send({"type": "request", "command": command, "arguments": arguments or {}},
                          _Pending())

    def wait_response(self, seq: int, command: str, timeout: float) -> dict[str, Any]:
        pending = self._pending[seq]
        if not pending.done.wait(timeout):
            raise DapTimeout(tr("{command}: no answer from the debug adapter within {seconds} s").format(
                command=command, seconds=f"{timeout:g}"))
        del self._pending[seq]
        msg = pending.message
        if pending.failed is not None:
            raise DapFailedInTarget(command, pending.failed)
        if msg is None:
            raise DapClosed(tr("{command}: the debug adapter closed the connection (debuggee gone?)").format(command=command))
        if not msg.get("success", False):
            body = msg.get("body") or {}
            err = (body.get("error") or {}).get("format") if isinstance(body, dict) else None
            raise DapError(command, msg.get("message") or err or "failed", body)
        body = msg.get("body")
        return body if isinstance(body, dict) else {}

    def fail_pending(self, reason: str) -> None:
        """End every request still waiting with `reason`: debugpy inside the target failed them
        (its error is printed there) and will never answer, so waiting for the timeout is useless."""
        for p in list(self._pending.values()):
            if not p.done.is_set():
                p.failed = reason
                p.done.set()

    def answered(self, seq: int) -> bool:
        """Whether the response to `seq` has come (or the connection closed)."""
        pending = self._pending.get(seq)
        return pending is not None and pending.done.is_set()

    def request(self, command: str, arguments: dict[str, Any] | None = None,
                timeout: float = 10.0) -> dict[str, Any]:
        return self.wait_response(self.send_request(command, arguments), command, timeout)

    def events(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._events)

    def wait_event(self, names: set[str], timeout: float, start: int = 0) -> tuple[int, dict[str, Any]]:
        """First event named in `names` at log index >= start: (index, event)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            i = start
            while True:
                while i < len(self._events):
                    if self._events[i].get("event") in names:
                        return i, self._events[i]
                    i += 1
                if self._closed:
                    raise DapClosed(tr("the debug adapter closed the connection (debuggee gone?)"))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DapTimeout(tr("no {events} event within {seconds} s").format(
                        events="/".join(sorted(names)), seconds=f"{timeout:g}"))
                self._cond.wait(left)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
