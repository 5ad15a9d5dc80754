"""textDocument/inlayHint: the inferred shape after assignments of tensors, with a mark for
views and non-contiguous layouts; strides too in "strides" mode; nothing where nothing is
known. With `recordedHints`, where nothing is known statically, the shape the last
`stridelens record` saw, marked "(run)" (never from a run of another version of the file)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from lsprotocol import types

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact, recorded
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


def _recorded_label(doc: dict[str, Any], digest: str, name: ast.Name) -> tuple[str, str] | None:
    """": (32, 3..7, 768) (run)" and the hover's "seen at run time" line, from a recording of
    this very text; None without one."""
    observed = recorded.observed_in(doc, name.lineno, name.id, digest)
    if observed is None or observed.stale:
        return None
    shape = observed.shape()
    if shape is None:
        return None
    return f": {recorded.format_shape(shape)} " + tr("(run)"), recorded.summary(observed)


def _assigned_names(stmt: ast.Assign) -> Iterator[ast.Name]:
    for target in stmt.targets:
        if isinstance(target, ast.Name):
            yield target
        elif isinstance(target, ast.Tuple | ast.List):
            yield from (e for e in target.elts if isinstance(e, ast.Name))


def inlay_hints(
    analysis: Analysis, lines: list[str], enc: Encoding, rng: types.Range, mode: str, *, show_recorded: bool = False
) -> list[types.InlayHint]:
    if mode == "off":
        return []
    # Only a file someone recorded, as this very text, pays for the lookups: the facts file is
    # read and the text hashed once per request.
    doc = recorded.recorded_doc(analysis.path) if show_recorded and analysis.path and not analysis.path.endswith(".ipynb") else None
    digest = recorded.text_digest(analysis.source) if doc is not None else ""
    if doc is not None and doc.get("sha256") != digest:
        doc = None
    first, last = rng.start.line + 1, rng.end.line + 1
    hints: list[types.InlayHint] = []

    def add(name: ast.Name, text: str, tooltip: str | None) -> None:
        line_text = lines[name.lineno - 1] if name.lineno <= len(lines) else ""
        char = analysis.char_col(name.lineno, name.end_col_offset or 0)
        hints.append(
            types.InlayHint(
                position=types.Position(line=name.lineno - 1, character=enc.from_char(line_text, char)),
                label=text,
                kind=types.InlayHintKind.Type,
                padding_left=False,
                tooltip=tooltip,
            )
        )

    for stmt in ast.walk(analysis.tree):
        if not isinstance(stmt, ast.Assign | ast.AnnAssign):
            continue
        if stmt.lineno > last or (stmt.end_lineno or stmt.lineno) < first:
            continue
        if isinstance(stmt, ast.AnnAssign):
            continue  # the user wrote a type already
        hinted: set[int] = set()
        for name, fact in _targets(analysis, stmt):
            text = label(fact, mode)
            if text is None or not first <= name.lineno <= last:
                continue
            hinted.add(id(name))
            add(name, text, "\n".join(fact.notes()) or None)
        if doc is None:
            continue
        for name in _assigned_names(stmt):
            if id(name) in hinted or not first <= name.lineno <= last:
                continue
            seen = _recorded_label(doc, digest, name)
            if seen is not None:
                add(name, *seen)
    hints.sort(key=lambda h: (h.position.line, h.position.character))
    return hints

