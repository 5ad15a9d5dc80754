"""Heavy work off the event loop.

Two single-thread executors: a fast lane for the symbolic pass (never imports torch, a few
milliseconds per hundred lines) and an exact lane for meta replay (needs torch). A queued
run whose document has moved on is cancelled before it starts (asyncio cancels the
executor future); a run already going finishes within its budget and its result is
dropped by the caller when the document's version no longer matches.

torch is imported in a background thread as soon as the server starts, so `initialize`
and the first answers never wait for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from stridelens.server.analysis.engine import DEFAULT_BUDGET_STEPS
from stridelens.server.analysis.replay import load_torch, torch_loaded

T = TypeVar("T")

# Statements interpreted per pass. The exact pass (the diagnostics that stay) has `check`'s
# budget, so the editor and CI agree; the symbolic pass, on the typing path, stops sooner.
EXACT_BUDGET_STEPS = DEFAULT_BUDGET_STEPS
SYMBOLIC_BUDGET_STEPS = 10_000


class Worker:
    def __init__(self) -> None:
        self._fast = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stridelens-symbolic")
        self._exact = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stridelens-exact")
        self._torch_thread: threading.Thread | None = None
        self.torch_error: str | None = None

    @staticmethod
    def torch_ready() -> bool:
        return torch_loaded()

    def load_torch_in_background(self, on_ready: Callable[[], None]) -> None:
        """Import torch in a daemon thread; `on_ready` runs (in that thread) when done."""
        if self._torch_thread is not None:
            return

        def load() -> None:
            try:
                load_torch()
            except Exception as err:  # noqa: BLE001 - a broken torch leaves symbolic analysis
                self.torch_error = f"{type(err).__name__}: {err}"
            on_ready()

        self._torch_thread = threading.Thread(target=load, name="stridelens-torch", daemon=True)
        self._torch_thread.start()

    async def run_fast(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._fast, fn)

    async def run_exact(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._exact, fn)

    def stop(self) -> None:
        self._fast.shutdown(wait=False, cancel_futures=True)
        self._exact.shutdown(wait=False, cancel_futures=True)
