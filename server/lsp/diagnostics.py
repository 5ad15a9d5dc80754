"""Findings of the rules -> LSP diagnostics (publishDiagnostics).

Each diagnostic carries its rule code, a severity (after the user's overrides), a link to
the rule's documentation, and in `data` the quick fix as LSP text edits computed at
analysis time, so a code action needs no new analysis.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from lsprotocol import types
from lsprotocol.converters import get_converter

from stridelens.server.analysis import Analysis
from stridelens.server.lsp.configuration import Settings
from stridelens.server.lsp.documents import Encoding, lsp_range
from stridelens.server.rules import ALL_RULES, ALWAYS_REPORTED, Finding, Severity, run_rules

SOURCE = "stridelens"
_CONVERTER = get_converter()
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)

LSP_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFORMATION: types.DiagnosticSeverity.Information,
    Severity.HINT: types.DiagnosticSeverity.Hint,
}


def noqa_codes(line: str) -> set[str] | None:
    """Codes a `# noqa` comment on this line suppresses; {"*"} for a bare `# noqa`."""
    if "#" not in line:
        return None
    match = NOQA.search(line)
    if match is None:
        return None
    codes = match.group("codes")
    if not codes:
        return {"*"}
    return {c.strip().upper() for c in codes.split(",")}


def suppressed(finding: Finding, lines: list[str]) -> bool:
    text = lines[finding.line - 1] if 1 <= finding.line <= len(lines) else ""
    codes = noqa_codes(text)
    return codes is not None and ("*" in codes or finding.code in codes)


def check(analysis: Analysis, settings: Settings, lines: list[str]) -> list[Finding]:
    """The rules chosen by the settings, without the findings a `# noqa` silences (a syntax
    error, SL001, is never silenced)."""
    findings = run_rules(
        analysis, select=settings.select, ignore=settings.ignore, no_grad_functions=settings.no_grad_functions
    )
    return [f for f in findings if f.code in ALWAYS_REPORTED or not suppressed(f, lines)]


def fix_data(finding: Finding, lines: list[str], enc: Encoding) -> dict[str, Any] | None:
    if finding.fix is None:
        return None
    edits = []
    for e in finding.fix.edits:
        rng = lsp_range(lines, enc, e.line, e.col, e.end_line, e.end_col)
        edits.append(
            {
                "range": {
                    "start": {"line": rng.start.line, "character": rng.start.character},
                    "end": {"line": rng.end.line, "character": rng.end.character},
                },
                "newText": e.new_text,
            }
        )
    return {"title": finding.fix.title, "edits": edits, "safe": bool(getattr(finding.fix, "safe", False))}


def to_diagnostic(
    finding: Finding, lines: list[str], enc: Encoding, settings: Settings, version: int | None
) -> types.Diagnostic:
    rule = ALL_RULES.get(finding.code)
    severity = settings.severity.get(finding.code, finding.severity)
    data: dict[str, Any] = {"version": version}
    fix = fix_data(finding, lines, enc)
    if fix is not None:
        data["fix"] = fix
    return types.Diagnostic(
        range=lsp_range(lines, enc, finding.line, finding.col, finding.end_line, finding.end_col),
        message=finding.message,
        severity=LSP_SEVERITY.get(severity, types.DiagnosticSeverity.Warning),
        code=finding.code,
        code_description=types.CodeDescription(href=rule.url) if rule is not None else None,
        source=SOURCE,
        data=data,
    )


def to_diagnostics(
    findings: Iterable[Finding], lines: list[str], enc: Encoding, settings: Settings, version: int | None
) -> list[types.Diagnostic]:
    return [to_diagnostic(f, lines, enc, settings, version) for f in findings]


class WireDiagnostics:
    """Diagnostics as publishDiagnostics sends them (lsprotocol's JSON), each reused while
    its finding, severity and lines stay the same: building and serialising a 3,000-line
    file's 178 through lsprotocol's classes took 6-11 ms at every publish, a third of an
    edit's answer, for findings the edit did not touch. Only `data.version` changes."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Finding, str, Severity], tuple[tuple[str, ...], dict[str, Any]]] = {}

    def __call__(
        self, findings: Iterable[Finding], lines: list[str], enc: Encoding, settings: Settings, version: int | None
    ) -> list[dict[str, Any]]:
        out = []
        entries = {}
        for finding in findings:
            severity = settings.severity.get(finding.code, finding.severity)
            key = (finding, enc.kind, severity)
            text = _lines_read(finding, lines)
            entry = self._entries.get(key)
            if entry is None or entry[0] != text:
                entry = (text, _CONVERTER.unstructure(to_diagnostic(finding, lines, enc, settings, None)))
            entries[key] = entry
            wire = entry[1]
            out.append({**wire, "data": {**wire["data"], "version": version}})
        self._entries = entries  # the last publish's only: the cache never outgrows a file
        return out


def _lines_read(finding: Finding, lines: list[str]) -> tuple[str, ...]:
    """The lines whose text the diagnostic's ranges (its fix's included) are computed from."""
    first, last = finding.line, finding.end_line
    if finding.fix is not None:
        for e in finding.fix.edits:
            first, last = min(first, e.line), max(last, e.end_line)
    return tuple(lines[max(first - 1, 0) : last])


_CHUNK = 64


def changed_block(old: list[str], new: list[str]) -> tuple[int, int, int]:
    """(first changed line, end in old, end in new), 0-based, from common prefix/suffix."""
    limit = min(len(old), len(new))
    p = 0
    while p + _CHUNK <= limit and old[p : p + _CHUNK] == new[p : p + _CHUNK]:
        p += _CHUNK  # (a slice compare runs in C: a 3,000-line file in ~50 steps, not 3,000)
    while p < limit and old[p] == new[p]:
        p += 1
    s = 0
    n_old, n_new = len(old), len(new)
    while s + _CHUNK <= limit - p and old[n_old - s - _CHUNK : n_old - s] == new[n_new - s - _CHUNK : n_new - s]:
        s += _CHUNK
    while s < limit - p and old[n_old - 1 - s] == new[n_new - 1 - s]:
        s += 1
    return p, n_old - s, n_new - s


def carry_over(old_findings: list[Finding], old: list[str], new: list[str]) -> list[Finding]:
    """Findings of an older text that stay valid for a new one: those outside the edited
    lines, moved by the number of lines the edit added or removed."""
    from dataclasses import replace

    start, old_end, new_end = changed_block(old, new)
    delta = new_end - old_end
    kept = []
    for f in old_findings:
        if f.end_line - 1 < start:
            kept.append(f)
        elif f.line - 1 >= old_end:
            fix = f.fix
            if fix is not None:
                fix = replace(
                    fix,
                    edits=tuple(replace(e, line=e.line + delta, end_line=e.end_line + delta) for e in fix.edits),
                )
            kept.append(replace(f, line=f.line + delta, end_line=f.end_line + delta, fix=fix))
    return kept


def merge(provisional: list[Finding], fresh: list[Finding]) -> list[Finding]:
    seen = {(f.line, f.col, f.code) for f in fresh}
    out = list(fresh) + [f for f in provisional if (f.line, f.col, f.code) not in seen]
    out.sort(key=lambda f: (f.line, f.col, f.code))
    return out
