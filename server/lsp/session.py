"""The server's state: open documents, settings, and the analysis runs behind them.

A change schedules one run per document (debounced; a newer change cancels the older run):
the symbolic pass first (fast, never waits for torch), published at once, then the exact
pass with meta replay once torch has loaded. While the exact pass of an edited text is
running, the published diagnostics are the symbolic findings plus the exact findings of the
previous text outside the edited lines (moved with them), so an edit is answered in
milliseconds and the exact answer replaces it.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import logging
import os
import time
from dataclasses import replace
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer

from stridelens import __version__, i18n
from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, analyze_source, collector
from stridelens.server.lsp import diagnostics, generated_code_cache, notebooks
from stridelens.server.lsp.code_actions import MAX_FIX_PASSES
from stridelens.server.lsp.configuration import (
    REANALYSE,
    RECHECK,
    Settings,
    changed,
    merge_settings,
    project_settings,
)
from stridelens.server.lsp.documents import DocState, Encoding, Snapshot, split_lines, uri_to_path
from stridelens.server.lsp.partial import PartialText, edit_findings, partial_text
from stridelens.server.lsp.protocol import StridelensProtocol
from stridelens.server.lsp.transport import run_stdio, run_tcp
from stridelens.server.lsp.worker import EXACT_BUDGET_STEPS, SYMBOLIC_BUDGET_STEPS, Worker

log = logging.getLogger("stridelens.lsp")

# Larger documents (generated code, data dumps) get no analysis: parsing alone would take
# seconds per keystroke. The largest model files seen in the wild are ~0.3 MB.
MAX_DOCUMENT_CHARS = 2_000_000


def analyze_document(text: str, path: str, *, exact: bool) -> Analysis:
    if len(text) > MAX_DOCUMENT_CHARS:
        return analyze_source("", path, replay=False)
    return analyze_source(text, path, replay=exact, budget_steps=budget_steps(exact))


def budget_steps(exact: bool) -> int:
    """A pass's budget: statements interpreted."""
    override = os.environ.get(BUDGET_ENV)
    return int(override) if override else (EXACT_BUDGET_STEPS if exact else SYMBOLIC_BUDGET_STEPS)


CONFIG_SECTION = "stridelens"
ANALYZED = "stridelens/analyzed"
EDITED_BLOCKS = "edited blocks"  # `stridelens/analyzed`'s scope of an edit's final findings
IDLE_COLLECT_S = 2.0  # a full garbage collection this long after the last edit and analysis
QUIET_S = 0.4  # after an edit answered from its blocks, wait this long before the whole file
# Tests only: pretend torch takes this long to import (the "answers before torch" path).
TORCH_DELAY_ENV = "STRIDELENS_LSP_TORCH_DELAY_S"
# Tests only: both passes' budget in statements (how a test makes a file overrun it).
BUDGET_ENV = "STRIDELENS_LSP_BUDGET_STEPS"


class StridelensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "stridelens",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=notebooks.SYNC_OPTIONS,
            protocol_cls=StridelensProtocol,
        )
        self.docs: dict[str, DocState] = {}
        self.notebooks = notebooks.Notebooks()
        self.worker = Worker()
        self.settings = Settings()
        self.base_settings = Settings()  # pyproject + initializationOptions
        self.encoding = Encoding()
        self.root: str | None = None
        self.root_uri: str | None = None
        self.exact_ready = False
        self.client_locale: str | None = None  # initialize's `locale`
        self.symbolic_runs = 0  # symbolic passes in flight: torch's import waits for them
        self._collector_was_on = True  # the collector's state before the symbolic passes held it
        self._idle_collect: asyncio.TimerHandle | None = None
        self._wire: dict[str, diagnostics.WireDiagnostics] = {}  # per document uri
        self.started = time.monotonic()
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self.overran: set[str] = set()  # documents whose final analysis stopped at its budget (told once)

    # pygls' read loops go deaf after one badly framed message: ours resync (transport.py).
    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        run_stdio(self, stdin, stdout)

    def start_tcp(self, host: str, port: int) -> None:
        run_tcp(self, host, port)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """Messages the read loop could not handle (bad JSON, not an object, no `jsonrpc`) are
        the client's problem, not the user's: logged, never shown as an editor popup."""
        if source is JsonRpcException:
            log.warning("unusable message from the client: %s: %s", type(error).__name__, error)
            return
        super().report_server_error(error, source)

    # ---- settings -------------------------------------------------------------------

    def report(self, problems: list[str]) -> None:
        if problems:
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Warning,
                    message=tr("stridelens settings: {problems} (defaults used instead)").format(
                        problems="; ".join(problems)
                    ),
                )
            )

    def setup(self, params: types.InitializeParams) -> None:
        self.encoding = Encoding(self.workspace.position_encoding)
        self.root_uri = params.root_uri or (
            params.workspace_folders[0].uri if params.workspace_folders else None
        )
        self.root = uri_to_path(self.root_uri) if self.root_uri else params.root_path
        base, problems = project_settings(self.root)
        base, more = merge_settings(base, params.initialization_options, "initializationOptions")
        self.base_settings = self.settings = base
        self.client_locale = params.locale
        self.apply_language()
        if i18n.language() != i18n.ENGLISH:  # the problems were written before the language was known
            base, problems = project_settings(self.root)
            _, more = merge_settings(base, params.initialization_options, "initializationOptions")
        self.report(problems + more)

    def apply_language(self) -> None:
        """Messages in the `locale` setting's language, else initialize's `locale` (VS Code's
        display language), else the POSIX locale variables the server was started with."""
        i18n.set_language(self.settings.locale or self.client_locale or i18n.from_environment())

    def start_torch(self) -> None:
        """Import torch in the background: after the first symbolic answers (the import
        holds the GIL for much of its ~3 s), or a second after `initialized` at the latest.
        The first answers have made the protocol's converters by then: their code is cached."""
        generated_code_cache.save()
        if self.settings.replay:
            self.worker.load_torch_in_background(self._torch_loaded)

    def start_torch_unless_busy(self) -> None:
        """The one-second timer's start: while a symbolic pass runs, importing torch would
        halve its speed (both want the GIL; measured 2.3 s -> 3.9 s to the first diagnostics
        of a 3,000-line file), so the pass starts the import itself when it has published."""
        if self.symbolic_runs == 0:
            self.start_torch()

    def _torch_loaded(self) -> None:  # in the torch thread
        log.info("torch imported %.1f s after the start", time.monotonic() - self.started)
        collector.freeze_imported()  # torch's import leaves ~110k long-lived objects
        delay = float(os.environ.get(TORCH_DELAY_ENV, "0") or 0)
        if delay > 0:
            time.sleep(delay)
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_torch_ready)

    def _on_torch_ready(self) -> None:
        if self.worker.torch_error:
            self.window_log_message(
                types.LogMessageParams(
                    type=types.MessageType.Warning,
                    message=tr("stridelens: torch could not be imported ({error}); symbolic facts only").format(
                        error=self.worker.torch_error
                    ),
                )
            )
            return
        self.exact_ready = True
        for state in self.docs.values():
            # A run in flight goes on to the exact pass by itself (`_run` asks after its
            # symbolic one): cancelling it would throw that pass away and start it again.
            if state.task is None or state.task.done():
                self.schedule(state, 0.0)

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self._event_loop

    def supports(self, path: str) -> bool:
        caps: Any = self.client_capabilities
        for part in path.split("."):
            caps = getattr(caps, part, None)
            if caps is None:
                return False
        return bool(caps)

    def hover_markdown(self) -> bool:
        """Markdown hovers unless the client lists content formats without Markdown
        (e.g. Emacs' eglot without markdown-mode asks for plain text only)."""
        hover = getattr(self.client_capabilities.text_document, "hover", None)
        formats = getattr(hover, "content_format", None)
        return not formats or types.MarkupKind.Markdown in formats

    def supports_resolve(self, prop: str) -> bool:
        support = getattr(getattr(self.client_capabilities.text_document, "code_action", None), "resolve_support", None)
        return support is not None and prop in (support.properties or [])

    async def pull_configuration(self) -> None:
        if not self.supports("workspace.configuration"):
            return
        try:
            result = await asyncio.wait_for(
                self.workspace_configuration_async(
                    types.ConfigurationParams(
                        items=[types.ConfigurationItem(section=CONFIG_SECTION, scope_uri=self.root_uri)]
                    )
                ),
                timeout=5.0,
            )
        except (TimeoutError, asyncio.TimeoutError, Exception) as err:  # noqa: BLE001
            log.info("workspace/configuration failed: %s", err)
            return
        raw = result[0] if result else None
        settings, problems = merge_settings(self.base_settings, raw, "workspace configuration")
        self.report(problems)
        if settings == self.settings:
            return
        old, self.settings = self.settings, settings
        self.apply_language()
        if changed(old, settings, REANALYSE):
            for state in self.docs.values():
                self.schedule(state, 0.0)
        elif changed(old, settings, RECHECK):
            # The analyses stand: a run in flight chooses its findings with these settings (or
            # chooses them again, `_checked`); a settled document gets the rules again only.
            # Cancelling the runs instead redid the first analysis of every open document.
            for state in self.docs.values():
                if state.task is None or state.task.done():
                    state.task = asyncio.ensure_future(self._recheck(state))
        self.refresh_inlay_hints()

    def refresh_inlay_hints(self) -> None:
        if self.supports("workspace.inlay_hint.refresh_support"):
            self.workspace_inlay_hint_refresh(None)

    # ---- documents and runs ---------------------------------------------------------

    def open(self, uri: str, text: str, version: int | None) -> None:
        state = DocState(uri=uri, path=uri_to_path(uri), version=version, text=text)
        if len(text) > MAX_DOCUMENT_CHARS:
            self.window_show_message(
                types.ShowMessageParams(
                    type=types.MessageType.Info,
                    message=tr("stridelens: {path} has {count} characters; files over {limit} are not analysed").format(
                        path=state.path or uri, count=f"{len(text):,}", limit=f"{MAX_DOCUMENT_CHARS:,}"
                    ),
                )
            )
        self.docs[uri] = state
        self.schedule(state, 0.0)

    def change(self, uri: str, text: str, version: int | None) -> None:
        state = self.docs.get(uri)
        if state is None:
            self.open(uri, text, version)
            return
        state.set_text(text, version)
        if self._idle_collect is not None:
            self._collect_when_idle()  # the user is typing: not yet
        # Nothing of this document running: analyse at once (an edit's answer comes in tens
        # of milliseconds). While a run is going, wait for a pause in typing before the next.
        self.schedule(state, self.settings.debounce_ms / 1000 if state.running else 0.0)

    def close(self, uri: str) -> None:
        self._wire.pop(uri, None)
        state = self.docs.pop(uri, None)
        if state is not None and state.task is not None:
            state.task.cancel()
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def schedule(self, state: DocState, delay: float) -> None:
        if state.task is not None and not state.task.done():
            state.task.cancel()
        self._event_loop = asyncio.get_running_loop()
        state.task = asyncio.ensure_future(self._run(state, delay))

    def _snapshot(self, text: str, version: int | None, path: str, exact: bool, kind: str = "") -> Snapshot:
        """Analyse `text` and choose its findings with the settings of that moment. `kind`
        names the analysis in the log (default: exact or symbolic)."""
        start = time.perf_counter()
        analysis = analyze_document(text, path, exact=exact)
        log.info("analysed %s (%s, %d chars) in %.3f s", path or "<untitled>",
                 kind or ("exact" if exact else "symbolic"), len(text), time.perf_counter() - start)
        return self._check(Snapshot(version, text, analysis, [], exact))

    def _check(self, snap: Snapshot) -> Snapshot:
        settings = self.settings
        if snap.settings is not None:
            log.info("rules again for the %s analysis of version %s: the settings changed",
                     "exact" if snap.exact else "symbolic", snap.version)
        try:
            findings = diagnostics.check(snap.analysis, settings, split_lines(snap.text))
        except Exception as err:
            log.exception("rules failed: %s", err)
            findings = []
        return replace(snap, findings=findings, settings=settings)

    async def _checked(self, snap: Snapshot) -> Snapshot:
        """`snap`, its findings chosen again if the settings changed while it ran."""
        while snap.settings != self.settings:
            snap = await self.worker.run_fast(functools.partial(self._check, snap))
        return snap

    async def _recheck(self, state: DocState) -> None:
        """New settings for a settled document: the rules again on its analysis, published."""
        snap = state.current()
        if snap is None or snap.settings is None or (not snap.exact and self.exact_ready and self.settings.replay):
            # never analysed (or only for a hover, no rules), or torch arrived meanwhile: a whole run
            await self._run(state, 0.0)
            return
        snap = await self._checked(snap)
        if state.text != snap.text:
            return
        if snap.exact:
            state.exact = snap
        else:
            state.symbolic = snap
        self.publish(state, snap.findings)
        self.announce(state, snap)

    async def _run(self, state: DocState, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        text, version = state.text, state.version
        previous = state.exact
        exact_on = self.exact_ready and self.settings.replay
        edited = exact_on and previous is not None and previous.text != text
        if edited and previous is not None and not await self._answer_edit(state, previous, text, version):
            return  # the text changed meanwhile
        if not edited or state.published_version != version:
            # Torch's arrival reschedules the settled documents: one whose text has its symbolic
            # analysis already goes straight to the exact pass (the symbolic one was ~1 s of a
            # 3,000-line file's time to its exact diagnostics).
            symbolic = state.symbolic if state.symbolic is not None and state.symbolic.text == text else None
            settled = symbolic is not None and state.published_version == version
            if symbolic is None:
                if self.symbolic_runs == 0:
                    self._collector_was_on = collector.hold()  # until the publish below (collector.py)
                self.symbolic_runs += 1
                try:
                    symbolic = await self.worker.run_fast(state.counted(lambda: self._snapshot(text, version, state.path, False)))
                finally:
                    self.symbolic_runs -= 1
                    if self.symbolic_runs == 0:  # runs after this step's publish below
                        loop = asyncio.get_running_loop()
                        loop.call_soon(collector.release, self._collector_was_on)
                        loop.call_soon(self.start_torch)
            checked = await self._checked(symbolic)
            settled = settled and checked is symbolic  # nothing new to publish
            symbolic = checked
            if state.text != text:
                return
            state.symbolic = symbolic
            exact_on = self.exact_ready and self.settings.replay  # torch may have arrived meanwhile
            if not exact_on:
                self.publish(state, symbolic.findings)
                self.announce(state, symbolic)
                self.tell_if_overrun(state, symbolic)
                return
            if previous is not None and previous.text != text:
                carried = diagnostics.carry_over(previous.findings, split_lines(previous.text), state.lines)
                self.publish(state, diagnostics.merge(carried, symbolic.findings))
            elif previous is None and not settled:
                self.publish(state, symbolic.findings)
        # Not kept past here: the previous analysis is freed as state.exact replaces it, before
        # the announce (a 3,000-line file's takes ~20 ms to free).
        previous = None
        exact = await self.worker.run_exact(state.counted(lambda: self._snapshot(text, version, state.path, True)))
        exact = await self._checked(exact)
        if state.text != text:
            return
        first_exact = state.exact is None
        state.exact = exact
        self.publish(state, exact.findings)
        self.announce(state, exact)
        self.tell_if_overrun(state, exact)
        if first_exact:
            self.refresh_inlay_hints()
        self._collect_when_idle()

    async def _answer_edit(self, state: DocState, previous: Snapshot, text: str, version: int | None) -> bool:
        """After an edit, the diagnostics from the edited blocks: final where nothing else can
        see the edit, else provisional (the other blocks' previous findings, moved). False
        when the text changed meanwhile."""
        old_lines = split_lines(previous.text)
        new_lines = state.lines
        final = await self.worker.run_exact(
            state.counted(lambda: self._final(previous, old_lines, new_lines, text, state.path))
        )
        if state.text != text:
            return False
        if final is not None:
            # The whole file's findings: published as exact. The whole-file pass still follows
            # (hovers and inlay hints read it).
            self.publish(state, final)
            self.announce(state, Snapshot(version, text, previous.analysis, final, True), scope=EDITED_BLOCKS)
            await asyncio.sleep(QUIET_S)
            return state.text == text
        old_tree = previous.analysis.tree
        fast = await self.worker.run_exact(
            state.counted(lambda: self._partial(old_tree, old_lines, new_lines, state.path))
        )
        if state.text != text:
            return False
        if fast is not None:
            part, findings = fast
            carried = [
                f
                for f in diagnostics.carry_over(previous.findings, old_lines, state.lines)
                if not part.first <= f.line <= part.last
            ]
            self.publish(state, diagnostics.merge(carried, findings))
            await asyncio.sleep(QUIET_S)  # the whole-file pass waits for a pause in typing
        return state.text == text

    def _collect_when_idle(self) -> None:
        """One full collection IDLE_COLLECT_S after the last edit and analysis (see
        collector.collect_frozen): never while the user types."""
        if self._idle_collect is not None:
            self._idle_collect.cancel()
        self._idle_collect = asyncio.get_running_loop().call_later(IDLE_COLLECT_S, self._collect_if_idle)

    def _collect_if_idle(self) -> None:
        self._idle_collect = None
        if any(s.task is not None and not s.task.done() for s in self.docs.values()):
            self._collect_when_idle()  # a run is going: after it
            return
        start = time.perf_counter()
        freed = collector.collect_frozen()
        log.info("idle collection: %d objects freed in %.3f s", freed, time.perf_counter() - start)

    def _final(
        self, previous: Snapshot, old_lines: list[str], new_lines: list[str], text: str, path: str
    ) -> list[Any] | None:
        """The new text's whole-file findings from a run over only the blocks the edit can
        reach (partial.py: `closed`), or None where that is not known to be the same."""
        if previous.settings != self.settings or len(text) > MAX_DOCUMENT_CHARS:
            return None
        start = time.perf_counter()
        answer = edit_findings(
            previous.analysis, previous.findings, old_lines, new_lines, text, path, self.settings, budget_steps(True)
        )
        if answer is None:
            return None
        findings, kept = answer
        log.info("analysed %s (edited blocks, final, %d of %d lines) in %.3f s", path or "<untitled>",
                 kept, len(new_lines), time.perf_counter() - start)
        return findings

    def _partial(
        self, old_tree: ast.Module, old_lines: list[str], new_lines: list[str], path: str
    ) -> tuple[PartialText, list[Any]] | None:
        part = partial_text(old_tree, old_lines, new_lines)
        if part is None:
            return None
        snap = self._snapshot(part.source, None, path, True, "edited blocks")
        return part, [f for f in snap.findings if part.first <= f.line <= part.last]

    def publish(self, state: DocState, findings: list[Any]) -> None:
        state.published = findings
        state.published_version = state.version
        wire = self._wire.setdefault(state.uri, diagnostics.WireDiagnostics())
        state.set_published(wire(findings, state.lines, self.encoding, self.settings, state.version))
        if self.notebooks.is_notebook(state.uri):  # a notebook's program: each cell gets its own
            for span in self.notebooks.spans[state.uri]:
                self.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(
                        uri=span.uri, diagnostics=notebooks.diagnostics_of_cell(span, state.published_diagnostics)
                    )
                )
            return
        # As lsprotocol would send it, without rebuilding every diagnostic through its classes.
        self.protocol._send_data(
            {
                "jsonrpc": "2.0",
                "method": types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS,
                "params": {"uri": state.uri, "version": state.version, "diagnostics": state.published_wire},
            }
        )

    def tell_if_overrun(self, state: DocState, snap: Snapshot) -> None:
        """A final analysis that stopped at its budget has no findings past that point:
        said once per document, not left for the user to take as a clean bill of health."""
        if not snap.analysis.timed_out or state.uri in self.overran:
            return
        self.overran.add(state.uri)
        self.window_show_message(
            types.ShowMessageParams(
                type=types.MessageType.Info,
                message=tr("stridelens: {path}: the analysis stopped at its budget ({steps} statements "
                           "interpreted), so code after that point has no diagnostics").format(
                    path=os.path.basename(state.path) or state.uri, steps=budget_steps(snap.exact)),
            )
        )

    def announce(self, state: DocState, snap: Snapshot, scope: str | None = None) -> None:
        """`stridelens/analyzed`: a run finished (clients may show it; tests wait on it).
        `scope`: the diagnostics are the whole file's, from a run over part of it only."""
        params: dict[str, Any] = {"uri": state.uri, "version": state.version, "exact": snap.exact, "findings": len(snap.findings)}
        if scope is not None:
            params["scope"] = scope
        self.protocol.notify(ANALYZED, params)

    async def fix_all_text(self, state: DocState) -> str:
        """The document with every safe fix applied, re-analysed until none is left."""
        from stridelens.server.rules.fixes import apply_fixes

        exact = self.exact_ready and self.settings.replay
        path = state.path

        def work() -> str:
            text = state.text
            for _ in range(MAX_FIX_PASSES):
                snap = self._snapshot(text, None, path, exact)
                result = apply_fixes(text, snap.findings)
                if not result.applied or result.source == text:
                    break
                text = result.source
            return text

        if exact:
            return await self.worker.run_exact(work)
        return await self.worker.run_fast(work)

    async def snapshot_for(self, uri: str) -> tuple[list[str], Snapshot] | None:
        """The analysis of the document's current text (and that text's lines); a quick
        symbolic one if none yet, computed in the worker so the event loop keeps serving."""
        state = self.docs.get(uri)
        if state is None:
            return None
        snap = state.current()
        if snap is None:
            text, version, path = state.text, state.version, state.path
            analysis = await self.worker.run_fast(lambda: analyze_document(text, path, exact=False))
            snap = Snapshot(version, text, analysis, [], False)
            if state.text == text:
                state.adhoc = snap
        lines = state.lines if snap.text == state.text else split_lines(snap.text)
        return lines, snap
