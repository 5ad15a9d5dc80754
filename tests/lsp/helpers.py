"""Helpers shared by the LSP tests: pytest-lsp drives `stridelens serve` over stdio."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SERVER = [sys.executable, "-m", "stridelens", "serve"]
ANALYZED = "stridelens/analyzed"


def capabilities() -> types.ClientCapabilities:
    """VS Code's capabilities, with inlay hints / code actions / configuration declared."""
    caps = client_capabilities("visual-studio-code")
    td = caps.text_document or types.TextDocumentClientCapabilities()
    td.inlay_hint = types.InlayHintClientCapabilities(dynamic_registration=False)
    td.code_action = types.CodeActionClientCapabilities(
        code_action_literal_support=types.ClientCodeActionLiteralOptions(
            code_action_kind=types.ClientCodeActionKindOptions(
                value_set=["quickfix", "source", "source.fixAll", "source.fixAll.stridelens"]
            )
        ),
        data_support=True,
        is_preferred_support=True,
        resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]),
    )
    td.hover = types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown])
    td.publish_diagnostics = types.PublishDiagnosticsClientCapabilities(
        code_description_support=True, data_support=True, version_support=True
    )
    caps.text_document = td
    ws = caps.workspace or types.WorkspaceClientCapabilities()
    ws.configuration = True
    ws.apply_edit = True
    ws.inlay_hint = types.InlayHintWorkspaceClientCapabilities(refresh_support=True)
    caps.workspace = ws
    caps.general = types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16])
    return caps


class Session:
    """One running server and the notifications it sent."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.analyzed: list[dict[str, Any]] = []
        self.refreshes = 0
        self._event = asyncio.Event()

    def on_analyzed(self, params: Any) -> None:
        self.analyzed.append(_plain(params))
        self._event.set()

    async def wait_analyzed(
        self,
        uri: str,
        *,
        exact: bool | None = None,
        version: int | None = None,
        since: int = 0,
        timeout: float = 60.0,
        scope: str | None = None,
    ) -> dict[str, Any]:
        """The first `stridelens/analyzed` that matches: by default a whole-file run's, with
        `scope` ("edited blocks") the final findings of a run over part of the file."""

        async def wait() -> dict[str, Any]:
            while True:
                for item in self.analyzed[since:]:
                    if item["uri"] != uri or item.get("scope") != scope:
                        continue
                    if exact is not None and item["exact"] != exact:
                        continue
                    if version is not None and item["version"] != version:
                        continue
                    return item
                self._event.clear()
                await self._event.wait()

        return await asyncio.wait_for(wait(), timeout)

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
            )
        )

    def change_full(self, uri: str, text: str, version: int) -> None:
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    async def hover(self, uri: str, line: int, character: int) -> types.Hover | None:
        return await asyncio.wait_for(
            self.client.text_document_hover_async(
                types.HoverParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    position=types.Position(line=line, character=character),
                )
            ),
            30,
        )

    async def inlay_hints(self, uri: str, last_line: int = 10_000) -> list[types.InlayHint]:
        result = await asyncio.wait_for(
            self.client.text_document_inlay_hint_async(
                types.InlayHintParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=types.Range(
                        start=types.Position(line=0, character=0),
                        end=types.Position(line=last_line, character=0),
                    ),
                )
            ),
            30,
        )
        return list(result or [])

    def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        return list(self.client.diagnostics.get(uri, []))


def _plain(params: Any) -> dict[str, Any]:
    if isinstance(params, dict):
        return params
    return {k: getattr(params, k) for k in ("uri", "version", "exact", "findings")}


async def start_session(
    init_options: dict[str, Any] | None = None,
    configuration: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    root: Path | None = None,
    patch: Callable[[LanguageClient], None] | None = None,
    caps: types.ClientCapabilities | None = None,
    locale: str | None = None,
    server_args: list[str] | None = None,
) -> tuple[LanguageClient, Session]:
    server_env = dict(os.environ)
    server_env.update(env or {})
    config = ClientServerConfig(server_command=SERVER + (server_args or []), server_env=server_env)
    client = await config.start()
    session = Session(client)
    @client.feature(ANALYZED)
    def _analyzed(params: Any) -> None:
        session.on_analyzed(params)

    @client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)
    def _refresh(params: Any) -> None:
        session.refreshes += 1

    if configuration is not None:
        client.set_configuration(configuration, section="stridelens")
    if patch is not None:
        patch(client)
    root = root or ROOT
    await asyncio.wait_for(
        client.initialize_session(
            types.InitializeParams(
                capabilities=caps or capabilities(),
                root_uri=root.as_uri(),
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
                initialization_options=init_options,
                locale=locale,
            )
        ),
        30,
    )
    return client, session


async def stop_session(client: LanguageClient) -> None:
    try:
        await asyncio.wait_for(client.shutdown_session(), 10)
    except (TimeoutError, asyncio.TimeoutError, RuntimeError):
        pass
    finally:
        server = client._server
        if server is not None and server.returncode is None:
            server.kill()
        await client.stop()


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP text edits (UTF-16 positions) to `text`, the way an editor does."""
    lines = text.split("\n")

    def offset(pos: types.Position) -> int:
        before = sum(len(line) + 1 for line in lines[: pos.line])
        line = lines[pos.line] if pos.line < len(lines) else ""
        units = 0
        for i, ch in enumerate(line):
            if units >= pos.character:
                return before + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return before + len(line)

    spans = sorted(((offset(e.range.start), offset(e.range.end), e.new_text) for e in edits), reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


async def code_actions(
    session: Session, uri: str, diagnostics: list[types.Diagnostic], only: list[str] | None = None
) -> list[types.CodeAction]:
    rng = diagnostics[0].range if diagnostics else types.Range(
        start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)
    )
    result = await asyncio.wait_for(
        session.client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=rng,
                context=types.CodeActionContext(diagnostics=diagnostics, only=only),
            )
        ),
        30,
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stridelens", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )


def check_available() -> bool:
    proc = subprocess.run(
        [sys.executable, "-m", "stridelens", "check", "--help"], capture_output=True, text=True, timeout=60
    )
    return proc.returncode == 0 and "not available" not in proc.stderr
