"""textDocument/inlayHint: the inferred shape after assignments of tensors, with a mark for
views and non-contiguous layouts; strides too in "strides" mode; nothing where nothing is
known."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from lsprotocol import types

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis.facts import format_sizes
from stridelens.server.analysis.values import SeqValue
from stridelens.server.lsp.documents import Encoding


def label(fact: TensorFact, mode: str) -> str | None:
    marks = []
    if fact.stated_contiguous is False or (fact.stated_contiguous is None and fact.permuted_by):
        marks.append(tr("non-contig"))
    if fact.view_of or fact.stated_is_view:
        marks.append(tr("view of {base}").format(base=fact.view_of) if fact.view_of else tr("view"))
    shape = fact.display_shape
    if shape is None:
        return None  # nothing worth a hint on every line of a forward: quiet
    text = f": {format_sizes(shape)}"
    strides = fact.display_strides
    if mode == "strides" and strides is not None:
        text += tr(" strides {strides}").format(strides=format_sizes(strides))
    if marks:
        text += " " + " ".join(f"[{m}]" for m in marks)
    return text


def _targets(analysis: Analysis, stmt: ast.stmt) -> Iterator[tuple[ast.Name, TensorFact]]:
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets, value = [stmt.target], stmt.value
    else:
        return
    known = analysis.values.get(value)
    for target in targets:
        bound = analysis.values.get(target)  # the name as bound: knows what it is a view of
        if isinstance(target, ast.Name) and isinstance(bound, TensorFact):
            yield target, bound
        elif isinstance(target, ast.Name) and isinstance(known, TensorFact):
            yield target, known
        elif isinstance(target, ast.Tuple | ast.List) and isinstance(known, SeqValue):
            for elt, item in zip(target.elts, known.items, strict=False):
                if isinstance(elt, ast.Name) and isinstance(item, TensorFact):
                    yield elt, item


def inlay_hints(
    analysis: Analysis, lines: list[str], enc: Encoding, rng: types.Range, mode: str
) -> list[types.InlayHint]:
    if mode == "off":
        return []
    first, last = rng.start.line + 1, rng.end.line + 1
    hints: list[types.InlayHint] = []
    for stmt in ast.walk(analysis.tree):
        if not isinstance(stmt, ast.Assign | ast.AnnAssign):
            continue
        if stmt.lineno > last or (stmt.end_lineno or stmt.lineno) < first:
            continue
        for name, fact in _targets(analysis, stmt):
            text = label(fact, mode)
            if text is None or not first <= name.lineno <= last:
                continue
            if isinstance(stmt, ast.AnnAssign):
                continue  # the user wrote a type already
            line_text = lines[name.lineno - 1] if name.lineno <= len(lines) else ""
            char = analysis.char_col(name.lineno, name.end_col_offset or 0)
            tooltip = "\n".join(fact.notes()) or None
            hints.append(
                types.InlayHint(
                    position=types.Position(line=name.lineno - 1, character=enc.from_char(line_text, char)),
                    label=text,
                    kind=types.InlayHintKind.Type,
                    padding_left=False,
                    tooltip=tooltip,
                )
            )
    hints.sort(key=lambda h: (h.position.line, h.position.character))
    return hints
