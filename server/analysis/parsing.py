"""Error-tolerant parsing: a file with a syntax error still yields its other statements.

On a `SyntaxError` the offending line is replaced by a placeholder of the same
indentation (`pass`, or `if True:` when it opened a block) and parsing is retried, so
line numbers and columns of every other statement stay exactly where they were.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

MAX_REPAIRS = 50
# The file name given to `ast.parse`. On a syntax error CPython opens the named file to quote
# the bad line; the default `<unknown>` is a relative path, opened in the server's working
# directory (the workspace), on about every keystroke. Nothing can exist under /dev/null.
UNOPENABLE = "/dev/null/<stridelens>"


@dataclass(frozen=True)
class BrokenLine:
    line: int  # 1-based
    message: str  # Python's own words ("'(' was never closed")
    # Where Python puts the error on that line: 1-based code-point columns, as `SyntaxError`
    # gives them for text; None where it gives none. They may point one past the line's end.
    col: int | None = None
    end_col: int | None = None


@dataclass
class ParseResult:
    tree: ast.Module
    lines: list[str]
    broken: list[BrokenLine]


def _indent_of(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _opens_block(lines: list[str], index: int) -> bool:
    here = len(_indent_of(lines[index]))
    for follow in lines[index + 1 :]:
        if follow.strip() and not follow.lstrip().startswith("#"):
            return len(_indent_of(follow)) > here
    return False


def _code_indent(lines: list[str], indices: range) -> int | None:
    """The indentation of the first line of code (not blank, not a comment) among `indices`."""
    for i in indices:
        text = lines[i]
        if text.strip() and not text.lstrip().startswith("#"):
            return len(_indent_of(text))
    return None


_BLOCK_HEADER = re.compile(r"(async\s+)?(def|class|if|elif|else|for|while|with|try|except|finally|match|case)\b")


def _placeholder_indent(lines: list[str], index: int) -> str:
    """The broken line's own indentation, unless it sits left of the code before it and is
    no block header (text pasted at column 0 inside a class): a placeholder there would close
    the block, and the block's next line would be an indentation error of its own. It then
    takes the previous line's indentation, so the block goes on. A header being typed
    (`def g(x)` without its colon) keeps its place: its body follows it."""
    text = lines[index]
    own = _indent_of(text)
    before = _code_indent(lines, range(index - 1, -1, -1))
    if before is None or len(own) >= before or _BLOCK_HEADER.match(text.lstrip()):
        return own
    return " " * before


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(source: str) -> list[str]:
    """Lines as Python's tokenizer counts them (`str.splitlines` also breaks on form feeds,
    U+2028 and friends, which would shift every position after them)."""
    # `str.split` is several times faster than the regex, and most files have no `\r`.
    lines = source.split("\n") if "\r" not in source else _LINE_BREAK.split(source)
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    return lines if source else []


def _position(err: BaseException, work: list[str]) -> tuple[int, int | None, int | None]:
    """(1-based line, 1-based column, end column) of a parse error; the end only where it is
    on the same line and after the start."""
    lineno = getattr(err, "lineno", None)
    col = getattr(err, "offset", None)
    if not lineno:
        # Python 3.11 gives a NUL byte no position: the first one is where it is.
        for number, text in enumerate(work, start=1):
            if "\x00" in text:
                return number, text.index("\x00") + 1, text.index("\x00") + 2
        return len(work), None, None
    end_line, end_col = getattr(err, "end_lineno", None), getattr(err, "end_offset", None)
    if not isinstance(col, int) or col < 1:
        return lineno, None, None
    if end_line != lineno or not isinstance(end_col, int) or end_col <= col:
        end_col = None
    return lineno, col, end_col


def parse_tolerant(source: str) -> ParseResult:
    lines = split_lines(source)
    broken: list[BrokenLine] = []
    work = list(lines)
    for _ in range(MAX_REPAIRS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SyntaxWarning on odd escapes etc.
                tree = ast.parse("\n".join(work) + "\n", filename=UNOPENABLE)
            return ParseResult(tree, lines, broken)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            if not work:
                break
            lineno, col, end_col = _position(err, work)
            index = min(max(lineno, 1), len(work)) - 1
            msg = getattr(err, "msg", None) or str(err) or type(err).__name__
            broken.append(BrokenLine(index + 1, msg, col, end_col))
            end = getattr(err, "end_lineno", None) or lineno
            if end > lineno:  # e.g. an unclosed bracket: blank the whole span
                for j in range(index + 1, min(end, len(work))):
                    work[j] = ""
            indent = _placeholder_indent(work, index)
            placeholder = "if True:" if _opens_block([*work[:index], indent, *work[index + 1 :]], index) else "pass"
            if work[index].strip() == placeholder or isinstance(err, RecursionError):
                # No progress on this line: drop everything from here on.
                work = work[:index]
                continue
            work[index] = indent + placeholder
    return ParseResult(ast.Module(body=[], type_ignores=[]), lines, broken)
