"""textDocument/codeAction: the quick fix of each finding (stored in `Diagnostic.data` at
analysis time), "suppress SLnnn on this line", and `source.fixAll.stridelens`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lsprotocol import types

from stridelens.server.lsp.diagnostics import NOQA, SOURCE
from stridelens.server.lsp.documents import Encoding

FIX_ALL_KIND = "source.fixAll.stridelens"
KINDS = [types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll, FIX_ALL_KIND]


def _range(raw: dict[str, Any]) -> types.Range:
    return types.Range(
        start=types.Position(line=int(raw["start"]["line"]), character=int(raw["start"]["character"])),
        end=types.Position(line=int(raw["end"]["line"]), character=int(raw["end"]["character"])),
    )


def fix_of(diag: types.Diagnostic) -> tuple[str, list[types.TextEdit]] | None:
    data = diag.data
    if not isinstance(data, dict) or not isinstance(data.get("fix"), dict):
        return None
    try:
        fix = data["fix"]
        edits = [types.TextEdit(range=_range(e["range"]), new_text=str(e["newText"])) for e in fix["edits"]]
        return str(fix["title"]), edits
    except (KeyError, TypeError, ValueError):
        return None


def _ours(diag: types.Diagnostic) -> bool:
    return diag.source == SOURCE and isinstance(diag.code, str)


def suppress_edit(line_text: str, line0: int, code: str, enc: Encoding) -> types.TextEdit:
    """Add `code` to the line's `# noqa: ...`, or append `  # noqa: CODE`."""
    match = NOQA.search(line_text) if "#" in line_text else None
    if match is not None and match.group("codes"):
        end = match.end("codes")
        pos = types.Position(line=line0, character=enc.from_char(line_text, end))
        return types.TextEdit(range=types.Range(start=pos, end=pos), new_text=f", {code}")
    stripped = re.sub(r"\s+$", "", line_text)
    start = types.Position(line=line0, character=enc.from_char(line_text, len(stripped)))
    end = types.Position(line=line0, character=enc.from_char(line_text, len(line_text)))
    return types.TextEdit(range=types.Range(start=start, end=end), new_text=f"  # noqa: {code}")


def _pos_key(p: types.Position) -> tuple[int, int]:
    return (p.line, p.character)


def non_overlapping(groups: Sequence[list[types.TextEdit]]) -> list[types.TextEdit]:
    """Edits of whole fixes, skipping any fix that overlaps one already taken."""
    taken: list[types.TextEdit] = []
    for edits in groups:
        ok = all(
            _pos_key(e.range.end) <= _pos_key(t.range.start) or _pos_key(t.range.end) <= _pos_key(e.range.start)
            for e in edits
            for t in taken
        )
        if ok:
            taken.extend(edits)
    return taken


def code_actions(
    uri: str,
    lines: list[str],
    enc: Encoding,
    params: types.CodeActionParams,
    published: Sequence[types.Diagnostic],
) -> list[types.CodeAction]:
    only = params.context.only
    want_quickfix = not only or any(str(k).startswith("quickfix") for k in only)
    want_fix_all = not only or any(
        FIX_ALL_KIND.startswith(str(k)) or str(k) == FIX_ALL_KIND for k in only
    )
    actions: list[types.CodeAction] = []
    if want_quickfix:
        suppressed: set[tuple[int, str]] = set()
        for diag in params.context.diagnostics:
            if not _ours(diag):
                continue
            code = str(diag.code)
            fix = fix_of(diag) or _fix_from_published(diag, published)
            if fix is not None:
                title, edits = fix
                actions.append(
                    types.CodeAction(
                        title=f"{title} ({code})",
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[diag],
                        is_preferred=True,
                        edit=types.WorkspaceEdit(changes={uri: edits}),
                    )
                )
            line0 = diag.range.start.line
            if (line0, code) in suppressed or not 0 <= line0 < len(lines):
                continue
            suppressed.add((line0, code))
            actions.append(
                types.CodeAction(
                    title=f"Suppress {code} on this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    edit=types.WorkspaceEdit(changes={uri: [suppress_edit(lines[line0], line0, code, enc)]}),
                )
            )
    if want_fix_all:
        groups = [fix[1] for d in published if (fix := fix_of(d)) is not None]
        edits = non_overlapping(groups)
        if edits:
            actions.append(
                types.CodeAction(
                    title="Fix all stridelens findings with a safe fix",
                    kind=FIX_ALL_KIND,
                    edit=types.WorkspaceEdit(changes={uri: edits}),
                )
            )
    return actions


def _fix_from_published(
    diag: types.Diagnostic, published: Sequence[types.Diagnostic]
) -> tuple[str, list[types.TextEdit]] | None:
    """For clients that do not send `data` back: find the same diagnostic we published."""
    for d in published:
        if d.code == diag.code and d.range == diag.range:
            return fix_of(d)
    return None
