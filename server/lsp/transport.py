"""The server's read loops over stdio and TCP, on our own framing (server/lsp/framing.py).

They replace pygls 2.1.1's `run` / `run_async` (pygls/io_.py), whose reader goes deaf for good
after one badly framed message. Each message goes to pygls' protocol exactly as pygls would
hand it over (`json.loads` with `structure_message`, then `handle_message`); what changes:

- a framing error is logged and skipped up to the next real header;
- a body that is not UTF-8 JSON, or bytes skipped while resyncing, are answered with a
  JSON-RPC parse error (-32700) under the id of the request they held, when one can be read
  from them (the client is waiting on that id). A well-framed body that is not JSON and
  holds no id gets the parse error with `"id": null`, as JSON-RPC 2.0 prescribes; skipped
  bytes that hold no id get no answer (nobody waits on them), only a log line;
- `StreamLost` (more than 1 MB without a message) ends the loop: the caller exits non-zero,
  and the editor restarts the server instead of talking to a deaf one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import BinaryIO

from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.server import JsonRPCServer

from stridelens.server.lsp.framing import SAMPLE, Deframer, FramingError, Message, StreamLost

log = logging.getLogger("stridelens.lsp")

PARSE_ERROR = -32700
EXIT_STREAM_LOST = 3  # any non-zero status makes editors restart the server; 3 says why
CHUNK = 64 * 1024
# A request's id as JSON-RPC allows it (a number or a string), and proof it was a request:
# a response from the client carries an id too, and must not be "answered".
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,19}(?![\d.eE])|"(?:[^"\\\x00-\x1f]|\\.){0,256}")')
_METHOD = re.compile(rb'"method"\s*:\s*"')

Read = Callable[[], Awaitable[bytes]]


def recover_id(data: bytes) -> int | str | None:
    """The id of the request whose bytes these were, if it can still be read."""
    if _METHOD.search(data) is None:
        return None
    found = _ID.search(data)
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


async def serve_stream(server: JsonRPCServer, read: Read, stop: threading.Event) -> None:
    """Read chunks until the stream ends or `stop` is set, handing each message to pygls.
    Raises `StreamLost` when the stream cannot be resynced."""
    deframer = Deframer()
    dispatcher = _Dispatcher(server)
    while not stop.is_set():
        data = await read()
        for event in deframer.feed(data) if data else deframer.finish():
            dispatcher.handle(event)
        if not data:
            dispatcher.flush()
            return


class _Dispatcher:
    def __init__(self, server: JsonRPCServer) -> None:
        self.server = server
        # A body that failed to parse and held no id: a too-short length cuts a request
        # between its id and its method, and the rest arrives as the next framing error.
        self._unanswered: bytes | None = None

    def handle(self, event: Message | FramingError) -> None:
        if isinstance(event, FramingError):
            self._framing_error(event)
            return
        self.flush()
        protocol = self.server.protocol
        try:
            # LSP bodies are UTF-8; json.loads on bytes would also guess UTF-16/32.
            message = json.loads(event.body.decode("utf-8-sig"), object_hook=protocol.structure_message)
        except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON, a 5000-digit int, nesting
            msg_id = recover_id(event.body)
            log.warning("a message of %d bytes is not UTF-8 JSON (%s)%s", len(event.body), err,
                        "" if msg_id is None else f"; request {msg_id!r} answered with a parse error")  # fmt: skip
            if msg_id is None:
                self._unanswered = event.body[:SAMPLE]
            else:
                _send_parse_error(self.server, msg_id, f"Parse error: {type(err).__name__}")
            return
        except Exception as exc:  # as in pygls: a message that fails must not end the loop
            log.exception("unable to read a message")
            self.server._report_server_error(exc, JsonRpcException)
            return
        try:
            protocol.handle_message(message)
        except BrokenPipeError:
            raise
        except Exception as exc:  # as in pygls: a message that fails must not end the loop
            log.exception("unable to handle a message")
            self.server._report_server_error(exc, JsonRpcException)

    def flush(self) -> None:
        """The parse error of a body that held no id: `"id": null`, as JSON-RPC wants."""
        if self._unanswered is not None:
            self._unanswered = None
            _send_parse_error(self.server, None, "Parse error: not UTF-8 JSON")

    def _framing_error(self, error: FramingError) -> None:
        before, self._unanswered = self._unanswered, None
        msg_id = recover_id(error.skipped if before is None else before + error.skipped)
        log.warning("framing error: %s; %d bytes skipped up to the next header (%r...)%s", error.reason,
                    error.size, error.skipped[:120], "" if msg_id is None else f"; request {msg_id!r} answered")  # fmt: skip
        if msg_id is not None:
            _send_parse_error(self.server, msg_id, f"Parse error: {error.reason}")
        elif before is not None:
            _send_parse_error(self.server, None, "Parse error: not UTF-8 JSON")


def _send_parse_error(server: JsonRPCServer, msg_id: int | str | None, message: str) -> None:
    server.protocol._send_data(
        {"jsonrpc": "2.0", "id": msg_id, "error": {"code": PARSE_ERROR, "message": message}}
    )


# ---- stdio ---------------------------------------------------------------------------


class _StdinReader:
    """One chunk per call, read by a daemon thread: blocked in `read`, it never holds up
    the process's exit (a thread pool would be joined), and it reads only when asked, so
    the pipe still pushes back on a client that writes faster than the server reads."""

    def __init__(self, stdin: BinaryIO, loop: asyncio.AbstractEventLoop) -> None:
        self._stdin = stdin
        self._loop = loop
        self._asks: queue.SimpleQueue[asyncio.Future[bytes]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="stridelens-stdin", daemon=True).start()

    def read(self) -> Awaitable[bytes]:
        future: asyncio.Future[bytes] = self._loop.create_future()
        self._asks.put(future)
        return future

    def _run(self) -> None:
        read = getattr(self._stdin, "read1", self._stdin.read)
        while True:
            future = self._asks.get()
            try:
                data = read(CHUNK)
            except (OSError, ValueError):
                data = b""
            self._loop.call_soon_threadsafe(_resolve, future, data)
            if not data:
                return


def _resolve(future: asyncio.Future[bytes], data: bytes) -> None:
    if not future.done():
        future.set_result(data)


def run_stdio(server: JsonRPCServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """Serve one client over stdin/stdout until stdin closes. Raises `StreamLost`."""
    stop = server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

    async def main() -> None:
        reader = _StdinReader(stdin or sys.stdin.buffer, asyncio.get_running_loop())
        await serve_stream(server, reader.read, stop)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("the client closed its end of the pipe")
    except (KeyboardInterrupt, SystemExit):
        pass


# ---- TCP -----------------------------------------------------------------------------


def run_tcp(server: JsonRPCServer, host: str, port: int) -> None:
    """Listen on host:port and serve the first client until it disconnects, as pygls'
    `start_tcp` does. Raises `StreamLost`."""
    stop = server._stop_event = threading.Event()
    lost: list[StreamLost] = []

    async def main() -> None:
        done = asyncio.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            server.protocol.set_writer(writer)  # type: ignore[arg-type]  # its write() is all pygls uses
            try:
                await serve_stream(server, lambda: reader.read(CHUNK), stop)
            except StreamLost as err:
                lost.append(err)
            except (BrokenPipeError, ConnectionError):
                log.error("the client's connection broke")
            finally:
                writer.close()
                done.set()

        listener = await asyncio.start_server(connection, host, port)
        log.info("serving on %s", ", ".join(str(s.getsockname()) for s in listener.sockets))
        async with listener:
            await done.wait()

    asyncio.run(main())
    if lost:
        raise lost[0]


def stream_lost(err: StreamLost) -> int:
    """Log why the stream was given up; the exit status to end the process with."""
    log.error("giving up on the input stream: %s; exiting so that the editor restarts the server", err)
    return EXIT_STREAM_LOST


__all__ = ["EXIT_STREAM_LOST", "StreamLost", "recover_id", "run_stdio", "run_tcp", "serve_stream", "stream_lost"]

