"""`serve --tcp` and `inspect --connect` stay on loopback unless `--allow-remote` is given.

A refused address is refused where it is parsed, before any socket exists: each refusal runs
in a fresh interpreter with an audit hook that records every socket event (creation, bind,
connect, name resolution, sends) from the start, and the test asserts there was none. No test
here opens a connection to, or sends a packet toward, anything outside 127.0.0.0/8 and ::1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stridelens.inspector import session as inspect_session
from stridelens.server.cli import serve_command

pytestmark = pytest.mark.timeout(120)

REFUSED = [
    "10.0.0.1",
    "0.0.0.0",
    "192.168.1.20",
    "8.8.8.8",
    "example.com",
    "localhost.example.com",
    "my-laptop",
    "127.1",  # inet_aton would call it loopback; we do not guess
    "0x7f000001",
    "::",
    "2001:db8::1",
    "::ffff:10.0.0.1",
    "fe80::1%eth0",
]

ACCEPTED = ["127.0.0.1", "127.0.0.2", "::1", "localhost"]

# Audit events of the socket module: any of them would mean the address reached the network.
RUNNER = """
import json, sys
events = []
def hook(event, args):
    if event.startswith("socket."):
        events.append([event, repr(args)[:200]])
sys.addaudithook(hook)
from stridelens.server.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
sys.stdout.flush()
print("\\n@@AUDIT@@" + json.dumps({"rc": rc, "events": events}))
"""


def spec(host: str, port: int = 5678) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run_audited(*argv: str) -> tuple[int, list[list[str]], str]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, *argv], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert "@@AUDIT@@" in proc.stdout, proc.stderr
    audit = json.loads(proc.stdout.rpartition("@@AUDIT@@")[2])
    return int(audit["rc"]), audit["events"], proc.stderr


@pytest.mark.parametrize("host", REFUSED)
def test_refused_before_any_socket_exists(host: str) -> None:
    for argv in (["serve", "--tcp", spec(host)], ["inspect", "--connect", spec(host), "--memory"]):
        rc, events, err = run_audited(*argv)
        assert rc == 2, (argv, err)
        assert events == [], f"{argv}: socket activity before the refusal: {events}"
        assert "--allow-remote" in err and "loopback" in err, err
        assert "Traceback" not in err


def test_refusal_in_process_parsers() -> None:
    for host in REFUSED:
        with pytest.raises(serve_command.AddressError):
            serve_command.parse_address(spec(host))
        with pytest.raises(inspect_session.UsageError):
            inspect_session.parse_address(spec(host))
    # The explicit flag lets an address through (validation only: nothing is opened here).
    assert serve_command.parse_address("10.0.0.1:2087", allow_remote=True) == ("10.0.0.1", 2087)
    assert inspect_session.parse_address("10.0.0.1:5678", allow_remote=True) == ("10.0.0.1", 5678)


@pytest.mark.parametrize("host", ACCEPTED)
def test_loopback_accepted_by_the_parsers(host: str) -> None:
    host_out, port = serve_command.parse_address(spec(host, 2087))
    assert port == 2087 and host_out in (host, "127.0.0.1")
    host_out, port = inspect_session.parse_address(spec(host, 5678))
    assert port == 5678 and host_out in (host, "127.0.0.1")


def free_port(family: socket.AddressFamily, host: str) -> int:
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def lsp_frame(payload: dict[str, object]) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_serve_tcp_on_loopback_answers(host: str, tmp_path: Path) -> None:
    family = socket.AF_INET6 if host == "::1" else socket.AF_INET
    connect_host = "127.0.0.1" if host == "localhost" else host
    port = free_port(family, connect_host)
    proc = subprocess.Popen([sys.executable, "-m", "stridelens", "serve", "--tcp", spec(host, port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                sock = socket.create_connection((connect_host, port), timeout=2)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the server never listened"
                time.sleep(0.1)
        with sock:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"processId": os.getpid(), "rootUri": tmp_path.as_uri(), "capabilities": {}}}  # fmt: skip
            sock.sendall(lsp_frame(init))
            sock.settimeout(20)
            data = b""
            while b'"id": 1' not in data and b'"id":1' not in data:
                chunk = sock.recv(65536)
                assert chunk, "the server closed the connection"
                data += chunk
            assert b"capabilities" in data
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_the_audit_hook_sees_sockets() -> None:
    """Control: the same runner does record a loopback connect (so an empty log means none)."""
    port = free_port(socket.AF_INET, "127.0.0.1")  # closed again: nothing listens there
    rc, events, err = run_audited("inspect", "--connect", f"localhost:{port}", "--memory", "--timeout", "1")
    assert rc == 1 and "nothing accepts connections" in err, err
    connects = [args for event, args in events if event == "socket.connect"]
    assert connects and all("127.0.0.1" in args for args in connects), events
