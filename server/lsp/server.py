"""The stridelens language server: registers each feature module's handler."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote

from lsprotocol import types

from stridelens.server.analysis import collector
from stridelens.server.lsp import (
    code_actions,
    explain_request,
    generated_code_cache,
    gradcheck_action,
    hover,
    inlay_hints,
    lifecycle,
    memtrace,
    notebooks,
)
from stridelens.server.lsp.session import StridelensServer
from stridelens.server.lsp.transport import StreamLost, stream_lost


def build_server() -> StridelensServer:
    server = StridelensServer()

    @server.feature(types.INITIALIZE)
    def on_initialize(ls: StridelensServer, params: types.InitializeParams) -> None:
        ls.setup(params)
        lifecycle.watch_parent(params.process_id)

    @server.feature(types.INITIALIZED)
    async def on_initialized(ls: StridelensServer, params: types.InitializedParams) -> None:
        ls._event_loop = asyncio.get_running_loop()
        ls._event_loop.call_later(1.0, ls.start_torch_unless_busy)
        await ls.pull_configuration()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def on_configuration(ls: StridelensServer, params: types.DidChangeConfigurationParams) -> None:
        await ls.pull_configuration()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def on_open(ls: StridelensServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        ls.open(doc.uri, doc.text, doc.version)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def on_change(ls: StridelensServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.change(uri, ls.workspace.get_text_document(uri).source, params.text_document.version)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def on_close(ls: StridelensServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.close(params.text_document.uri)

    # ---- notebooks: the Python cells are one program (notebooks.py) ----------------
    def open_notebook(ls: StridelensServer, uri: str) -> None:
        notebook = ls.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return

        def cell_text(cell_uri: str) -> tuple[str, str] | None:
            doc = ls.workspace.text_documents.get(unquote(cell_uri))
            return (doc.language_id or "python", doc.source) if doc is not None else None

        program = ls.notebooks.program(notebook, cell_text)
        ls.change(uri, program, notebook.version)  # (opens it the first time)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def on_notebook_open(ls: StridelensServer, params: types.DidOpenNotebookDocumentParams) -> None:
        open_notebook(ls, params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def on_notebook_change(ls: StridelensServer, params: types.DidChangeNotebookDocumentParams) -> None:
        before = {s.uri for s in ls.notebooks.spans.get(params.notebook_document.uri, ())}
        open_notebook(ls, params.notebook_document.uri)
        after = {s.uri for s in ls.notebooks.spans.get(params.notebook_document.uri, ())}
        for gone in before - after:  # a removed cell keeps no diagnostics
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=gone, diagnostics=[]))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def on_notebook_close(ls: StridelensServer, params: types.DidCloseNotebookDocumentParams) -> None:
        spans = ls.notebooks.close(params.notebook_document.uri)
        ls.close(params.notebook_document.uri)
        for span in spans:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=span.uri, diagnostics=[]))

    def program_of(ls: StridelensServer, uri: str) -> tuple[str, notebooks.CellSpan | None]:
        """The document a request on `uri` is answered on: itself, or a cell's notebook."""
        located = ls.notebooks.locate(uri)
        return located if located is not None else (uri, None)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def on_hover(ls: StridelensServer, params: types.HoverParams) -> types.Hover | None:
        uri, cell = program_of(ls, params.text_document.uri)
        offset = cell.first if cell is not None else 0
        found = await ls.snapshot_for(uri)
        if found is None:
            return None
        lines, snap = found
        pos = params.position
        note_at = notebooks.notes_into_cell(ls.notebooks.spans.get(uri, []), cell) if cell is not None else None
        answer = hover.hover(
            snap.analysis,
            snap.exact,
            lines,
            ls.encoding,
            pos.line + offset,
            pos.character,
            markdown=ls.hover_markdown(),
            note_at=note_at,
        )
        if answer is not None and answer.range is not None and offset:
            answer.range = notebooks.shift_range(answer.range, -offset)
        return answer

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[*code_actions.KINDS, gradcheck_action.KIND], resolve_provider=True),
    )
    async def on_code_action(ls: StridelensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri, cell = program_of(ls, params.text_document.uri)
        state = ls.docs.get(uri)
        if state is None:
            return []
        if cell is not None:  # quick fixes only, as edits of the cell
            program_params = notebooks.params_into_program(params, uri, cell)
            fixes = code_actions.code_actions(state.uri, state.lines, ls.encoding, program_params, state.published_diagnostics)
            return notebooks.actions_into_cell(fixes, uri, cell)
        actions = code_actions.code_actions(
            state.uri, state.lines, ls.encoding, params, state.published_diagnostics
        )
        found = await ls.snapshot_for(uri)
        if found is not None:  # a test for each torch.autograd.Function the range touches
            analysis = found[1].analysis
            actions += gradcheck_action.code_actions(uri, analysis.tree, analysis.values, params)
        if ls.supports_resolve("edit"):
            return actions
        out = []
        for action in actions:  # no codeAction/resolve: fix-all only when asked for by kind
            if action.kind == code_actions.FIX_ALL_KIND:
                if not params.context.only:
                    continue
                action = await resolve_fix_all(ls, action)
            out.append(action)
        return out

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def on_resolve(ls: StridelensServer, action: types.CodeAction) -> types.CodeAction:
        if isinstance(action.data, dict) and action.data.get("fixAll"):
            return await resolve_fix_all(ls, action)
        return action

    async def resolve_fix_all(ls: StridelensServer, action: types.CodeAction) -> types.CodeAction:
        uri = str(action.data.get("uri")) if isinstance(action.data, dict) else ""
        state = ls.docs.get(uri)
        if state is None:
            return action
        old = state.text
        edit = code_actions.block_edit(old, await ls.fix_all_text(state), ls.encoding)
        action.edit = types.WorkspaceEdit(changes={uri: [edit] if edit else []})
        return action

    @server.command(code_actions.FIX_ALL_COMMAND)
    async def fix_all(ls: StridelensServer, uri: str | None = None) -> bool:
        """Apply every safe fix of a document through `workspace/applyEdit`."""
        state = ls.docs.get(str(uri)) if uri else None
        if state is None:
            return False
        old = state.text
        new = await ls.fix_all_text(state)
        edit = code_actions.block_edit(old, new, ls.encoding)
        if edit is None or state.text != old:
            return edit is None
        result = await ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(
                label="stridelens: apply all safe fixes",
                edit=types.WorkspaceEdit(changes={state.uri: [edit]}),
            )
        )
        return bool(result.applied)

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT, types.InlayHintOptions(resolve_provider=False))
    async def on_inlay_hint(ls: StridelensServer, params: types.InlayHintParams) -> list[types.InlayHint]:
        uri, cell = program_of(ls, params.text_document.uri)
        found = await ls.snapshot_for(uri)
        if found is None:
            return []
        lines, snap = found
        if cell is None:
            return inlay_hints.inlay_hints(
                snap.analysis, lines, ls.encoding, params.range, ls.settings.inlay_hints, show_recorded=ls.settings.recorded_hints
            )
        wanted = notebooks.shift_range(params.range, cell.first)
        hints = inlay_hints.inlay_hints(snap.analysis, lines, ls.encoding, wanted, ls.settings.inlay_hints)
        return notebooks.hints_into_cell(hints, cell)

    @server.feature(explain_request.METHOD)
    async def on_explain(ls: StridelensServer, params: object) -> list[dict[str, object] | None]:
        uri, positions = explain_request.uri_and_positions(params)
        found = await ls.snapshot_for(uri) if uri else None
        if found is None:
            return [None] * len(positions)
        lines, snap = found
        return explain_request.explain_positions(snap.analysis, lines, ls.encoding, positions)

    @server.feature(types.SHUTDOWN)
    def on_shutdown(ls: StridelensServer, params: None) -> None:
        for state in ls.docs.values():
            if state.task is not None:
                state.task.cancel()
        ls.worker.stop()

    @server.feature(types.EXIT)
    def on_exit(ls: StridelensServer, params: None) -> None:
        lifecycle.hard_exit(0 if ls.protocol._shutdown else 1)

    return server


def _ready_server(log_file: str | None, log_messages: bool = False) -> StridelensServer:
    """The server, with logging, memory tracing and the collector set up for a long run."""
    lifecycle.configure_logging(log_file, log_messages)
    collector.collect_less_often()  # before the converter's ~560 type resolutions, too
    server = build_server()
    generated_code_cache.save()  # lsprotocol's classes are defined: keep their compiled code
    memtrace.start(server)
    collector.freeze_imported()
    return server


def serve_stdio(log_file: str | None = None, log_messages: bool = False) -> int:
    server = _ready_server(log_file, log_messages)
    try:
        server.start_io()
    except StreamLost as err:
        lifecycle.hard_exit(stream_lost(err))
    # stdin closed without `exit`: the client is gone.
    lifecycle.hard_exit(0 if server.protocol._shutdown else 1)
    return 1


def serve_tcp(host: str, port: int, log_file: str | None = None, log_messages: bool = False) -> int:
    server = _ready_server(log_file, log_messages)
    try:
        server.start_tcp(host, port)
    except StreamLost as err:
        lifecycle.hard_exit(stream_lost(err))
    lifecycle.hard_exit(0 if server.protocol._shutdown else 1)
    return 1
