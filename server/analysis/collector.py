"""When Python's cyclic garbage collector runs during an analysis.

An analysis allocates tens of thousands of small objects that all stay alive until it ends
(facts, layouts, scope snapshots). With the default thresholds (a young collection every 700
allocations) the collector keeps re-scanning them and promoting them, and every old-generation
pass also walks everything imported so far (the server has ~50k objects once imported, torch adds ~110k): it
was a fifth to a half of the symbolic pass on a 3,000-line file. So:

- `freeze_imported()` moves what exists after start-up (modules, classes, constants: never
  garbage) out of the collector's view, once the imports are done;
- `fewer_collections()` raises the young-generation threshold while an analysis runs. Garbage
  is still collected, only less often; the analysis's own memory is bounded by its budget.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ANALYSIS_THRESHOLD = 50_000  # allocations between young collections during an analysis

_lock = threading.Lock()
_active = 0
_saved: tuple[int, ...] | None = None


def freeze_imported() -> None:
    """Take every object alive now out of future collections (after start-up imports). No
    collection first: it would cost as much as the ones saved (0.2-0.5 s once torch is in),
    for the few kilobytes of garbage that imports leave."""
    gc.freeze()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Young collections every `ANALYSIS_THRESHOLD` allocations while any analysis runs (the
    server runs two at once, on two threads: the first in sets it, the last out restores)."""
    global _active, _saved
    with _lock:
        if _active == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(ANALYSIS_THRESHOLD, _saved[0]), *_saved[1:])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                gc.set_threshold(*_saved)
