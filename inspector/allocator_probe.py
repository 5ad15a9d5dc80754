"""The allocator probe behind `inspect --cuda-summary`: runs inside the debuggee.

Injected after the probe and the diff probe (`_stridelens_diff`), whose live-storage walk it
uses for the tensor totals. It reads the CUDA caching allocator's counters with
`torch.cuda.memory_stats(i)` (host-side counters: no device sync, no allocation) and only when
`torch.cuda.is_initialized()`: on a process that has not touched CUDA, reading would create a
context, so it says so instead. The process's resident set size comes from /proc/self/status
(Linux) or getrusage's peak.

Like the probe it imports only the standard library; torch is the target's own.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PRIVATE_NAME = "_stridelens_allocator"
FILENAME = "<stridelens-allocator-probe>"
DIFF_NAME = "_stridelens_diff"  # stridelens.inspector.diff_probe.PRIVATE_NAME

# memory_stats() keys read (torch/cuda/memory.py documents them).
STAT_KEYS = {
    "allocated": "allocated_bytes.all.current",
    "reserved": "reserved_bytes.all.current",
    "peak": "allocated_bytes.all.peak",
    "reserved_peak": "reserved_bytes.all.peak",
    "active": "active_bytes.all.current",
    "inactive_split": "inactive_split_bytes.all.current",
    "inactive_split_blocks": "inactive_split.all.current",
    "alloc_retries": "num_alloc_retries",
    "ooms": "num_ooms",
}


def N_(message: str) -> str:
    """Marks an English template for the catalogue (no stridelens import here; see probe.N_)."""
    return message


class AllocatorError(Exception):
    """A problem to report to the user as a message (not a traceback)."""


def _rss() -> dict[str, Any]:
    out: dict[str, Any] = {"rss": None, "peak_rss": None, "source": None}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    out["rss" if name == "VmRSS" else "peak_rss"] = int(value.split()[0]) * 1024
        out["source"] = "/proc/self/status"
    except OSError:
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out["peak_rss"] = peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
            out["source"] = "getrusage"
        except (ImportError, OSError):
            pass
    return out


def _tensor_totals(ns: dict[str, Any] | None) -> dict[str, dict[str, int]]:
    """Bytes of the live storages per device (each storage once), from the diff probe's walk."""
    diff = sys.modules.get(DIFF_NAME)
    if diff is None:
        raise AllocatorError(N_("the stridelens diff probe is not loaded in the target"))
    live, _ = diff._walk(ns)
    per: dict[str, dict[str, int]] = {}
    for key, n in live.bytes.items():
        d = per.setdefault(live.device_of(key), {"bytes": 0, "storages": 0})
        d["bytes"] += n
        d["storages"] += 1
    return per


def _cuda_state(torch: Any) -> tuple[str, str | None]:
    cuda = getattr(torch, "cuda", None)
    if cuda is None or getattr(getattr(torch, "version", None), "cuda", None) is None:
        return "not_built", N_("torch {version} is built without CUDA: a CPU-only target").format(
            version=getattr(torch, "__version__", "?"))
    if not cuda.is_available():
        return "unavailable", N_("torch has CUDA support but no CUDA device is available (no GPU or driver)")
    if not cuda.is_initialized():
        return "not_initialized", N_("CUDA is available but this process has not used it yet: the allocator "
                                     "holds nothing (reading it now would create a CUDA context, so it is not "
                                     "read)")
    return "ok", None


def summary(ns: dict[str, Any] | None) -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        raise AllocatorError(N_("the target process has not imported torch"))
    state, why = _cuda_state(torch)
    devices: list[dict[str, Any]] = []
    backend = None
    if state == "ok":
        cuda = torch.cuda
        backend = getattr(cuda, "get_allocator_backend", lambda: None)()
        for i in range(cuda.device_count()):
            stats = cuda.memory_stats(i)
            if not stats:
                continue
            row: dict[str, Any] = {"device": f"cuda:{i}"}
            row.update({name: int(stats.get(key, 0)) for name, key in STAT_KEYS.items()})
            row["missing_keys"] = sorted(key for key in STAT_KEYS.values() if key not in stats)
            if row["reserved"] or i == cuda.current_device():
                devices.append(row)
    return {"cuda": state, "cuda_message": why, "allocator_backend": backend, "devices": devices,
            "process": _rss(), "tensors": _tensor_totals(ns)}


def _json(fn: Any, *args: Any) -> str:
    try:
        return json.dumps({"ok": True, "result": fn(*args)})
    except AllocatorError as e:
        return json.dumps({"ok": False, "error": str(e)})
    except Exception as e:  # noqa: BLE001 -- report it; never raise into the user's process
        return json.dumps({"ok": False, "error": N_("allocator probe failed: {error}").format(error=f"{type(e).__name__}: {e}")})


def summary_json(ns: dict[str, Any] | None) -> str:
    return _json(summary, ns)
