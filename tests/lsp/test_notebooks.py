"""LSP 3.17 notebook sync: diagnostics, hover, inlay hints and quick fixes per cell, with
names known from earlier cells (pytest-lsp as the client, the real server over stdio)."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from .helpers import Session

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

NOTEBOOK = "file:///tmp/stridelens-nb/model.ipynb"
CELLS = [
    (types.NotebookCellKind.Code, "import torch\nx = torch.randn(2, 3, 4)"),
    (types.NotebookCellKind.Markup, "# The transpose\nsome *markdown*"),
    (types.NotebookCellKind.Code, "%timeit x.sum()\nxt = x.transpose(0, 1)"),
    (types.NotebookCellKind.Code, "y = xt.view(-1)"),
]


def cell_uri(index: int, name: str = "model") -> str:
    return f"vscode-notebook-cell:/tmp/stridelens-nb/{name}.ipynb#W{index}sZmlsZQ%3D%3D"


def open_notebook(lsp: Session, cells: list[tuple[types.NotebookCellKind, str]] = CELLS, name: str = "model") -> None:
    lsp.client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=f"file:///tmp/stridelens-nb/{name}.ipynb",
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=kind, document=cell_uri(i, name)) for i, (kind, _) in enumerate(cells)],
            ),
            cell_text_documents=[
                types.TextDocumentItem(
                    uri=cell_uri(i, name), language_id="python" if kind == types.NotebookCellKind.Code else "markdown",
                    version=1, text=text,
                )
                for i, (kind, text) in enumerate(cells)
            ],
        )
    )


async def wait_for_diagnostics(lsp: Session, uri: str, present: bool) -> list[types.Diagnostic]:
    for _ in range(300):
        found = lsp.diagnostics(uri)
        if bool(found) == present:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"diagnostics of {uri}: {lsp.diagnostics(uri)}")


async def test_a_view_in_a_later_cell_is_judged_with_names_from_earlier_cells(lsp: Session) -> None:
    open_notebook(lsp)
    await lsp.wait_analyzed(NOTEBOOK, exact=True)
    (diagnostic,) = await wait_for_diagnostics(lsp, cell_uri(3), True)
    assert diagnostic.code == "SL101" and diagnostic.range.start.line == 0 and diagnostic.range.start.character == 6
    assert lsp.diagnostics(cell_uri(0)) == [] and lsp.diagnostics(cell_uri(2)) == []

    # Hover on `xt` in cell 3 (line 1, after a magic line), layout from cell 1's tensor.
    card = await lsp.hover(cell_uri(2), 1, 0)
    assert card is not None and "`(3, 2, 4)`" in card.contents.value and "**strides** `(4, 12, 1)`" in card.contents.value
    assert card.range is None or card.range.start.line == 1

    # "Why" notes point at lines of the cells: this cell's own line, another cell by number.
    assert "transpose(0, 1) at line 2" in card.contents.value, card.contents.value

    hints = await lsp.inlay_hints(cell_uri(2))
    assert hints and all(h.position.line < 2 for h in hints)

    # The quick fix edits the cell, at the cell's line.
    actions = await asyncio.wait_for(
        lsp.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=cell_uri(3)),
                range=diagnostic.range,
                context=types.CodeActionContext(diagnostics=[diagnostic]),
            )
        ),
        30,
    )
    fixes = [a for a in actions or [] if isinstance(a, types.CodeAction) and a.edit and "reshape" in a.title]
    assert fixes, actions
    (edit,) = fixes[0].edit.changes[cell_uri(3)]
    assert edit.range.start.line == edit.range.end.line == 0
    text = CELLS[3][1]
    fixed = text[: edit.range.start.character] + edit.new_text + text[edit.range.end.character :]
    assert fixed == "y = xt.reshape(-1)"


async def test_a_hovers_why_notes_name_lines_of_cells_not_of_the_program(lsp: Session) -> None:
    cells = [
        (types.NotebookCellKind.Code, "import torch\na = torch.randn(4, 6)\nt = a.t()"),
        (types.NotebookCellKind.Markup, "Rows of the transpose"),
        (types.NotebookCellKind.Code, "u = t[1:]"),
    ]
    open_notebook(lsp, cells, "notes")
    await lsp.wait_analyzed("file:///tmp/stridelens-nb/notes.ipynb", exact=True)
    card = await lsp.hover(cell_uri(2, "notes"), 0, 0)
    assert card is not None, "no hover on u"
    text = card.contents.value
    # u's own note is in its cell (line 1); the transpose it inherits is line 3 of cell 1.
    assert "[1:] at line 1" in text and "t() (cell 1) at line 3" in text, text
    assert "at line 4" not in text and "at line 5" not in text  # program lines


async def test_editing_a_cell_re_analyses_the_notebook(lsp: Session) -> None:
    open_notebook(lsp)
    await wait_for_diagnostics(lsp, cell_uri(3), True)
    lsp.client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=NOTEBOOK, version=2),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=cell_uri(2), version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text="xt = x.transpose(0, 1).contiguous()")],
                        )
                    ]
                )
            ),
        )
    )
    assert await wait_for_diagnostics(lsp, cell_uri(3), False) == []
    lsp.client.notebook_document_did_close(
        types.DidCloseNotebookDocumentParams(
            notebook_document=types.NotebookDocumentIdentifier(uri=NOTEBOOK),
            cell_text_documents=[types.TextDocumentIdentifier(uri=cell_uri(i)) for i in range(len(CELLS))],
        )
    )
