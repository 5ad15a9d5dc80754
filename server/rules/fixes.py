"""Applying quick fixes to source text: non-overlapping edits, result must still parse."""

from __future__ import annotations

import ast
import itertools
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from stridelens.server.analysis.parsing import UNOPENABLE
from stridelens.server.rules.base import Finding, Fix, TextEdit


@dataclass
class FixResult:
    source: str
    applied: list[Finding]
    skipped: list[Finding]  # overlapping another fix, or leaving the file unparseable


def _offsets(source: str) -> list[int]:
    """Character offset of the start of each line (1-based line -> index line-1)."""
    starts = [0]
    for i, ch in enumerate(source):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def _span(starts: list[int], source: str, edit: TextEdit) -> tuple[int, int] | None:
    if not (1 <= edit.line <= len(starts) and 1 <= edit.end_line <= len(starts)):
        if edit.line == len(starts) + 1 and edit.col == 1:  # insertion at end of file
            return len(source), len(source)
        return None
    start = starts[edit.line - 1] + edit.col - 1
    end = starts[edit.end_line - 1] + edit.end_col - 1
    if start > end or end > len(source):
        return None
    return start, end


def parses(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source, filename=UNOPENABLE)  # opens no file on a syntax error
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def apply_edits(source: str, edits: Iterable[TextEdit]) -> str | None:
    """Apply edits of one fix; None when they overlap or fall outside the text."""
    starts = _offsets(source)
    spans = []
    for edit in edits:
        span = _span(starts, source, edit)
        if span is None:
            return None
        spans.append((span[0], span[1], edit.new_text))
    spans.sort(key=lambda s: (s[0], s[1]))
    for (_, end, _), (start, _, _) in itertools.pairwise(spans):
        if start < end:
            return None
    out = source
    for start, end, text in reversed(spans):
        out = out[:start] + text + out[end:]
    return out


def apply_fixes(source: str, findings: Iterable[Finding], *, unsafe: bool = False) -> FixResult:
    """Apply the fixes of `findings` (safe ones only unless `unsafe`) to `source`.

    Fixes are taken in position order; one that overlaps an already accepted fix, or
    whose result does not parse, is skipped (run again to apply it on the new text).
    """
    starts = _offsets(source)
    accepted: list[tuple[int, int, Finding, Fix]] = []
    skipped: list[Finding] = []
    candidates = [f for f in findings if f.fix is not None and (unsafe or f.fix.safe)]
    candidates.sort(key=lambda f: (f.line, f.col, f.code))
    taken: list[tuple[int, int]] = []
    for finding in candidates:
        fix = finding.fix
        assert fix is not None
        spans = [_span(starts, source, e) for e in fix.edits]
        if not spans or any(s is None for s in spans):
            skipped.append(finding)
            continue
        ranges = [s for s in spans if s is not None]
        lo, hi = min(s[0] for s in ranges), max(s[1] for s in ranges)
        if any((lo < t_hi and t_lo < hi) or (lo == hi == t_lo) or (t_lo == t_hi == lo) for t_lo, t_hi in taken):
            skipped.append(finding)
            continue
        alone = apply_edits(source, fix.edits)
        if alone is None or not parses(alone):
            skipped.append(finding)
            continue
        taken.append((lo, hi))
        accepted.append((lo, hi, finding, fix))
    edits = [e for _, _, _, fix in accepted for e in fix.edits]
    result = apply_edits(source, edits) if edits else source
    if result is None or not parses(result):
        return FixResult(source, [], [f for _, _, f, _ in accepted] + skipped)
    return FixResult(result, [f for _, _, f, _ in accepted], skipped)
