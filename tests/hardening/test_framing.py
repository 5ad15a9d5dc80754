"""Resync after framing errors (issue 20): properties of the framing layer, the real server
over stdio and over TCP, and the exit when a stream cannot be resynced.

The fixed cases (short/long lengths, lowercase headers, BOM, ...) are in test_hostile_lsp.py.
Here hypothesis mixes valid messages with garbage: random bytes, a soup of framing tokens,
and real requests framed wrongly. Every valid request after the last garbage must come out,
in order: from the framing layer alone (many examples, fast), and answered by a real
`stridelens serve` (fewer examples, one server for all of them).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stridelens.server.lsp.framing import Deframer, FramingError, Message, StreamLost

from .lsp_wire import SERVER, LspProcess, frame, free_port

CANARY = "import torch\nx = torch.zeros(2, 3)\ny = x.t()\n"
PARSE_ERROR = -32700

pytestmark = pytest.mark.timeout(180)

# ------------------------------------------------------------------------- strategies
TOKENS = [b"Content-Length", b"content-length", b"CONTENT-LENGTH", b"Content-Type: x", b":", b": ",
          b" ", b"\t", b"0", b"7", b"42", b"-1", b"99999999999", b"\r\n", b"\n", b"\r", b"\r\n\r\n",
          b"\xef\xbb\xbf", b"\xef\xbb", b"{", b"}", b'"id": 3', b'"method": "x"', b"\xff", b"\x00"]  # fmt: skip
# Ids of requests inside garbage are strings, those of valid requests ints: never confused.
GARBAGE_REQUEST = json.dumps({"jsonrpc": "2.0", "id": "garbage", "method": "textDocument/hover",
                              "params": {"textDocument": {"uri": "file:///g.py"},
                                         "position": {"line": 0, "character": 0}}}).encode()  # fmt: skip


@st.composite
def mangled_request(draw: st.DrawFn) -> bytes:
    body = GARBAGE_REQUEST[: draw(st.integers(1, len(GARBAGE_REQUEST)))]
    n = len(GARBAGE_REQUEST)
    header = draw(st.sampled_from([
        b"Content-Length: %d\r\n\r\n" % (n + draw(st.integers(-n, 300)) or 1),
        b"Content-Length: %d\r\n" % n,  # no blank line
        b"content-length:%d\n\n" % draw(st.integers(0, 2 * n)),
        b"Content-Length: -%d\r\n\r\n" % n,
        b"Content-Length: 99999999999999\r\n\r\n",
        b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (n, n + 1),
        b"",
    ]))  # fmt: skip
    return header + draw(st.sampled_from([body, GARBAGE_REQUEST, b""]))


GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=200),
    st.lists(st.sampled_from(TOKENS), min_size=1, max_size=30).map(b"".join),
    mangled_request(),
)
# A stream: valid messages (True) and garbage, in any order.
ITEMS = st.lists(st.one_of(st.just(True), GARBAGE), min_size=1, max_size=12)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def after_last_garbage(items: list[bool | bytes]) -> int:
    """How many valid messages follow the last garbage."""
    return next((i for i, item in enumerate(reversed(items)) if item is not True), len(items))


# ------------------------------------------------------------------------- framing layer
@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(items=ITEMS, cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_deframer_delivers_every_message_after_the_last_garbage(items: list[bool | bytes], cuts: list[int]) -> None:
    bodies: list[bytes] = []
    stream = b""
    for i, item in enumerate(items):
        if item is True:
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "textDocument/hover", "params": {"n": i}}).encode()
            bodies.append(body)
            stream += frame(body)
        else:
            assert isinstance(item, bytes)
            stream += item
    deframer = Deframer()
    events = [event for chunk in split(stream, cuts) for event in deframer.feed(chunk)]
    delivered = [e.body for e in events if isinstance(e, Message)]
    k = after_last_garbage(items)
    assert delivered[len(delivered) - k :] == bodies[len(bodies) - k :]
    assert all(e.size <= len(stream) for e in events if isinstance(e, FramingError))


def test_deframer_reports_a_message_cut_by_the_end_of_the_stream() -> None:
    deframer = Deframer()
    assert deframer.feed(b"Content-Length: 100\r\n\r\n{\"id\": 1") == []
    [error] = deframer.finish()
    assert isinstance(error, FramingError) and error.skipped == b'{"id": 1' and "ended" in error.reason


def test_deframer_gives_up_after_a_megabyte_of_garbage() -> None:
    deframer = Deframer()
    with pytest.raises(StreamLost, match="without a valid LSP message"):
        for _ in range(20):
            deframer.feed(b"garbage, no header in sight " * 2000)  # 56 KB a time


# ------------------------------------------------------------------------- real server
def start(tmp: Path, **kwargs: Any) -> LspProcess:
    (tmp / "canary.py").write_text(CANARY)
    server = LspProcess(cwd=tmp, **kwargs)
    server.initialize(tmp)
    server.canary = (tmp / "canary.py").as_uri()  # type: ignore[attr-defined]
    server.open(server.canary, CANARY)  # type: ignore[attr-defined]
    server.wait_analyzed(server.canary, exact=None)  # type: ignore[attr-defined]
    return server


def hover_request(server: LspProcess, msg_id: int) -> bytes:
    return frame({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/hover",
                  "params": {"textDocument": {"uri": server.canary},  # type: ignore[attr-defined]
                             "position": {"line": 1, "character": 0}}})  # fmt: skip


def answer_index(server: LspProcess, msg_id: int, timeout: float = 15.0) -> int:
    reply = server.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)
    assert "`x`" in json.dumps(reply.get("result")), reply
    with server.cond:
        return next(i for i, m in enumerate(server.messages) if m is reply)


def error_code(server: LspProcess, msg_id: int) -> int | None:
    reply = server.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, 10)
    return (reply.get("error") or {}).get("code")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LspProcess]:
    server = start(tmp_path_factory.mktemp("ws"))
    with server:
        yield server


IDS = itertools.count(10_000)


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(items=ITEMS, cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_server_answers_every_request_after_the_last_garbage(shared: LspProcess, items: list[bool | bytes],
                                                            cuts: list[int]) -> None:  # fmt: skip
    """One server for all examples: what one example leaves half-framed, the next resyncs."""
    sent: list[int] = []
    stream = b""
    for item in items:
        if item is True:
            sent.append(next(IDS))
            stream += hover_request(shared, sent[-1])
            if sent[-1] % 3 == 0:  # a notification too: answered by nothing, taken in all the same
                stream += frame({"jsonrpc": "2.0", "method": "$/setTrace", "params": {"value": "off"}})
        else:
            assert isinstance(item, bytes)
            stream += item
    for chunk in split(stream, cuts):
        shared.send_bytes(chunk)
    k = after_last_garbage(items)
    order = [answer_index(shared, msg_id) for msg_id in sent[len(sent) - k :]]
    assert order == sorted(order), "answered out of order"
    assert shared.proc.poll() is None


def test_resync_over_tcp(tmp_path: Path) -> None:
    with start(tmp_path, tcp_port=free_port()) as server:
        for msg_id, broken in ((501, b"Content-Length: 30\r\n\r\n"), (502, b"content-length: -1\r\n\r\n")):
            body = hover_request(server, msg_id).partition(b"\r\n\r\n")[2]
            server.send_bytes(broken + body)  # a short length, then a negative one
            server.send_bytes(hover_request(server, msg_id + 100))
            answer_index(server, msg_id + 100)
            assert error_code(server, msg_id) == PARSE_ERROR
        assert server.shutdown_and_exit() == 0


def test_exits_when_the_stream_cannot_be_resynced(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with start(tmp_path, cmd=[*SERVER, "--log-file", str(log)]) as server:
        # Under the limit (1 MB without a message): survived.
        server.send_bytes(b"\x00garbage without a header " * 35_000)  # 910 KB
        server.send_bytes(hover_request(server, 777))
        answer_index(server, 777)
        # Over it: the server says why in its log and exits non-zero (the editor restarts it).
        with contextlib.suppress(OSError):
            server.send_bytes(b"\x00garbage without a header " * 45_000)
        assert server.proc.wait(timeout=30) == 3
    text = log.read_text()
    assert "giving up on the input stream" in text and "without a valid LSP message" in text
