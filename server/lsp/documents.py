"""Open documents, their analyses, and position conversions.

The analysis engine speaks 1-based lines and 0-based *character* columns (rules: 1-based
characters); LSP speaks 0-based lines and columns in the negotiated position encoding
(UTF-16 code units unless the client asked for UTF-8 or UTF-32).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from lsprotocol import types
from lsprotocol.converters import get_converter

from stridelens.server.analysis import Analysis, collector
from stridelens.server.analysis.positions import (
    byte_to_char,
    char_to_byte,
    char_to_utf16,
    utf16_to_char,
)
from stridelens.server.lsp.configuration import Settings
from stridelens.server.rules import Finding

T = TypeVar("T")


class Encoding:
    """Column conversions for one position encoding."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind = str(getattr(kind, "value", kind) or "utf-16")

    def to_char(self, line: str, col: int) -> int:
        if col <= 0:
            return 0
        if self.kind == "utf-8":
            return byte_to_char(line, col)
        if self.kind == "utf-32":
            return min(col, len(line))
        return utf16_to_char(line, col)

    def from_char(self, line: str, char_col: int) -> int:
        char_col = max(0, min(char_col, len(line)))
        if self.kind == "utf-8":
            return char_to_byte(line, char_col)
        if self.kind == "utf-32":
            return char_col
        return char_to_utf16(line, char_col)


def uri_to_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return uri


def split_lines(text: str) -> list[str]:
    """Lines as LSP counts them (\\n, \\r\\n and \\r end a line), without their ends."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


@dataclass
class Snapshot:
    """One finished analysis of one text of a document."""

    version: int | None
    text: str
    analysis: Analysis
    findings: list[Finding]
    exact: bool
    settings: Settings | None = None  # what the findings were chosen with (None: no rules ran)


@dataclass
class DocState:
    uri: str
    path: str
    version: int | None
    text: str
    lines: list[str] = field(default_factory=list)
    symbolic: Snapshot | None = None
    exact: Snapshot | None = None
    published: list[Finding] = field(default_factory=list)
    # What the last publishDiagnostics sent, as sent (diagnostics.WireDiagnostics).
    published_wire: list[dict[str, Any]] = field(default_factory=list)
    _published_objects: list[types.Diagnostic] | None = field(default=None, repr=False, compare=False)
    published_version: int | None = None
    task: asyncio.Task[None] | None = None
    # A symbolic analysis made on demand for a text no finished run covers yet.
    adhoc: Snapshot | None = None
    # Analyses of this document running on a worker thread now (`counted`).
    running: int = 0
    _running_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.lines = split_lines(self.text)

    def set_text(self, text: str, version: int | None) -> None:
        self.text = text
        self.version = version
        self.lines = split_lines(text)

    @property
    def published_diagnostics(self) -> list[types.Diagnostic]:
        """The last published diagnostics as lsprotocol objects (made when first asked: code
        actions and notebook cells need them, a publish does not)."""
        if self._published_objects is None:
            self._published_objects = get_converter().structure(self.published_wire, list[types.Diagnostic])
        return self._published_objects

    def set_published(self, wire: list[dict[str, Any]]) -> None:
        self.published_wire = wire
        self._published_objects = None

    def counted(self, job: Callable[[], T]) -> Callable[[], T]:
        """`job`, counted in `running` while a worker thread runs it (with the collector
        held off: collector.analysing)."""

        def run() -> T:
            with self._running_lock:  # the two lanes' threads may run this document at once
                self.running += 1
            try:
                with collector.analysing():
                    return job()
            finally:
                with self._running_lock:
                    self.running -= 1

        return run

    def current(self) -> Snapshot | None:
        """The best finished analysis of the current text: exact before symbolic."""
        for snap in (self.exact, self.symbolic, self.adhoc):
            if snap is not None and snap.text == self.text:
                return snap
        return None

    def latest(self) -> Snapshot | None:
        """The newest analysis of any text (for answers while a run is in flight)."""
        candidates = [s for s in (self.exact, self.symbolic, self.adhoc) if s is not None]
        if not candidates:
            return None
        return max(candidates, key=lambda s: (s.version or 0, s.exact))

    def line(self, line0: int) -> str:
        return self.lines[line0] if 0 <= line0 < len(self.lines) else ""


def lsp_range(
    doc_lines: list[str], enc: Encoding, line: int, col: int, end_line: int, end_col: int
) -> types.Range:
    """1-based line, 1-based character columns (end exclusive) -> an LSP Range."""

    def pos(ln: int, c: int) -> types.Position:
        text = doc_lines[ln - 1] if 1 <= ln <= len(doc_lines) else ""
        return types.Position(line=max(ln - 1, 0), character=enc.from_char(text, c - 1))

    return types.Range(start=pos(line, col), end=pos(end_line, end_col))
