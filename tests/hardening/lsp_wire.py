"""A raw LSP client over a subprocess's stdio (or its --tcp socket on loopback), for tests
that need bytes pytest-lsp won't send.

One reader thread parses Content-Length frames into a message log; requests wait on their
id with a deadline; server-to-client requests (workspace/configuration, refresh, register)
are answered so the server never waits on us. The process is always killed on close.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO

SERVER = [sys.executable, "-m", "stridelens", "serve"]


def frame(payload: dict[str, Any] | bytes) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LspProcess:
    """`tcp_port`: start the server with `--tcp 127.0.0.1:PORT` and talk over that socket."""

    def __init__(self, cmd: Sequence[str] = SERVER, cwd: Path | str | None = None,
                 env: dict[str, str] | None = None, stderr: BinaryIO | int | None = None,
                 tcp_port: int | None = None) -> None:
        args = list(cmd) + ([] if tcp_port is None else ["--tcp", f"127.0.0.1:{tcp_port}"])
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE if tcp_port is None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if tcp_port is None else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if stderr is None else stderr,
            cwd=cwd, env={**os.environ, **(env or {})},
        )  # fmt: skip
        self.sock: socket.socket | None = None
        if tcp_port is None:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.stdin: IO[bytes] = self.proc.stdin
            self.stdout: IO[bytes] = self.proc.stdout
        else:
            self.sock = self._connect(tcp_port)
            self.stdin, self.stdout = self.sock.makefile("wb"), self.sock.makefile("rb")
        self.messages: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.closed = False
        self._id = 0
        self._write_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    # ------------------------------------------------------------------ wire
    def _connect(self, port: int) -> socket.socket:
        deadline = time.monotonic() + 30
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.settimeout(None)  # the reader thread waits as long as the server is silent
                return sock
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise
                time.sleep(0.1)

    def _read(self) -> None:
        stream = self.stdout
        try:
            while True:
                length = None
                while True:
                    line = stream.readline()
                    if not line:
                        return
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                    elif line in (b"\r\n", b"\n"):
                        break
                body = stream.read(length or 0)
                msg = json.loads(body)
                if "method" in msg and "id" in msg:
                    self._answer(msg)
                with self.cond:
                    self.messages.append(msg)
                    self.cond.notify_all()
        except (OSError, ValueError):
            return
        finally:
            with self.cond:
                self.closed = True
                self.cond.notify_all()

    def _answer(self, msg: dict[str, Any]) -> None:
        result: Any = None
        if msg["method"] == "workspace/configuration":
            result = [None for _ in (msg.get("params") or {}).get("items", [])]
        with contextlib.suppress(OSError, ValueError):
            self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    def send_bytes(self, data: bytes) -> None:
        with self._write_lock:
            self.stdin.write(data)
            self.stdin.flush()

    def send(self, payload: dict[str, Any] | bytes) -> None:
        self.send_bytes(frame(payload))

    # ------------------------------------------------------------------ messages
    def next_id(self) -> int:
        self._id += 1
        return self._id

    def request_async(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        msg_id = self.next_id() if msg_id is None else msg_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return msg_id

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 30.0,
                 start: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            i = start
            while True:
                while i < len(self.messages):
                    if pred(self.messages[i]):
                        return self.messages[i]
                    i += 1
                if self.closed:
                    raise EOFError(f"server closed its output (exit code {self.proc.poll()})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching message from the server")
                self.cond.wait(left)

    def response(self, msg_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def request(self, method: str, params: Any = None, timeout: float = 30.0) -> dict[str, Any]:
        return self.response(self.request_async(method, params), timeout)

    def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def mark(self) -> int:
        with self.cond:
            return len(self.messages)

    def wait_analyzed(self, uri: str, *, exact: bool | None = True, version: int | None = None,
                      since: int = 0, timeout: float = 60.0) -> dict[str, Any]:
        def match(m: dict[str, Any]) -> bool:
            p = m.get("params") or {}
            return (m.get("method") == "stridelens/analyzed" and p.get("uri") == uri
                    and "scope" not in p  # a whole-file run's
                    and (exact is None or p.get("exact") == exact)
                    and (version is None or p.get("version") == version))  # fmt: skip

        return self.wait_for(match, timeout, since)

    # ------------------------------------------------------------------ LSP
    def initialize(self, root: Path | None = None, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        params = {
            "processId": os.getpid(),
            "rootUri": root.as_uri() if root else None,
            "capabilities": capabilities or {
                "workspace": {"configuration": True},
                "textDocument": {"hover": {"contentFormat": ["markdown"]},
                                 "codeAction": {"resolveSupport": {"properties": ["edit"]},
                                                "dataSupport": True}},
            },
        }  # fmt: skip
        result = self.request("initialize", params)
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python",
                                                              "version": version, "text": text}})

    def change(self, uri: str, version: int, changes: list[dict[str, Any]]) -> None:
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": changes})

    def hover(self, uri: str, line: int, character: int, timeout: float = 30.0) -> dict[str, Any]:
        return self.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                   "position": {"line": line, "character": character}},
                            timeout)  # fmt: skip

    def shutdown_and_exit(self, timeout: float = 10.0) -> int | None:
        with contextlib.suppress(OSError, ValueError, TimeoutError, EOFError):
            self.request("shutdown", None, timeout)
            self.notify("exit")
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, getattr(self, "stdin", None),
                       getattr(self, "stdout", None), getattr(self, "sock", None)):  # fmt: skip
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> LspProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
