"""Opt-in memory tracing of `stridelens serve`, for soaks (bench/lsp_soak.py) and tests.

    STRIDELENS_LSP_MEMTRACE=/tmp/trace.jsonl [STRIDELENS_LSP_MEMTRACE_S=30] stridelens serve

With the variable set, a daemon thread appends one JSON line per interval: RSS, the JSON-RPC
bookkeeping (futures of handlers in flight, result types of our own requests), asyncio
tasks and threads, the object types whose counts grew since the first line, and the bytes
and source lines of the Python allocations made since the first line and still alive
(tracemalloc starts then, after warm-up: tracing the torch import would make each snapshot
take minutes). `traced_mb` growing means Python keeps something; RSS growing while it stays
flat points at the allocator instead, but only in a run without the trace: tracemalloc's own
tables and snapshots add tens of MB to RSS and slow the server several-fold. Off (no thread,
no tracemalloc) unless the variable is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import threading
import time
import tracemalloc
from collections import Counter
from typing import Any

ENV = "STRIDELENS_LSP_MEMTRACE"
INTERVAL_ENV = "STRIDELENS_LSP_MEMTRACE_S"
TOP = 12


def rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def type_counts() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def bookkeeping(server: Any) -> dict[str, int]:
    """Sizes of the structures that live as long as the connection."""
    protocol = server.protocol
    sizes = {
        "request_futures": len(getattr(protocol, "_request_futures", {})),
        "result_types": len(getattr(protocol, "_result_types", {})),
        "threads": threading.active_count(),
    }
    loop = getattr(server, "_event_loop", None)
    if loop is not None:
        with contextlib.suppress(RuntimeError):  # the task set changed under us (another thread)
            sizes["tasks"] = len(asyncio.all_tasks(loop))
    return sizes


class MemTrace:
    def __init__(self, server: Any, path: str, interval_s: float) -> None:
        self.server = server
        self.path = path
        self.interval_s = interval_s
        self.started = time.monotonic()
        self.base_types: Counter[str] | None = None

    def report(self) -> dict[str, Any]:
        if self.base_types is None:
            self.base_types = type_counts()
            tracemalloc.start()
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        lines = snapshot.statistics("lineno")[:TOP]
        types = type_counts()
        return {
            "t": round(time.monotonic() - self.started, 1),
            "rss_mb": round(rss_mb(), 1),
            "traced_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 1),
            **bookkeeping(self.server),
            "types_grown": dict((types - self.base_types).most_common(TOP)),
            "lines_grown": [f"{s.size / 1024:+.0f} KiB {s.count:+d} {s.traceback[0]}" for s in lines],
        }

    def run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            line = json.dumps(self.report())
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(line + "\n")


def start(server: Any) -> threading.Thread | None:
    """Start tracing when STRIDELENS_LSP_MEMTRACE names a file; None (and nothing done) otherwise."""
    path = os.environ.get(ENV)
    if not path:
        return None
    trace = MemTrace(server, path, float(os.environ.get(INTERVAL_ENV, "30") or 30))
    thread = threading.Thread(target=trace.run, name="stridelens-memtrace", daemon=True)
    thread.start()
    return thread
