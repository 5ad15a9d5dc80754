"""Inlay hints, configuration, UTF-16 positions, and answers before torch has loaded."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import torch
from lsprotocol import types

from .helpers import (
    EXAMPLES,
    Session,
    apply_edits,
    capabilities,
    code_actions,
    start_session,
    stop_session,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(150)]

VIEW_PATH = EXAMPLES / "view_vs_reshape.py"
VIEW = VIEW_PATH.read_text(encoding="utf-8")


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def label(hint: types.InlayHint) -> str:
    return hint.label if isinstance(hint.label, str) else "".join(p.value for p in hint.label)


async def test_inlay_hints_shapes(lsp: Session) -> None:
    uri = VIEW_PATH.as_uri()
    lsp.open(uri, VIEW)
    await lsp.wait_analyzed(uri, exact=True)
    hints = {(h.position.line, h.position.character): label(h) for h in await lsp.inlay_hints(uri)}
    lines = VIEW.splitlines()
    x_line = next(i for i, line in enumerate(lines) if line.startswith("x = "))
    xt_line = next(i for i, line in enumerate(lines) if line.startswith("xt = "))
    assert hints[(x_line, 1)] == f": {tuple(torch.randn(2, 3, 4).shape)}"
    xt = hints[(xt_line, 2)]
    assert xt.startswith(": (3, 2, 4)") and "non-contig" in xt and "view of x" in xt
    assert all(h.position.line < len(lines) for h in await lsp.inlay_hints(uri))


async def test_inlay_hints_quiet_where_nothing_known(lsp: Session) -> None:
    uri = "file:///tmp/stridelens-features/plain.py"
    lsp.open(uri, "import os\nname = os.getcwd()\nn = 3\n\ndef f(a):\n    b = a + 1\n    return b\n")
    await lsp.wait_analyzed(uri)
    assert await lsp.inlay_hints(uri) == []


async def test_initialization_options_strides_and_severity() -> None:
    client, lsp = await start_session(
        init_options={"inlayHints": "strides", "severity": {"SL101": "hint"}}
    )
    try:
        uri = VIEW_PATH.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, exact=True)
        x = torch.randn(2, 3, 4).transpose(0, 1)
        labels = [label(h) for h in await lsp.inlay_hints(uri)]
        assert any(f"strides {x.stride()}" in text for text in labels), labels
        sl101 = [d for d in lsp.diagnostics(uri) if d.code == "SL101"]
        assert sl101 and sl101[0].severity == types.DiagnosticSeverity.Hint
    finally:
        await stop_session(client)


async def test_bad_settings_get_a_message_and_defaults() -> None:
    client, lsp = await start_session(
        init_options={"inlayHints": "loud", "select": 3, "severity": {"SL101": "fatal"}, "debounceMs": -1}
    )
    try:
        uri = VIEW_PATH.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, exact=True)
        text = " ".join(m.message for m in client.messages)
        for key in ("inlayHints", "select", "severity.SL101", "debounceMs"):
            assert key in text
        assert [d for d in lsp.diagnostics(uri) if d.code == "SL101"]  # defaults still run
        assert await lsp.inlay_hints(uri)
    finally:
        await stop_session(client)


async def test_configuration_change_turns_a_rule_off() -> None:
    client, lsp = await start_session(configuration={"inlayHints": "shapes"})
    try:
        uri = VIEW_PATH.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, exact=True)
        assert [d for d in lsp.diagnostics(uri) if d.code == "SL101"]
        since = len(lsp.analyzed)
        refreshes = lsp.refreshes
        client.set_configuration({"ignore": ["SL101"], "inlayHints": "off"}, section="stridelens")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await lsp.wait_analyzed(uri, exact=True, since=since)
        assert not [d for d in lsp.diagnostics(uri) if d.code == "SL101"]
        assert await lsp.inlay_hints(uri) == []
        deadline = time.monotonic() + 10
        while lsp.refreshes == refreshes and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert lsp.refreshes > refreshes  # workspace/inlayHint/refresh was sent
    finally:
        await stop_session(client)


def analyses_logged(log: Path, name: str) -> list[str]:
    """The kinds of the analyses the server's log says it ran of the file `name`, in order."""
    kinds = []
    for line in log.read_text(encoding="utf-8").splitlines():
        if "stridelens.lsp INFO analysed " in line and name in line:
            kinds.append(line.split("(", 1)[1].split(",", 1)[0])
    return kinds


async def test_settings_that_arrive_during_the_first_analysis_do_not_redo_it(tmp_path: Path) -> None:
    """VS Code answers workspace/configuration with the user's settings after it has opened the
    files. The analyses in flight stand; the findings are chosen with the settings answered."""
    path = tmp_path / "view_vs_reshape.py"
    path.write_text(VIEW, encoding="utf-8")
    log = tmp_path / "server.log"
    opened = asyncio.Event()
    published: list[set[str]] = []

    def patch(client) -> None:
        for method in (types.WORKSPACE_CONFIGURATION, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS):
            client.protocol.fm.features.pop(method, None)  # pytest-lsp's own answers, replaced

        @client.feature(types.WORKSPACE_CONFIGURATION)
        async def configuration(params: types.ConfigurationParams) -> list[object]:
            await opened.wait()
            await asyncio.sleep(0.3)  # the symbolic pass of the file is running by now
            return [{"ignore": ["SL101"], "inlayHints": "strides", "locale": "en"} for _ in params.items]

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def diagnostics(params: types.PublishDiagnosticsParams) -> None:
            client.diagnostics[params.uri] = params.diagnostics
            published.append({str(d.code) for d in params.diagnostics})

    client, lsp = await start_session(root=tmp_path, patch=patch, server_args=["--log-file", str(log)])
    try:
        uri = path.as_uri()
        lsp.open(uri, VIEW)
        opened.set()
        await lsp.wait_analyzed(uri, exact=True)
        codes = {str(d.code) for d in lsp.diagnostics(uri)}
        assert "SL101" not in codes and "SL103" in codes
        assert published and all("SL101" not in p for p in published[1:])  # at most the first before the answer
        x = torch.randn(2, 3, 4).transpose(0, 1)
        assert any(f"strides {x.stride()}" in label(h) for h in await lsp.inlay_hints(uri))
        # One analysis of each kind: neither the settings nor torch's arrival redid the symbolic one.
        assert analyses_logged(log, path.name) == ["symbolic", "exact"]
    finally:
        await stop_session(client)


async def test_a_rule_turned_off_later_reuses_the_analysis(tmp_path: Path) -> None:
    path = tmp_path / "view_vs_reshape.py"
    path.write_text(VIEW, encoding="utf-8")
    log = tmp_path / "server.log"
    client, lsp = await start_session(root=tmp_path, configuration={}, server_args=["--log-file", str(log)])
    try:
        uri = path.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, exact=True)
        assert "SL101" in {str(d.code) for d in lsp.diagnostics(uri)}
        since = len(lsp.analyzed)
        client.set_configuration({"ignore": ["SL101"]}, section="stridelens")
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        await lsp.wait_analyzed(uri, exact=True, since=since)
        codes = {str(d.code) for d in lsp.diagnostics(uri)}
        assert "SL101" not in codes and "SL103" in codes
        assert analyses_logged(log, path.name) == ["symbolic", "exact"]
        assert "rules again for the exact analysis" in log.read_text(encoding="utf-8")
    finally:
        await stop_session(client)


@pytest.mark.parametrize("messages", [False, True], ids=["log-file", "log-messages"])
async def test_the_log_has_our_lines_and_the_lsp_traffic_only_when_asked(tmp_path: Path, messages: bool) -> None:
    path = tmp_path / "view_vs_reshape.py"
    path.write_text(VIEW, encoding="utf-8")
    log = tmp_path / "server.log"
    args = ["--log-file", str(log), *(["--log-messages"] if messages else [])]
    client, lsp = await start_session(root=tmp_path, server_args=args)
    try:
        uri = path.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, exact=True)
        assert "SL101" in {str(d.code) for d in lsp.diagnostics(uri)}
    finally:
        await stop_session(client)
    text = log.read_text(encoding="utf-8")
    assert analyses_logged(log, path.name) == ["symbolic", "exact"]
    # The messages sent (the diagnostics published) are in the log only with --log-messages.
    assert ("textDocument/publishDiagnostics" in text) is messages


async def test_pyproject_ignore(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.stridelens]\nignore = ["SL101"]\n', encoding="utf-8")
    path = tmp_path / "model.py"
    path.write_text(VIEW, encoding="utf-8")
    client, lsp = await start_session(root=tmp_path)
    try:
        lsp.open(path.as_uri(), VIEW)
        await lsp.wait_analyzed(path.as_uri(), exact=True)
        codes = {d.code for d in lsp.diagnostics(path.as_uri())}
        assert "SL101" not in codes and "SL103" in codes
    finally:
        await stop_session(client)


UNICODE = (
    "# 中文注释：张量的形状与步长 🎉🧠\n"
    "import torch\n"
    "\n"
    "x = torch.randn(2, 3, 4)  # 形状 🎉\n"
    's = "🎉🎉中文"; xt = x.transpose(0, 1); fails = xt.view(-1)\n'
)


async def test_utf16_positions_hover_and_fix(lsp: Session) -> None:
    uri = "file:///tmp/stridelens-features/unicode.py"
    lsp.open(uri, UNICODE)
    await lsp.wait_analyzed(uri, exact=True)
    line = UNICODE.splitlines()[4]
    sl101 = [d for d in lsp.diagnostics(uri) if d.code == "SL101"]
    assert len(sl101) == 1
    start = sl101[0].range.start.character
    assert start == utf16(line[: line.index(".view")])  # UTF-16 units, not characters
    assert start != line.index(".view")
    # Hover on the `xt` inside `xt.view` (UTF-16 column) explains xt.
    card = await lsp.hover(uri, 4, utf16(line[: line.index("xt.view")]) + 1)
    assert card is not None and "(3, 2, 4)" in card.contents.value
    # Operation hover on `view`.
    op = await lsp.hover(uri, 4, utf16(line[: line.index("view(")]) + 1)
    assert op is not None and "raises at run time" in op.contents.value
    assert op.range is not None and op.range.start.character == utf16(line[: line.index("view(")])
    # The quick fix lands on the right columns.
    actions = await code_actions(lsp, uri, sl101, only=["quickfix"])
    fix = next(a for a in actions if a.is_preferred)
    assert fix.edit is not None
    fixed = apply_edits(UNICODE, fix.edit.changes[uri])
    assert fixed.splitlines()[4] == line.replace("xt.view(-1)", "xt.reshape(-1)")
    suppress = next(a for a in actions if a.title.startswith("Suppress"))
    assert suppress.edit is not None
    assert apply_edits(UNICODE, suppress.edit.changes[uri]).splitlines()[4] == line + "  # noqa: SL101"
    # Inlay hint after `xt` on the emoji line.
    hints = await lsp.inlay_hints(uri)
    xt_end = utf16(line[: line.index("xt =") + 2])
    assert any(h.position.line == 4 and h.position.character == xt_end for h in hints)


async def test_noqa_hover_explains_the_rule(lsp: Session) -> None:
    uri = "file:///tmp/stridelens-features/noqa.py"
    text = VIEW.replace("fails = xt.view(-1)", "fails = xt.view(-1)  # noqa: SL101")
    lsp.open(uri, text)
    await lsp.wait_analyzed(uri, exact=True)
    assert not [d for d in lsp.diagnostics(uri) if d.code == "SL101"]
    line_no, line = next((i, ln) for i, ln in enumerate(text.splitlines()) if "noqa" in ln)
    card = await lsp.hover(uri, line_no, line.index("SL101") + 2)
    assert card is not None
    assert "SL101" in card.contents.value and "view-noncontiguous" in card.contents.value


async def test_answers_before_torch_loads() -> None:
    started = time.monotonic()
    client, lsp = await start_session(env={"STRIDELENS_LSP_TORCH_DELAY_S": "120"})
    try:
        uri = VIEW_PATH.as_uri()
        lsp.open(uri, VIEW)
        first = await lsp.wait_analyzed(uri, timeout=30)
        assert first["exact"] is False
        assert uri in client.diagnostics  # published from the symbolic pass
        card = await lsp.hover(uri, 9, 1)  # xt: what is known without torch
        assert card is not None and "view of `x`" in card.contents.value
        assert "symbolic" in card.contents.value
        assert time.monotonic() - started < 30
    finally:
        await stop_session(client)


async def test_without_torch_the_hover_says_so(tmp_path) -> None:
    # An interpreter whose `import torch` fails (a sitecustomize blocks it).
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    client, lsp = await start_session(env={"PYTHONPATH": str(tmp_path)})
    try:
        uri = VIEW_PATH.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, timeout=60)
        card = await lsp.hover(uri, 9, 1)
        assert card is not None and "view of `x`" in card.contents.value
        assert "torch is not installed for this interpreter" in card.contents.value
        assert "once torch has loaded" not in card.contents.value
    finally:
        await stop_session(client)


async def test_exact_pass_refreshes_inlay_hints(lsp: Session) -> None:
    uri = VIEW_PATH.as_uri()
    lsp.open(uri, VIEW)
    await lsp.wait_analyzed(uri, exact=True)
    deadline = time.monotonic() + 10
    while lsp.refreshes == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert lsp.refreshes >= 1


async def test_plain_text_hover_for_clients_without_markdown() -> None:
    caps = capabilities()
    assert caps.text_document is not None
    caps.text_document.hover = types.HoverClientCapabilities(content_format=[types.MarkupKind.PlainText])
    client, lsp = await start_session(caps=caps)
    try:
        uri = VIEW_PATH.as_uri()
        lsp.open(uri, VIEW)
        await lsp.wait_analyzed(uri, exact=True)
        card = await lsp.hover(uri, 9, 1)  # xt
        assert card is not None and isinstance(card.contents, types.MarkupContent)
        assert card.contents.kind == types.MarkupKind.PlainText
        text = card.contents.value
        assert "strides (4, 12, 1)" in text and "view of x" in text, text
        assert "**" not in text and "`" not in text, text
    finally:
        await stop_session(client)


FORWARD = '''import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x, mask):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        m = mask + 1
        return k, m
'''


async def test_symbolic_sizes_in_hover_and_hints_and_quiet_elsewhere(lsp: Session) -> None:
    uri = "file:///tmp/stridelens-features/block.py"
    lsp.open(uri, FORWARD)
    await lsp.wait_analyzed(uri, exact=True)
    lines = FORWARD.splitlines()
    k_line = next(i for i, line in enumerate(lines) if line.strip().startswith("k = k.view"))
    card = (await lsp.hover(uri, k_line, 8)).contents.value
    # Sizes in the user's names, strides with `·`, and the conditions the layout needs.
    assert "`(B, self.n_head, T, C // self.n_head)`" in card
    assert "`(3·C·T, C // self.n_head, 3·C, 1)`" in card
    # (`C % self.n_head == 0` is no assumption: the view itself checks the element count.)
    assert "**assumes**" in card and "`T != 1`" in card and "C % self.n_head" not in card
    hints = {h.position.line: h.label if isinstance(h.label, str) else "".join(p.value for p in h.label) for h in await lsp.inlay_hints(uri)}
    assert hints[k_line].startswith(": (B, self.n_head, T, C // self.n_head)") and "non-contig" in hints[k_line]
    # `mask` has no known rank: no `(?)` hint on its line.
    m_line = next(i for i, line in enumerate(lines) if line.strip().startswith("m = "))
    assert m_line not in hints
    assert all("(?)" not in label for label in hints.values())


EVAL_HOOK = (Path(__file__).resolve().parents[1] / "fixtures" / "no_grad_hook.py").read_text(encoding="utf-8")


async def test_pyproject_no_grad_functions(tmp_path: Path) -> None:
    # The editor and `check` agree that a project's own no-grad hook needs no `no_grad`.
    path = tmp_path / "hook.py"
    path.write_text(EVAL_HOOK, encoding="utf-8")
    for config, expected in (("", True), ('no-grad-functions = ["my_eval_hook"]\n', False)):
        # SL206 is off by default: the project selects it.
        (tmp_path / "pyproject.toml").write_text('[tool.stridelens]\nselect = ["ALL"]\n' + config, encoding="utf-8")
        client, lsp = await start_session(root=tmp_path)
        try:
            lsp.open(path.as_uri(), EVAL_HOOK)
            await lsp.wait_analyzed(path.as_uri(), exact=True)
            codes = {d.code for d in lsp.diagnostics(path.as_uri())}
            assert ("SL206" in codes) is expected, codes
        finally:
            await stop_session(client)


async def test_a_file_over_its_budget_is_said_once(tmp_path: Path) -> None:
    from bench.generate_model import generate_model_source

    big = tmp_path / "big_model.py"
    text = generate_model_source(3000)  # ~1 s of analysis
    big.write_text(text, encoding="utf-8")
    client, lsp = await start_session(root=tmp_path, env={"STRIDELENS_LSP_BUDGET_STEPS": "200"})
    try:
        lsp.open(big.as_uri(), text)
        await lsp.wait_analyzed(big.as_uri(), exact=True)
        since = len(lsp.analyzed)
        lsp.change_full(big.as_uri(), text + "\nz = 1\n", 2)  # overruns again: not said again
        await lsp.wait_analyzed(big.as_uri(), exact=True, since=since)
        said = [m.message for m in client.messages if "stopped at its budget" in m.message]
        assert len(said) == 1, said
        assert "big_model.py" in said[0] and "200 statements" in said[0]
    finally:
        await stop_session(client)


async def test_a_file_opened_while_torch_loads_is_analysed_once_of_each_kind(tmp_path: Path) -> None:
    """A file opened just before torch is ready has its symbolic pass running when torch
    arrives. That pass goes on to the exact one: it is not thrown away and run again."""
    from bench.generate_model import generate_model_source

    first, second = tmp_path / "first.py", tmp_path / "second_model.py"
    first.write_text(VIEW, encoding="utf-8")
    text = generate_model_source(14000)  # a symbolic pass of 3-6 s here (no budget below)
    second.write_text(text, encoding="utf-8")
    log = tmp_path / "server.log"
    # Torch is "ready" 1.5 s after its import: the second file is opened in between.
    env = {"STRIDELENS_LSP_BUDGET_STEPS": "10000000", "STRIDELENS_LSP_TORCH_DELAY_S": "1.5"}
    client, lsp = await start_session(root=tmp_path, server_args=["--log-file", str(log)], env=env)
    try:
        lsp.open(first.as_uri(), VIEW)
        deadline = time.monotonic() + 60
        while "torch imported" not in log.read_text(encoding="utf-8") and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        lsp.open(second.as_uri(), text)
        await lsp.wait_analyzed(first.as_uri(), exact=True)  # torch is ready...
        assert analyses_logged(log, second.name) == []  # ... and the second's symbolic pass is running
        await lsp.wait_analyzed(second.as_uri(), exact=True, timeout=120)
        assert analyses_logged(log, second.name) == ["symbolic", "exact"]
        assert analyses_logged(log, first.name) == ["symbolic", "exact"]
        assert lsp.diagnostics(second.as_uri())
    finally:
        await stop_session(client)
