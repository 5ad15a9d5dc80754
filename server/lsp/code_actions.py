"""textDocument/codeAction: the quick fix of each finding (stored in `Diagnostic.data` at
analysis time), "suppress SLnnn on this line", and `source.fixAll.stridelens`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lsprotocol import types

from stridelens.i18n import N_, tr
from stridelens.server.lsp.diagnostics import NOQA, SOURCE, changed_block
from stridelens.server.lsp.documents import Encoding, split_lines
from stridelens.server.rules import ALWAYS_REPORTED

FIX_ALL_KIND = "source.fixAll.stridelens"
FIX_ALL_COMMAND = "stridelens.fixAll"
MAX_FIX_PASSES = 5
FIX_ALL_TITLE = N_("stridelens: apply all safe fixes")
KINDS = [types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll, FIX_ALL_KIND]


def _range(raw: dict[str, Any]) -> types.Range:
    return types.Range(
        start=types.Position(line=int(raw["start"]["line"]), character=int(raw["start"]["character"])),
        end=types.Position(line=int(raw["end"]["line"]), character=int(raw["end"]["character"])),
    )


def fix_of(diag: types.Diagnostic, *, safe_only: bool = False) -> tuple[str, list[types.TextEdit]] | None:
    data = diag.data
    if not isinstance(data, dict) or not isinstance(data.get("fix"), dict):
        return None
    try:
        fix = data["fix"]
        if safe_only and not fix.get("safe"):
            return None
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
        codes_end = match.end("codes")
        pos = types.Position(line=line0, character=enc.from_char(line_text, codes_end))
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
            if (line0, code) in suppressed or not 0 <= line0 < len(lines) or code in ALWAYS_REPORTED:
                continue  # a noqa comment does not silence a syntax error: no action that would not work
            suppressed.add((line0, code))
            actions.append(
                types.CodeAction(
                    title=tr("Suppress {code} on this line").format(code=code),
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diag],
                    edit=types.WorkspaceEdit(changes={uri: [suppress_edit(lines[line0], line0, code, enc)]}),
                )
            )
    if want_fix_all and any(fix_of(d, safe_only=True) for d in published):
        # Fixes are applied and the file re-analysed until no safe fix is left (one fix can
        # reveal another): costly, so the edit is computed on codeAction/resolve (or by the
        # caller when the client cannot resolve, see `fix_all_action`).
        actions.append(
            types.CodeAction(
                title=tr(FIX_ALL_TITLE),
                kind=FIX_ALL_KIND,
                data={"uri": uri, "fixAll": True},
            )
        )
    return actions


def block_edit(old: str, new: str, enc: Encoding) -> types.TextEdit | None:
    """One edit turning `old` into `new`: the changed block of lines, replaced whole."""
    if old == new:
        return None
    old_lines, new_lines = split_lines(old), split_lines(new)
    start, old_end, new_end = changed_block(old_lines, new_lines)
    replacement = new_lines[start:new_end]
    if old_end >= len(old_lines):  # the block reaches the end of the file
        last = old_lines[-1]
        end = types.Position(line=len(old_lines) - 1, character=enc.from_char(last, len(last)))
        text = "\n".join(replacement)
        if start > 0 and start >= len(old_lines):
            text = "\n" + text
    else:
        end = types.Position(line=old_end, character=0)
        text = "".join(line + "\n" for line in replacement)
    return types.TextEdit(range=types.Range(start=types.Position(line=start, character=0), end=end), new_text=text)


def _fix_from_published(
    diag: types.Diagnostic, published: Sequence[types.Diagnostic]
) -> tuple[str, list[types.TextEdit]] | None:
    """For clients that do not send `data` back: find the same diagnostic we published."""
    for d in published:
        if d.code == diag.code and d.range == diag.range:
            return fix_of(d)
    return None
