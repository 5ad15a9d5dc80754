"""`inspect --cuda-summary`: the CUDA caching allocator's numbers, each with one sentence on what
it means, and the share the live tensors account for; on CPU-only targets (or before the
process has used CUDA) it says so and puts the process's resident memory next to the tensor
totals. The numbers come from the allocator probe (`allocator_probe.py`, in the debuggee).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stridelens.inspector import allocator_probe, diff_probe
from stridelens.server.units import human_bytes, plural


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cuda-summary", action="store_true",
                   help="the CUDA allocator explained: allocated, reserved, peak, inactive split bytes, "
                        "allocation retries, OOMs, and the share the live tensors account for; on a "
                        "CPU-only target the process RSS next to the tensor totals")


def requested(args: argparse.Namespace) -> bool:
    return bool(args.cuda_summary)


def _share(part: int, whole: int | None) -> float | None:
    return part / whole if whole else None


def _pct(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{100 * x:.1f}%" if x >= 0.01 else f"{100 * x:.2g}%"


def _b(n: int) -> str:
    return f"{human_bytes(n)} ({n:,} B)"


def explain_device(d: dict[str, Any], tensor_bytes: int, backend: str | None) -> list[dict[str, Any]]:
    """One entry per number: name, value, meaning (one sentence)."""
    alloc, reserved, cached = d["allocated"], d["reserved"], d["reserved"] - d["allocated"]
    rows = [
        {"name": "allocated", "bytes": alloc, "meaning":
            f"{human_bytes(alloc)} is held by live tensors on {d['device']} (the allocator's blocks in use, "
            "rounded up to its 512-byte granularity)"},
        {"name": "reserved", "bytes": reserved, "meaning":
            f"{human_bytes(reserved)} is taken from the driver by the caching allocator; {human_bytes(cached)} of it "
            "is cached and reusable: not a leak; torch.cuda.empty_cache() returns it to the driver"},
        {"name": "peak", "bytes": d["peak"], "meaning":
            f"{human_bytes(d['peak'])} was allocated at the highest point (since the start or the last "
            "torch.cuda.reset_peak_memory_stats()): the least memory this run needs"},
        {"name": "inactive_split", "bytes": d["inactive_split"], "meaning":
            f"{human_bytes(d['inactive_split'])} in {plural(d['inactive_split_blocks'], 'block')} is free but "
            "inside partly used segments, so it cannot be returned and only fits smaller requests: "
            "fragmentation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it)"},
        {"name": "alloc_retries", "count": d["alloc_retries"], "meaning":
            f"{plural(d['alloc_retries'], 'cudaMalloc call')} failed and succeeded only after the allocator "
            "freed its cache and synchronized: this run is at its memory limit" if d["alloc_retries"] else
            "no cudaMalloc call has failed: the allocator never had to free its cache to make room"},
        {"name": "ooms", "count": d["ooms"], "meaning":
            f"{plural(d['ooms'], 'out-of-memory error')} raised in this process (caught, since it still runs)"
            if d["ooms"] else "no out-of-memory error has been raised in this process"},
        {"name": "tensor_share", "bytes": tensor_bytes, "share": _share(tensor_bytes, alloc), "meaning":
            f"the live tensors stridelens finds (variables, containers, gradients, saved by graphs; each "
            f"storage once) hold {human_bytes(tensor_bytes)}, {_pct(_share(tensor_bytes, alloc))} of allocated; "
            "the rest belongs to tensors with no Python object (C++ caches, cuBLAS workspaces, freed-but-"
            "not-yet-synced blocks) or to rounding"},
    ]
    if backend == "cudaMallocAsync":
        rows.append({"name": "backend", "meaning": "the cudaMallocAsync backend leaves several of these "
                                                   "counters at zero (torch documents which)"})
    if d["missing_keys"]:
        rows.append({"name": "missing", "meaning": "this torch's memory_stats() lacks "
                                                   + ", ".join(d["missing_keys"]) + " (read as 0)"})
    return rows


def analyze(r: dict[str, Any]) -> dict[str, Any]:
    tensors = r["tensors"]
    for d in r["devices"]:
        tb = tensors.get(d["device"], {}).get("bytes", 0)
        d["tensor_bytes"] = tb
        d["tensor_share"] = _share(tb, d["allocated"])
        d["explained"] = explain_device(d, tb, r["allocator_backend"])
    proc = r["process"]
    cpu = tensors.get("cpu", {}).get("bytes", 0)
    r["cpu_tensor_bytes"] = cpu
    r["cpu_tensor_share_of_rss"] = _share(cpu, proc["rss"])
    return r


def collect(s: Any, args: argparse.Namespace, report: dict[str, Any]) -> None:
    if not requested(args):
        return
    s.inject(diff_probe.__file__, diff_probe.PRIVATE_NAME, diff_probe.FILENAME)
    s.inject(allocator_probe.__file__, allocator_probe.PRIVATE_NAME, allocator_probe.FILENAME)
    s.progress("reading the allocator")
    report["cuda_summary"] = analyze(s.call_probe("summary_json(locals())", module=allocator_probe.PRIVATE_NAME))


def summary_group(r: dict[str, Any]) -> Group:
    parts: list[Any] = [Text("Memory explained", style="bold")]
    if r["cuda"] != "ok":
        parts.append(Text(f"No CUDA numbers: {r['cuda_message']}.", style="yellow"))
    elif not r["devices"]:
        parts.append(Text("CUDA is initialized but no device has memory reserved.", style="yellow"))
    for d in r["devices"]:
        t = Table(box=box.SIMPLE_HEAD, title=d["device"], title_justify="left")
        t.add_column("", no_wrap=True)
        t.add_column("value", justify="right", no_wrap=True)
        t.add_column("what it means")
        for e in d["explained"]:
            value = _b(e["bytes"]) if "bytes" in e else str(e["count"]) if "count" in e else ""
            t.add_row(e["name"].replace("_", " "), value, e["meaning"])
        parts.append(t)
    proc = r["process"]
    cpu = r["cpu_tensor_bytes"]
    if proc["rss"] is not None:
        parts.append(Text(
            f"process RSS {_b(proc['rss'])} (peak {human_bytes(proc['peak_rss'] or 0)}): the resident memory of "
            f"the whole process (Python, torch's libraries, allocator caches); live CPU tensors hold "
            f"{_b(cpu)}, {_pct(r['cpu_tensor_share_of_rss'])} of it"))
    elif proc["peak_rss"] is not None:
        parts.append(Text(f"process peak RSS {_b(proc['peak_rss'])} (current RSS not readable here); live CPU "
                          f"tensors hold {_b(cpu)}"))
    else:
        parts.append(Text(f"process RSS not readable on this platform; live CPU tensors hold {_b(cpu)}"))
    others = {dev: v for dev, v in r["tensors"].items() if dev != "cpu" and not dev.startswith("cuda")}
    for dev, v in sorted(others.items()):
        parts.append(Text(f"{dev} tensors: {_b(v['bytes'])} in {plural(v['storages'], 'storage')}", style="dim"))
    return Group(*parts)


def print_text(report: dict[str, Any], console: Console) -> None:
    if "cuda_summary" in report:
        console.print(summary_group(report["cuda_summary"]))
