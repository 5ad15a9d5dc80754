"""LSP 3.17 notebook sync: a notebook's Python cells are analysed as one program.

The program is a document of its own (keyed by the notebook's URI, with the cells' lines
in order, IPython-only lines blanked), so names flow from cell to cell as a top-to-bottom
run gives them. Requests on a cell are answered on the program at the cell's line offset,
and what comes back (diagnostics, hover ranges, hints, edits) is moved back into the cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import attrs
from lsprotocol import types

from stridelens.i18n import tr
from stridelens.server.analysis.facts import Provenance
from stridelens.server.notebook import python_lines

SYNC_OPTIONS = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(language="python")])]
)


@dataclass(frozen=True)
class CellSpan:
    uri: str
    first: int  # 0-based line of the program where the cell starts
    count: int  # lines of the cell
    number: int = 0  # 1-based over all the notebook's cells, markdown too (as `check` numbers them)


class Notebooks:
    """Which cells make up each open notebook, and where they sit in its program."""

    def __init__(self) -> None:
        self.spans: dict[str, list[CellSpan]] = {}
        self._notebook_of: dict[str, str] = {}

    def program(self, notebook: types.NotebookDocument, cell_text: Callable[[str], tuple[str, str] | None]) -> str:
        """The program text of `notebook` (remembering its cells); `cell_text(uri)` gives a
        cell document's (language id, text), or None when the workspace has none."""
        for span in self.spans.get(notebook.uri, ()):
            self._notebook_of.pop(span.uri, None)
        spans: list[CellSpan] = []
        lines: list[str] = []
        for number, cell in enumerate(notebook.cells, 1):
            if cell.kind != types.NotebookCellKind.Code:
                continue
            found = cell_text(cell.document)
            if found is None or found[0] != "python":
                continue
            cell_lines = found[1].split("\n")
            python, _ = python_lines(cell_lines)
            spans.append(CellSpan(cell.document, len(lines), len(cell_lines), number))
            lines.extend(python)
            self._notebook_of[cell.document] = notebook.uri
        self.spans[notebook.uri] = spans
        return "\n".join(lines)

    def close(self, notebook_uri: str) -> list[CellSpan]:
        spans = self.spans.pop(notebook_uri, [])
        for span in spans:
            self._notebook_of.pop(span.uri, None)
        return spans

    def locate(self, cell_uri: str) -> tuple[str, CellSpan] | None:
        """The notebook (program URI) holding the cell, and the cell's place in it."""
        notebook = self._notebook_of.get(cell_uri)
        if notebook is None:
            return None
        span = next((s for s in self.spans.get(notebook, ()) if s.uri == cell_uri), None)
        return (notebook, span) if span is not None else None

    def is_notebook(self, uri: str) -> bool:
        return uri in self.spans


def notes_into_cell(spans: list[CellSpan], here: CellSpan) -> Callable[[Provenance], Provenance]:
    """A hover's "why" notes point at program lines: at the line inside their cell, and,
    for another cell than the hovered one, with that cell's number."""

    def move(note: Provenance) -> Provenance:
        span = next((s for s in spans if s.first < note.line <= s.first + s.count), None)
        if span is None:
            return note
        because = note.because if span == here else note.because + tr(" (cell {number})").format(number=span.number)
        return Provenance(note.what, because, note.line - span.first)

    return move


def in_cell(span: CellSpan, line0: int) -> bool:
    return span.first <= line0 < span.first + span.count


def shift_range(r: types.Range, by: int) -> types.Range:
    return types.Range(
        start=types.Position(line=r.start.line + by, character=r.start.character),
        end=types.Position(line=r.end.line + by, character=r.end.character),
    )


def shift_diagnostic(d: types.Diagnostic, by: int) -> types.Diagnostic:
    return attrs.evolve(d, range=shift_range(d.range, by))


def diagnostics_of_cell(span: CellSpan, program: list[types.Diagnostic]) -> list[types.Diagnostic]:
    """The program's diagnostics that start in the cell, in the cell's lines (a range that
    runs past the cell ends at its last line). `data` keeps the quick fix in program lines,
    which is what a code action on the cell is computed on."""
    out = []
    last = span.first + span.count - 1
    for d in program:
        if not in_cell(span, d.range.start.line):
            continue
        if d.range.end.line > last:
            d = attrs.evolve(d, range=types.Range(start=d.range.start, end=types.Position(line=last, character=d.range.start.character + 1)))
        out.append(shift_diagnostic(d, -span.first))
    return out


def shift_edit(edit: types.TextEdit, by: int) -> types.TextEdit:
    return types.TextEdit(range=shift_range(edit.range, by), new_text=edit.new_text)


def actions_into_cell(actions: list[types.CodeAction], notebook_uri: str, span: CellSpan) -> list[types.CodeAction]:
    """Code actions computed on the program, as edits of the cell (others dropped)."""
    out = []
    for action in actions:
        changes = action.edit.changes if action.edit is not None and action.edit.changes else None
        if changes is None:
            continue  # (fix-all and commands work on whole files: not offered in a cell)
        edits = changes.get(notebook_uri, [])
        if not edits or not all(in_cell(span, e.range.start.line) and in_cell(span, e.range.end.line) for e in edits):
            continue
        moved = [shift_edit(e, -span.first) for e in edits]
        diagnostics = [shift_diagnostic(d, -span.first) for d in action.diagnostics or []]
        out.append(
            attrs.evolve(
                action,
                edit=types.WorkspaceEdit(changes={span.uri: moved}),
                diagnostics=diagnostics or None,
                data=None,
            )
        )
    return out


def params_into_program(params: types.CodeActionParams, notebook_uri: str, span: CellSpan) -> types.CodeActionParams:
    """A cell's code-action request as one on the program (ranges moved down by the cell's
    offset; the fixes in `Diagnostic.data` are already in program lines)."""
    context = attrs.evolve(params.context, diagnostics=[shift_diagnostic(d, span.first) for d in params.context.diagnostics])
    return attrs.evolve(
        params,
        text_document=types.TextDocumentIdentifier(uri=notebook_uri),
        range=shift_range(params.range, span.first),
        context=context,
    )


def hints_into_cell(hints: list[types.InlayHint], span: CellSpan) -> list[types.InlayHint]:
    return [
        attrs.evolve(h, position=types.Position(line=h.position.line - span.first, character=h.position.character))
        for h in hints
        if in_cell(span, h.position.line)
    ]
