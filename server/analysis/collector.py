"""When Python's cyclic garbage collector runs in stridelens' own processes (`serve`, `check`).

An analysis allocates tens of thousands of small objects that all stay alive until it ends
(facts, layouts, scope snapshots). With the default thresholds (a young collection every 700
allocations) the collector keeps re-scanning and promoting them, and every old-generation pass
also walks everything imported so far (the server has ~50k objects once imported, torch adds
~110k): it was a fifth to a half of the symbolic pass on a 3,000-line file. So, for the
processes stridelens owns (never for a library caller of `analyze_source`):

- `collect_less_often()` sets the young-generation threshold to `YOUNG_THRESHOLD`
  allocations. Garbage is still collected, only in bigger batches. Set once for the process:
  raising it per analysis and restoring it after made the first allocation after each
  analysis pay for a collection of everything the analysis had made;
- `freeze_imported()` moves what exists after start-up imports (modules, classes,
  constants: never garbage) out of the collector's view;
- `paused()` holds collections off while the server imports pygls and lsprotocol: ~50k
  objects, none of them garbage, that the collector would walk ~150 times (0.05-0.1 s);
- `hold()` / `release()` do the same across the server's symbolic pass and its publish:
  everything the pass makes stays alive until it ends, so its three or so collections
  (0.13-0.15 s of ~1 s on a 3,000-line file) found nothing; one collection after the
  diagnostics are out does the same job off the user's wait;
- `analysing()` holds collections off across each of the server's analyses and then
  freezes what they made: a finished analysis stays alive as the document's, and an
  analysis leaves no garbage cycles (measured: none on a 3,000-line file, exact or
  symbolic), so walking it found nothing. Unfrozen, the young generation held up to 50,000
  of its objects and each collection cost 15-100 ms, some of them on an edit's answer;
- `collect_frozen()` unfreezes, collects everything once, and freezes again: the server
  calls it when the user has paused, so replaced analyses frozen meanwhile that did form a
  cycle are freed too (refcounting frees the rest at once, frozen or not).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG_THRESHOLD = 50_000


def collect_less_often() -> None:
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_imported() -> None:
    """Take every object alive now out of future collections. No collection first: it would
    cost as much as the ones saved (0.2-0.5 s once torch is in), for the few kilobytes of
    garbage that imports leave."""
    gc.freeze()


def hold() -> bool:
    """Stop collections until `release(...)`; returns whether they were on (pass it back)."""
    was_enabled = gc.isenabled()
    gc.disable()
    return was_enabled


def release(was_enabled: bool) -> None:
    if was_enabled:
        gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No collection inside (for start-up imports); the collector's previous state after."""
    was_enabled = hold()
    try:
        yield
    finally:
        release(was_enabled)


_lock = threading.Lock()
_analyses = 0  # analyses running now (each in a worker thread)
_was_enabled = True


@contextlib.contextmanager
def analysing() -> Iterator[None]:
    """No collection while an analysis runs (on any thread); what the analyses made is
    frozen when the last one ends."""
    global _analyses, _was_enabled
    with _lock:
        if _analyses == 0:
            _was_enabled = hold()
        _analyses += 1
    try:
        yield
    finally:
        with _lock:
            _analyses -= 1
            if _analyses == 0:
                gc.freeze()
                release(_was_enabled)


def collect_frozen() -> int:
    """Collect everything once (frozen objects included), then freeze what is left; the
    number of objects freed. Not while an analysis runs: it would walk what that made."""
    with _lock:
        if _analyses:
            return 0
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        return found
