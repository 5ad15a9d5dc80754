"""`# noqa` comments: `# noqa` silences every rule on its line, `# noqa: SL101, SL2` some."""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable

from stridelens.server.rules.base import Finding

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]*(?:[\s,]+[A-Za-z]+[0-9]*)*))?", re.IGNORECASE)

ALL = frozenset({"*"})


def noqa_codes(line: str) -> frozenset[str] | None:
    """None when the line has no noqa comment; `ALL` for a bare `# noqa`; else the codes."""
    if "noqa" not in line and "NOQA" not in line:
        return None
    comment = _comment_of(line)
    if comment is None:
        return None
    match = _NOQA.search(comment)
    if match is None:
        return None
    codes = match.group("codes")
    if not codes:
        return ALL
    return frozenset(c.upper() for c in re.split(r"[\s,]+", codes.strip()) if c)


def _comment_of(line: str) -> str | None:
    """The comment part of one source line (a `#` inside a string does not count)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if tok.type == tokenize.COMMENT:
                return tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    # A line inside a multi-line construct does not tokenize alone: fall back to the text.
    index = line.find("#")
    return line[index:] if index >= 0 else None


def suppressed(finding: Finding, lines: list[str]) -> bool:
    for number in {finding.line, finding.end_line}:
        if not 1 <= number <= len(lines):
            continue
        codes = noqa_codes(lines[number - 1])
        if codes is None:
            continue
        if codes is ALL or any(finding.code.startswith(c) for c in codes):
            return True
    return False


def filter_suppressed(findings: Iterable[Finding], lines: list[str]) -> list[Finding]:
    return [f for f in findings if not suppressed(f, lines)]
