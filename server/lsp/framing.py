"""LSP base-protocol framing that survives a corrupt stream: bytes in, messages out.

A message is a header block (`Name: value` lines, one of them `Content-Length`, ended by a
blank line) and a body of exactly that many bytes. pygls 2.1.1 reads headers with a
case-sensitive full-line regex and trusts every length, so one wrong length glues a body to
the next header and no header ever matches again (docs/pygls-framing-defect.md). Here:

- header names are case-insensitive, other headers (Content-Type) are ignored, `\\n` works
  as well as `\\r\\n`, a UTF-8 BOM before a header block and blank lines between messages are
  skipped;
- anything else is a framing error: the bytes are skipped up to the next *real* header (a
  `Content-Length` line that starts a complete, valid header block) and reported once, as
  a `FramingError` carrying the first bytes skipped;
- a length that overshoots its body is caught without waiting for the missing bytes: a
  `Content-Length: N` line ended by a newline can never occur inside a JSON body (JSON
  strings cannot hold a raw newline, and the name is no JSON token elsewhere), so the body
  is cut where one appears;
- `StreamLost` is raised once more than `max_garbage` bytes were skipped with no message
  in between: the peer is not speaking LSP, and a restarted server is better than a deaf one.

No I/O here: `Deframer.feed` takes whatever chunk arrived and returns what it completed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Far above any document an editor syncs (VS Code syncs none above 50 MB), small enough that
# a hostile length cannot make the server buffer without bound.
MAX_CONTENT_LENGTH = 64 * 1024 * 1024
# Skipped bytes without a single message in between after which the stream is given up.
MAX_GARBAGE = 1024 * 1024
MAX_HEADER_BLOCK = 8 * 1024  # real clients send one or two short lines
SAMPLE = 64 * 1024  # skipped bytes kept for the log and for recovering a request id

BOM = b"\xef\xbb\xbf"
_NAME = b"content-length"
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LENGTH_VALUE = re.compile(rb"[ \t]*(\d{1,20})[ \t]*")
# Where a resync may start, and a complete length line (which no JSON body can contain).
_HEADER_START = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_HEADER_LINE = re.compile(rb"content-length[ \t]*:[ \t]*\d{1,20}[ \t]*\r?\n", re.IGNORECASE)
_HEADER_REST = re.compile(rb"[ \t]*(:[ \t]*(\d{1,20}[ \t]*\r?)?)?")
_LOOKAHEAD = 64  # longest tail that may still grow into a `_HEADER_LINE`


@dataclass(frozen=True)
class Message:
    body: bytes


@dataclass(frozen=True)
class FramingError:
    reason: str
    skipped: bytes  # the first SAMPLE bytes skipped
    size: int  # all bytes skipped


Event = Message | FramingError


class StreamLost(Exception):
    """More than `max_garbage` bytes without a message: the stream cannot be resynced."""


class _BadBlock(Exception):
    pass


class Deframer:
    def __init__(self, max_garbage: int = MAX_GARBAGE, max_length: int = MAX_CONTENT_LENGTH) -> None:
        self.max_garbage = max_garbage
        self.max_length = max_length
        self._buf = bytearray()
        self._length: int | None = None  # body state: bytes expected
        self._scanned = 0  # body state: buffer prefix already searched for a header line
        self._resync_from: int | None = None  # garbage state: search for a header from here
        self._error: str | None = None  # the framing error not reported yet
        self._sample = bytearray()  # its first skipped bytes
        self._skipped = 0  # and how many
        self._garbage = 0  # bytes skipped since the last message

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        events: list[Event] = []
        while self._step(events):
            pass
        return events

    def finish(self) -> list[Event]:
        """At the end of the stream: what was left undelivered, as a framing error."""
        if self._buf or self._length is not None:
            self._fail("the stream ended inside a message")
            self._sample += self._buf[: max(0, SAMPLE - len(self._sample))]
            self._skipped += len(self._buf)  # not `_skip`: the stream is over, nothing to give up
            self._buf.clear()
        events: list[Event] = []
        self._report(events)
        return events

    # ---- states ---------------------------------------------------------------------

    def _step(self, events: list[Event]) -> bool:
        """Advance by one state transition; False when more bytes are needed."""
        if self._resync_from is not None:
            return self._resync()
        if self._length is not None:
            return self._body(events)
        return self._headers(events)

    def _headers(self, events: list[Event]) -> bool:
        buf = self._buf
        # Blank lines and a BOM between messages are not errors.
        start = 0
        while True:
            if buf.startswith(BOM, start):
                start += len(BOM)
            elif buf.startswith(b"\r\n", start):
                start += 2
            elif buf.startswith(b"\n", start):
                start += 1
            else:
                break
        if start:
            del buf[:start]
        if not buf or (len(buf) < 3 and BOM.startswith(bytes(buf))) or buf == b"\r":
            return False
        try:
            parsed = _parse_block(buf, self.max_length)
        except _BadBlock as err:
            self._start_garbage(str(err))
            return True
        if parsed is None and len(buf) <= MAX_HEADER_BLOCK:
            return False
        if parsed is None or parsed[1] > MAX_HEADER_BLOCK:
            self._start_garbage(f"no header block ends within {MAX_HEADER_BLOCK} bytes")
            return True
        length, end = parsed
        del buf[:end]
        self._report(events)
        self._length, self._scanned = length, 0
        return True

    def _body(self, events: list[Event]) -> bool:
        length = self._length
        assert length is not None
        buf = self._buf
        # A length line inside the body: the length overshot, the body ends there.
        cut = _find_header_line(buf, max(0, self._scanned - _LOOKAHEAD), min(len(buf), length + _LOOKAHEAD))
        if cut is not None and cut < length:
            self._length = None
            self._fail(f"Content-Length {length} is longer than the body ({cut} bytes)")
            self._skip(buf[:cut])
            del buf[:cut]
            return True
        if len(buf) < length or _may_start_header(buf, length):
            self._scanned = len(buf)
            return False
        body = bytes(buf[:length])
        del buf[:length]
        self._length = None
        self._garbage = 0
        events.append(Message(body))
        return True

    def _resync(self) -> bool:
        buf = self._buf
        start = self._resync_from
        assert start is not None
        found = _HEADER_START.search(buf, start)
        if found is None:
            keep = max(start, len(buf) - _LOOKAHEAD)
            self._skip(buf[:keep])
            del buf[:keep]
            self._resync_from = 0
            return False
        self._skip(buf[: found.start()])
        del buf[: found.start()]
        self._resync_from = None  # try the block there; a bad one starts over one byte on
        return True

    # ---- skipping ---------------------------------------------------------------------

    def _start_garbage(self, reason: str) -> None:
        self._fail(reason)
        self._resync_from = 1  # the bad block's first byte is garbage; a header may follow

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = reason

    def _skip(self, data: bytes | bytearray) -> None:
        if len(self._sample) < SAMPLE:
            self._sample += data[: SAMPLE - len(self._sample)]
        self._skipped += len(data)
        self._garbage += len(data)
        if self._garbage > self.max_garbage:
            raise StreamLost(f"{self._garbage} bytes without a valid LSP message (first error: {self._error})")

    def _report(self, events: list[Event]) -> None:
        if self._error is not None:
            events.append(FramingError(self._error, bytes(self._sample), self._skipped))
            self._error, self._skipped = None, 0
            self._sample.clear()


def _parse_block(buf: bytearray, max_length: int) -> tuple[int, int] | None:
    """(content length, end of the header block) of the block at the start of `buf`, None
    while it is incomplete; `_BadBlock` when it cannot be one."""
    pos = 0
    length: int | None = None
    while True:
        nl = buf.find(b"\n", pos)
        if nl < 0:
            _check_partial_line(buf[pos:])
            return None
        line = bytes(buf[pos:nl]).rstrip(b"\r")
        pos = nl + 1
        if not line.strip():
            if length is None:
                raise _BadBlock("a header block without Content-Length")
            return length, pos
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise _BadBlock(f"not a header line: {line[:80]!r}")
        if name.lower() != _NAME:
            if _HEADER_START.search(line):  # a length header glued to other bytes
                raise _BadBlock(f"a Content-Length glued to other bytes: {line[:80]!r}")
            continue
        number = _LENGTH_VALUE.fullmatch(value)
        if number is None:
            raise _BadBlock(f"Content-Length is not a number: {value[:40]!r}")
        new = int(number.group(1))
        if new > max_length:
            raise _BadBlock(f"Content-Length {new} is above the limit of {max_length} bytes")
        if length is not None and new != length:
            raise _BadBlock(f"two different Content-Length headers ({length} and {new})")
        length = new


def _check_partial_line(line: bytearray) -> None:
    """Fail early on an unfinished line that cannot become a header line (a body sent
    without a header waits for no newline)."""
    name = bytes(line[:MAX_HEADER_BLOCK]).partition(b":")[0].rstrip(b"\r")
    if name and not _TOKEN.fullmatch(name):
        raise _BadBlock(f"not a header line: {bytes(line[:80])!r}")


def _find_header_line(buf: bytearray, start: int, end: int) -> int | None:
    """Where the first length line in buf[start:end] begins. Editors send bodies without a
    raw newline, so looking for newlines first keeps a 5 MB didOpen at memchr speed."""
    pos = start
    while True:
        nl = buf.find(b"\n", pos, end)
        if nl < 0:
            return None
        found = _HEADER_LINE.search(buf, max(start, nl - _LOOKAHEAD), nl + 1)
        if found is not None:
            return found.start()
        pos = nl + 1


def _may_start_header(buf: bytearray, length: int) -> bool:
    """Whether the body's last bytes, with the few received after it, could still grow into
    a length line: then more bytes decide where the body really ends."""
    lo = max(0, length - _LOOKAHEAD)
    tail = bytes(buf[lo : length + _LOOKAHEAD]).lower()
    for i in range(len(tail) - (len(buf) - length) - 1, -1, -1):
        if tail[i : i + 1] == b"c" and _grows_into_header(tail[i:]):
            return True
    return False


def _grows_into_header(text: bytes) -> bool:
    if len(text) <= len(_NAME):
        return _NAME.startswith(text)
    return text.startswith(_NAME) and _HEADER_REST.fullmatch(text, len(_NAME)) is not None
