"""Process lifecycle: clean exit (code 0, under a second, nothing on stderr), exit when the
client dies, stdin closing, TCP on loopback only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, BinaryIO

import pytest

from .helpers import EXAMPLES, SERVER

pytestmark = pytest.mark.timeout(120)


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_message(stream: BinaryIO) -> dict[str, Any]:
    length = 0
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("server closed its output")
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        elif line in (b"\r\n", b"\n"):
            break
    return json.loads(stream.read(length))


def wait_response(stream: BinaryIO, msg_id: int) -> dict[str, Any]:
    while True:
        msg = read_message(stream)
        if msg.get("id") == msg_id and "method" not in msg:
            return msg


def initialize(process_id: int | None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"processId": process_id, "rootUri": None, "capabilities": {}},
    }


def open_example() -> dict[str, Any]:
    path = EXAMPLES / "view_vs_reshape.py"
    return {
        "jsonrpc": "2.0",
        "method": "textDocument/didOpen",
        "params": {
            "textDocument": {
                "uri": path.as_uri(),
                "languageId": "python",
                "version": 1,
                "text": path.read_text(encoding="utf-8"),
            }
        },
    }


@pytest.fixture
def server():
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def test_shutdown_exit_is_quick_and_quiet(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    server.stdin.write(frame(initialize(os.getpid())))
    server.stdin.flush()
    result = wait_response(server.stdout, 1)
    assert "capabilities" in result["result"]
    server.stdin.write(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
    server.stdin.write(frame(open_example()))
    server.stdin.flush()
    # Diagnostics arrive; a hover is answered.
    hover = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "textDocument/hover",
        "params": {"textDocument": {"uri": (EXAMPLES / "view_vs_reshape.py").as_uri()}, "position": {"line": 9, "character": 0}},
    }
    server.stdin.write(frame(hover))
    server.stdin.flush()
    assert wait_response(server.stdout, 2)["result"] is not None
    server.stdin.write(frame({"jsonrpc": "2.0", "id": 3, "method": "shutdown", "params": None}))
    server.stdin.flush()
    assert wait_response(server.stdout, 3)["result"] is None
    server.stdin.write(frame({"jsonrpc": "2.0", "method": "exit", "params": None}))
    server.stdin.flush()  # the pipe stays open: the server must not wait for it
    assert server.wait(5) == 0
    time.sleep(0.3)
    assert server.stderr.read() == b""  # no "Error sending data" flood on the way out


def test_exit_without_shutdown_is_code_1(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    server.stdin.write(frame(initialize(None)))
    server.stdin.flush()
    wait_response(server.stdout, 1)
    server.stdin.write(frame({"jsonrpc": "2.0", "method": "exit", "params": None}))
    server.stdin.flush()
    assert server.wait(5) == 1
    assert server.stderr.read() == b""


def test_stdin_closed_ends_the_server(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    server.stdin.write(frame(initialize(None)))
    server.stdin.flush()
    wait_response(server.stdout, 1)
    server.stdin.close()
    server.wait(5)
    assert server.stderr.read() == b""


def test_exits_when_client_process_dies(server: subprocess.Popen[bytes]) -> None:
    assert server.stdin is not None and server.stdout is not None
    fake_client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server.stdin.write(frame(initialize(fake_client.pid)))
        server.stdin.flush()
        wait_response(server.stdout, 1)
        fake_client.kill()
        fake_client.wait(5)
        assert server.wait(5) == 0
    finally:
        if fake_client.poll() is None:
            fake_client.kill()
            fake_client.wait(5)


@pytest.mark.parametrize(
    "address",
    ["0.0.0.0:2087", "8.8.8.8:2087", "example.com:2087", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1", "[::1]"],
)
def test_tcp_refuses_bad_or_remote_addresses(address: str) -> None:
    proc = subprocess.run([*SERVER, "--tcp", address], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "stridelens serve:" in proc.stderr


def test_log_messages_without_a_log_file_is_a_usage_error() -> None:
    proc = subprocess.run([*SERVER, "--log-messages"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--log-messages needs --log-file PATH" in proc.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_tcp_on_loopback() -> None:
    port = free_port()
    proc = subprocess.Popen([*SERVER, "--tcp", f"127.0.0.1:{port}"], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        with sock, sock.makefile("rwb") as stream:
            stream.write(frame(initialize(os.getpid())))
            stream.flush()
            assert "capabilities" in wait_response(stream, 1)["result"]
            stream.write(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None}))
            stream.flush()
            wait_response(stream, 2)
            stream.write(frame({"jsonrpc": "2.0", "method": "exit", "params": None}))
            stream.flush()
        assert proc.wait(5) == 0
        assert proc.stderr is not None and proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
