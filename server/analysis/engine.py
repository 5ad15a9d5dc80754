"""`Analysis`: the result of analysing one file, and how to ask it about a position."""

from __future__ import annotations

import ast
import codecs
import io
import os
import re
import tokenize
import warnings
from dataclasses import dataclass, field
from typing import Any

from stridelens.i18n import tr
from stridelens.server.analysis.facts import ReplayEvent, TensorFact
from stridelens.server.analysis.interpreter import Interpreter
from stridelens.server.analysis.parsing import BrokenLine, parse_tolerant
from stridelens.server.analysis.positions import byte_to_char, char_to_byte
from stridelens.server.analysis.values import ListOf, SeqValue, Value

# Statements interpreted per pass (function bodies followed from a call included): a count of
# work, not seconds, so the same text gives the same facts and findings on every machine. About
# 5 s of symbolic analysis on a 2-core laptop; a 3,000-line model file takes about 4,800.
DEFAULT_BUDGET_STEPS = 25_000
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_FILE_BYTES = 8 * 1024 * 1024


class SourceError(Exception):
    """A file that cannot be analysed: missing, unreadable, not in its encoding, too large."""


@dataclass(frozen=True)
class SourceText:
    text: str  # without a byte order mark
    encoding: str  # the codec that writes it back as it was ("utf-8-sig" keeps a BOM)


# PEP 263: a comment on line 1 or 2 (line 2 only under a blank or comment line 1), as Python reads it.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BLANK_OR_COMMENT = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)")


def _declared_encoding(data: bytes) -> tuple[str, int] | None:
    """The encoding a coding comment declares, and its line."""
    lines = data.removeprefix(codecs.BOM_UTF8).split(b"\n", 2)[:2]
    for number, line in enumerate(lines, start=1):
        match = _CODING.match(line)
        if match:
            return match.group(1).decode("ascii"), number
        if not _BLANK_OR_COMMENT.match(line):
            break
    return None


def read_source(path: str) -> str:
    return read_source_text(path).text


def read_source_text(path: str) -> SourceText:
    """The file's text as Python reads it: in the encoding its coding comment declares (PEP
    263), else UTF-8, a byte order mark removed. SourceError (one line) when it cannot be."""
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise SourceError(tr("{path}: file is too large to analyse ({size} bytes)").format(path=path, size=size))
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise SourceError(tr("{path}: no such file").format(path=path)) from None
    except IsADirectoryError:
        raise SourceError(tr("{path}: is a directory").format(path=path)) from None
    except OSError as err:
        raise SourceError(tr("{path}: cannot read: {error}").format(path=path, error=err.strerror or err)) from None
    return decode_source(path, data)


def decode_source(path: str, data: bytes) -> SourceText:
    """`data` decoded as Python decodes a source file (`tokenize.detect_encoding`)."""
    declared = _declared_encoding(data)
    name, line = declared if declared is not None else ("utf-8", 0)
    try:
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError:
        # An unknown name, a BOM with another encoding, or bytes that are not UTF-8 before the
        # comment (which Python itself accepts: it reads the comment from the bytes).
        try:
            codec = codecs.lookup(name)
        except LookupError:
            raise SourceError(
                tr("{path}: line {line} declares the encoding {encoding!r}, which Python does not know").format(
                    path=path, line=line, encoding=name
                )
            ) from None
        if data.startswith(codecs.BOM_UTF8) and codec.name != "utf-8":
            raise SourceError(
                tr("{path}: starts with a UTF-8 byte order mark, but line {line} declares the encoding {encoding!r}").format(
                    path=path, line=line, encoding=name
                )
            ) from None
        encoding = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else codec.name
    try:
        text = data.decode(encoding)
    except LookupError:  # `# coding: rot13`: a codec, but not of bytes to text
        raise SourceError(
            tr("{path}: line {line} declares {encoding!r}, which is not a text encoding").format(
                path=path, line=line, encoding=name
            )
        ) from None
    except UnicodeDecodeError as err:
        start = data.rfind(b"\n", 0, err.start) + 1
        where = {
            "path": path,
            "byte": f"0x{data[err.start]:02x}",
            "line": data.count(b"\n", 0, err.start) + 1,
            "col": len(data[start : err.start].decode(encoding, errors="replace")) + 1,
        }
        if declared is None:
            raise SourceError(
                tr("{path}: not valid UTF-8 (byte {byte} at line {line}, column {col}); a file in another "
                   "encoding declares it on its first line (PEP 263): `# -*- coding: latin-1 -*-`").format(**where)
            ) from None
        raise SourceError(
            tr("{path}: not valid {encoding}, the encoding declared on line {cookie_line} (byte {byte} at line "
               "{line}, column {col})").format(encoding=name, cookie_line=line, **where)
        ) from None
    return SourceText(text.removeprefix("\ufeff"), encoding)


@dataclass
class Explanation:
    """What is known of one expression."""

    expr: str
    node: ast.AST
    fact: TensorFact | None
    items: tuple[TensorFact | None, ...] | None = None  # for tuple results (chunk, split...)

    @property
    def knows_something(self) -> bool:
        return self.fact is not None or self.items is not None

    def answer(self) -> dict[str, Any] | None:
        """The `explain --format json` answer: the facts, or None where nothing is known."""
        return self.to_json() if self.knows_something else None

    def to_json(self) -> dict[str, Any]:
        if self.fact is not None:
            return self.fact.to_json(self.expr)
        out = TensorFact().to_json(self.expr)
        if self.items is not None:
            shapes = [list(i.shape) if i is not None and i.shape is not None else None for i in self.items]
            out["notes"] = [f"a tuple of {len(self.items)} tensors with shapes {shapes}"]
        return out


@dataclass
class Analysis:
    path: str
    source: str
    lines: list[str]
    tree: ast.Module
    broken: list[BrokenLine]
    values: dict[ast.AST, Value]
    events: list[ReplayEvent]
    timed_out: bool
    exact: bool
    steps: int = 0  # statements interpreted (what `budget_steps` counts)
    grad_enabled: dict[ast.stmt, bool] = field(default_factory=dict)
    # Symbolic analyses only: storages whose sizes an exact (replayed) pass would know.
    sized_storages: set[int] = field(default_factory=set)
    _parents: dict[ast.AST, ast.AST] | None = field(default=None, repr=False)
    # What lazily rendered facts read their names from (the interpreter's scope snapshots):
    # they hold it weakly, so the analysis keeps it alive, and no cycle keeps the analysis.
    renderer_state: object = field(default=None, repr=False, compare=False)
    # Set by `run_rules`: names a framework runs with grad disabled (project configuration).
    no_grad_functions: tuple[str, ...] = ()

    def fact_of(self, node: ast.AST) -> TensorFact | None:
        value = self.values.get(node)
        return value if isinstance(value, TensorFact) else None

    def value_of(self, node: ast.AST) -> Value | None:
        return self.values.get(node)

    def parent_of(self, node: ast.AST) -> ast.AST | None:
        if self._parents is None:
            self._parents = {
                child: parent for parent in ast.walk(self.tree) for child in ast.iter_child_nodes(parent)
            }
        return self._parents.get(node)

    def grad_enabled_at(self, stmt: ast.stmt) -> bool | None:
        """False inside `torch.no_grad()` / `inference_mode()` / `@torch.no_grad()` bodies."""
        return self.grad_enabled.get(stmt)

    def replay_matters_at(self, line: int) -> bool:
        """Whether an exact (replayed) pass may answer differently at `line` than this
        symbolic one: some fact of the code that reaches it has sizes a replay would know
        (`sized_storages`). That code is the enclosing function's body (its facts also carry
        what followed calls and globals gave), or, at module level, the module's own
        statements. False for an exact analysis: it has replayed already."""
        keys = self.sized_storages
        if self.exact or not keys:
            return False
        scope: ast.AST = self.tree
        stack: list[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt) and child.lineno <= line <= (child.end_lineno or child.lineno):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        scope = child
                    stack.append(child)
        todo: list[ast.AST] = [scope]
        while todo:
            node = todo.pop()
            value = self.values.get(node)
            if isinstance(value, TensorFact) and value.storage_key in keys:
                return True
            for child in ast.iter_child_nodes(node):
                if scope is self.tree and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue  # module level: its own statements (and class bodies), not the defs
                todo.append(child)
        return False

    def line_is_broken(self, line: int) -> BrokenLine | None:
        return next((b for b in self.broken if b.line == line), None)

    def node_at(self, line: int, char_col: int) -> ast.expr | None:
        """The innermost expression covering (1-based line, 0-based character column)."""
        if not 1 <= line <= len(self.lines):
            return None
        text = self.lines[line - 1]
        col = char_to_byte(text, char_col)
        best: ast.expr | None = None
        stack: list[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                start = getattr(child, "lineno", None)
                if start is None:
                    stack.append(child)  # arguments, comprehension, keyword, ...
                    continue
                end = getattr(child, "end_lineno", start) or start
                if not start <= line <= end:
                    continue
                if isinstance(child, ast.expr):
                    c0 = child.col_offset if start == line else 0
                    c1 = (child.end_col_offset or 0) if end == line else 10**9
                    if not c0 <= col < c1:
                        continue
                    best = child
                stack.append(child)
        return best

    def explain_at(self, line: int, char_col: int) -> Explanation | None:
        node = self.node_at(line, char_col)
        if node is None:
            return None
        # On the method name of a call, explain the call's result.
        parent = self.parent_of(node)
        if isinstance(node, ast.Attribute) and isinstance(parent, ast.Call) and parent.func is node:
            if not isinstance(self.values.get(node), TensorFact):
                node = parent
        value = self.values.get(node)
        expr = self.segment(node)
        if isinstance(value, TensorFact):
            return Explanation(expr, node, value)
        if isinstance(value, SeqValue) and all(isinstance(v, TensorFact) for v in value.items):
            items = tuple(v if isinstance(v, TensorFact) else None for v in value.items)
            return Explanation(expr, node, None, items)
        if isinstance(value, ListOf) and isinstance(value.item, TensorFact):
            return Explanation(expr, node, None, ())
        return Explanation(expr, node, None)

    def segment(self, node: ast.AST) -> str:
        """The source text of `node` (like `ast.get_source_segment`, without re-splitting
        the whole file on every call)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if start is None or end is None or col is None or end_col is None or end > len(self.lines):
            return ast.unparse(node)
        if start == end:
            data = self.lines[start - 1].encode("utf-8")
            return data[col:end_col].decode("utf-8", errors="replace")
        first = self.lines[start - 1].encode("utf-8")[col:].decode("utf-8", errors="replace")
        last = self.lines[end - 1].encode("utf-8")[:end_col].decode("utf-8", errors="replace")
        return "\n".join([first, *self.lines[start : end - 1], last])

    def char_col(self, line: int, byte_col: int) -> int:
        if not 1 <= line <= len(self.lines):
            return byte_col
        return byte_to_char(self.lines[line - 1], byte_col)


def analyze_source(
    source: str,
    path: str = "<string>",
    *,
    replay: bool = True,
    budget_steps: int | None = DEFAULT_BUDGET_STEPS,
    file_text: str | None = None,
) -> Analysis:
    """Analyse one file's text. Never executes it; never raises on bad input. `budget_steps`:
    statements interpreted before the analysis stops (`timed_out`; None: no limit).
    `file_text`: the whole file, where `source` is part of it (its other bodies blanked):
    file-wide choices (does the file change a dtype, freeze parameters) are read from it."""
    source = source.removeprefix("\ufeff")
    if not source.isascii() and _LONE_SURROGATE.search(source):
        # An editor buffer may hold a lone UTF-16 surrogate; nothing can encode or parse it.
        # U+FFFD is one character and one UTF-16 unit too, so every column stays put.
        source = _LONE_SURROGATE.sub("\ufffd", source)
    parsed = parse_tolerant(source)
    interpreter = Interpreter(parsed.tree, replay=replay, budget_steps=budget_steps, source=source, file_text=file_text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own UserWarnings during replay
        interpreter.run()
    seen: set[tuple[str, int, int]] = set()
    events = []
    for event in interpreter.events:  # loop bodies run twice: report once
        key = (event.kind, event.line, event.col)
        if key not in seen:
            seen.add(key)
            events.append(event)
    return Analysis(
        path=path,
        source=source,
        lines=parsed.lines,
        tree=parsed.tree,
        broken=parsed.broken,
        values=interpreter.facts,
        events=events,
        timed_out=interpreter.timed_out,
        steps=interpreter.steps,
        exact=replay,
        grad_enabled=interpreter.grad_enabled,
        sized_storages=interpreter.sized_storages,
        renderer_state=interpreter,
    )


def analyze_file(path: str, *, replay: bool = True, budget_steps: int | None = DEFAULT_BUDGET_STEPS) -> Analysis:
    return analyze_source(read_source(path), path, replay=replay, budget_steps=budget_steps)
