"""Diagnostics and code actions over LSP: codes, links, edits that break and repair syntax,
quick fixes, suppression, fix-all, and `workspace/applyEdit`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types

from bench.generate_model import generate_model_source

from .helpers import EXAMPLES, Session, apply_edits, check_available, code_actions, run_check

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(150)]

VIEW = (EXAMPLES / "view_vs_reshape.py").read_text(encoding="utf-8")


def by_code(diags: list[types.Diagnostic], code: str) -> list[types.Diagnostic]:
    return [d for d in diags if d.code == code]


async def exact_diagnostics(lsp: Session, uri: str, version: int) -> list[types.Diagnostic]:
    await lsp.wait_analyzed(uri, exact=True, version=version)
    return lsp.diagnostics(uri)


async def test_diagnostics_have_code_severity_and_link(lsp: Session) -> None:
    uri = (EXAMPLES / "view_vs_reshape.py").as_uri()
    lsp.open(uri, VIEW)
    diags = await exact_diagnostics(lsp, uri, 1)
    sl101 = by_code(diags, "SL101")
    assert len(sl101) == 1
    d = sl101[0]
    line = VIEW.splitlines()[d.range.start.line]
    assert line.startswith("fails = xt.view(-1)")
    assert d.severity == types.DiagnosticSeverity.Error
    assert d.source == "stridelens"
    assert d.code_description is not None and "SL101" in d.code_description.href
    assert d.data["fix"]["title"]


async def test_more_pitfalls_reports_the_catalogue(lsp: Session) -> None:
    from stridelens.server.rules import OFF_BY_DEFAULT

    from .helpers import start_session, stop_session

    path = EXAMPLES / "more_pitfalls.py"
    text = path.read_text(encoding="utf-8")
    lsp.open(path.as_uri(), text)
    diags = await exact_diagnostics(lsp, path.as_uri(), 1)
    codes = {d.code for d in diags}
    marked = {
        c for line in text.splitlines() if "# SL" in line for c in [line.split("# ")[1][:5]]
    }
    off = marked & set(OFF_BY_DEFAULT)
    assert off and marked - off <= codes and not off & codes  # by default: the rules on by default
    client, every = await start_session(init_options={"select": ["ALL"]})
    try:
        every.open(path.as_uri(), text)
        assert marked <= {d.code for d in await exact_diagnostics(every, path.as_uri(), 1)}
    finally:
        await stop_session(client)


SELECTION = Path(__file__).resolve().parents[1] / "fixtures" / "default_selection.py"


async def test_off_by_default_rules_are_published_only_when_selected(tmp_path: Path) -> None:
    """SL204 is off by default (tests/fixtures/default_selection.py: SL102 line 9, SL204 line 19):
    the server shows it only where `select` names it, in its settings or in pyproject.toml."""
    from .helpers import start_session, stop_session

    text = SELECTION.read_text(encoding="utf-8")
    path = tmp_path / "model.py"
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()

    def found(diags: list[types.Diagnostic]) -> list[tuple[object, int]]:
        return sorted((d.code, d.range.start.line + 1) for d in diags)

    client, lsp = await start_session(root=tmp_path)
    try:
        lsp.open(uri, text)
        assert found(await exact_diagnostics(lsp, uri, 1)) == [("SL102", 9)]
        since = len(lsp.analyzed)
        client.set_configuration({"select": ["SL204"]}, section="stridelens")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await lsp.wait_analyzed(uri, exact=True, since=since)
        assert found(lsp.diagnostics(uri)) == [("SL204", 19)]
    finally:
        await stop_session(client)
    (tmp_path / "pyproject.toml").write_text('[tool.stridelens]\nselect = ["SL2"]\n', encoding="utf-8")
    client, lsp = await start_session(root=tmp_path, configuration={"select": []})  # [] keeps pyproject's
    try:
        lsp.open(uri, text)
        assert found(await exact_diagnostics(lsp, uri, 1)) == [("SL204", 19)]
    finally:
        await stop_session(client)


async def test_edit_breaks_syntax_then_repairs(lsp: Session) -> None:
    uri = "file:///tmp/stridelens-diag/edit.py"
    lsp.open(uri, VIEW)
    before = await exact_diagnostics(lsp, uri, 1)
    assert by_code(before, "SL101")
    broken = VIEW + "def broken(:\n    pass\n"
    lsp.change_full(uri, broken, 2)
    during = await exact_diagnostics(lsp, uri, 2)
    assert by_code(during, "SL101"), "the rest of the file is still analysed"
    hover = await lsp.hover(uri, 9, 1)  # `xt` still explained
    assert hover is not None and "(3, 2, 4)" in hover.contents.value
    assert await lsp.hover(uri, len(VIEW.splitlines()), 5) is None  # on the broken line
    lsp.change_full(uri, VIEW, 3)
    after = await exact_diagnostics(lsp, uri, 3)
    assert [(d.code, d.range) for d in after] == [(d.code, d.range) for d in before]


async def test_quick_fix_and_suppress(lsp: Session, tmp_path: Path) -> None:
    path = tmp_path / "fixme.py"
    path.write_text(VIEW, encoding="utf-8")
    uri = path.as_uri()
    lsp.open(uri, VIEW)
    diags = await exact_diagnostics(lsp, uri, 1)
    sl101 = by_code(diags, "SL101")
    actions = await code_actions(lsp, uri, sl101, only=[types.CodeActionKind.QuickFix])
    titles = [a.title for a in actions]
    fix = next(a for a in actions if a.is_preferred)
    assert "reshape" in fix.title
    suppress = next(a for a in actions if a.title == "Suppress SL101 on this line")
    assert fix.edit is not None and suppress.edit is not None, titles

    fixed = apply_edits(VIEW, fix.edit.changes[uri])
    assert "fails = xt.reshape(-1)" in fixed
    lsp.change_full(uri, fixed, 2)
    assert not by_code(await exact_diagnostics(lsp, uri, 2), "SL101")

    silenced = apply_edits(VIEW, suppress.edit.changes[uri])
    assert "fails = xt.view(-1)  # explain: raises at run time: use reshape or contiguous().view, SL101" not in silenced
    assert "# noqa: SL101" in silenced
    lsp.change_full(uri, silenced, 3)
    assert not by_code(await exact_diagnostics(lsp, uri, 3), "SL101")


async def test_fix_all_through_apply_edit_passes_check(tmp_path: Path) -> None:
    from .helpers import start_session, stop_session

    applied: list[types.ApplyWorkspaceEditParams] = []
    path = tmp_path / "fix_all.py"
    path.write_text(VIEW, encoding="utf-8")
    uri = path.as_uri()

    def patch(client) -> None:
        @client.feature(types.WORKSPACE_APPLY_EDIT)
        def apply(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            applied.append(params)
            return types.ApplyWorkspaceEditResult(applied=True)

    client, lsp = await start_session(patch=patch)
    try:
        lsp.open(uri, VIEW)
        await exact_diagnostics(lsp, uri, 1)
        source_actions = await code_actions(lsp, uri, [], only=["source.fixAll.stridelens"])
        assert [a.kind for a in source_actions] == ["source.fixAll.stridelens"]
        resolved = await asyncio.wait_for(client.code_action_resolve_async(source_actions[0]), 60)
        assert resolved.edit is not None
        via_resolve = apply_edits(VIEW, resolved.edit.changes[uri])
        ok = await asyncio.wait_for(
            client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="stridelens.fixAll", arguments=[uri])
            ),
            60,
        )
        assert ok is True and len(applied) == 1
        fixed = apply_edits(VIEW, applied[0].edit.changes[uri])
        assert fixed == via_resolve
        path.write_text(fixed, encoding="utf-8")
        lsp.change_full(uri, fixed, 2)
        assert await exact_diagnostics(lsp, uri, 2) == []
    finally:
        await stop_session(client)
    if check_available():
        proc = run_check(path)
        assert proc.returncode == 0, proc.stdout + proc.stderr


async def test_edit_on_a_large_file_is_answered_from_its_block(lsp: Session, tmp_path: Path) -> None:
    text = generate_model_source(600)
    path = tmp_path / "model.py"
    uri = path.as_uri()
    lsp.open(uri, text)
    before = await exact_diagnostics(lsp, uri, 1)
    assert before
    lines = text.splitlines()
    n = [i for i, line in enumerate(lines) if "range(3)" in line][3]
    lines[n] = lines[n].replace("range(3)", "range(4)")  # changes nothing the rules see
    lines.insert(n, "    # a comment typed in the middle of the file")
    edited = "\n".join(lines) + "\n"
    published: list[list[tuple[str, int]]] = []
    original = lsp.client.protocol.fm.features.get(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)

    def record(params: types.PublishDiagnosticsParams) -> None:
        if params.version == 2:
            published.append([(str(d.code), d.range.start.line) for d in params.diagnostics])
        lsp.client.diagnostics[params.uri] = params.diagnostics

    lsp.client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    lsp.change_full(uri, edited, 2)
    await lsp.wait_analyzed(uri, exact=True, version=2)
    lsp.client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = original
    # the edited block's answer (final here: nothing else names it), then the whole-file pass's
    assert published, "an answer from the edited block"
    assert sorted(published[0]) == sorted(published[-1]), "the first answer was already right"
    final = [(d.code, d.range.start.line) for d in lsp.diagnostics(uri)]
    moved = [(d.code, d.range.start.line + (1 if d.range.start.line >= n else 0)) for d in before]
    assert sorted(final) == sorted(moved)
