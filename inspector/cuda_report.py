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

from stridelens.i18n import N_, ntr, tr
from stridelens.inspector import allocator_probe, diff_probe
from stridelens.inspector.target_text import from_target
from stridelens.server.units import human_bytes

ROW_NAMES = {"allocated": N_("allocated"), "reserved": N_("reserved"), "peak": N_("peak"),
             "inactive_split": N_("inactive split"), "alloc_retries": N_("alloc retries"), "ooms": N_("ooms"),
             "tensor_share": N_("tensor share"), "backend": N_("backend"), "missing": N_("missing")}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cuda-summary", action="store_true",
                   help=tr("the CUDA allocator explained: allocated, reserved, peak, inactive split bytes, "
                        "allocation retries, OOMs, and the share the live tensors account for; on a "
                        "CPU-only target the process RSS next to the tensor totals"))


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
            tr("{bytes} is held by live tensors on {device} (the allocator's blocks in use, rounded up to its "
               "512-byte granularity)").format(bytes=human_bytes(alloc), device=d["device"])},
        {"name": "reserved", "bytes": reserved, "meaning":
            tr("{bytes} is taken from the driver by the caching allocator; {cached} of it is cached and "
               "reusable: not a leak; torch.cuda.empty_cache() returns it to the driver").format(
                bytes=human_bytes(reserved), cached=human_bytes(cached))},
        {"name": "peak", "bytes": d["peak"], "meaning":
            tr("{bytes} was allocated at the highest point (since the start or the last "
               "torch.cuda.reset_peak_memory_stats()): the least memory this run needs").format(
                bytes=human_bytes(d["peak"]))},
        {"name": "inactive_split", "bytes": d["inactive_split"], "meaning":
            ntr("{bytes} in {n} block is free but inside partly used segments, so it cannot be returned and "
                "only fits smaller requests: fragmentation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "reduces it)",
                "{bytes} in {n} blocks is free but inside partly used segments, so it cannot be returned and "
                "only fits smaller requests: fragmentation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "reduces it)", d["inactive_split_blocks"]).format(
                bytes=human_bytes(d["inactive_split"]), n=f"{d['inactive_split_blocks']:,}")},
        {"name": "alloc_retries", "count": d["alloc_retries"], "meaning":
            ntr("{n} cudaMalloc call failed and succeeded only after the allocator freed its cache and "
                "synchronized: this run is at its memory limit",
                "{n} cudaMalloc calls failed and succeeded only after the allocator freed its cache and "
                "synchronized: this run is at its memory limit", d["alloc_retries"]).format(
                n=f"{d['alloc_retries']:,}") if d["alloc_retries"] else
            tr("no cudaMalloc call has failed: the allocator never had to free its cache to make room")},
        {"name": "ooms", "count": d["ooms"], "meaning":
            ntr("{n} out-of-memory error raised in this process (caught, since it still runs)",
                "{n} out-of-memory errors raised in this process (caught, since it still runs)",
                d["ooms"]).format(n=f"{d['ooms']:,}")
            if d["ooms"] else tr("no out-of-memory error has been raised in this process")},
        {"name": "tensor_share", "bytes": tensor_bytes, "share": _share(tensor_bytes, alloc), "meaning":
            tr("the live tensors stridelens finds (variables, containers, gradients, saved by graphs; each "
               "storage once) hold {bytes}, {percent} of allocated; the rest belongs to tensors with no Python "
               "object (C++ caches, cuBLAS workspaces, freed-but-not-yet-synced blocks) or to rounding").format(
                bytes=human_bytes(tensor_bytes), percent=_pct(_share(tensor_bytes, alloc)))},
    ]
    if backend == "cudaMallocAsync":
        rows.append({"name": "backend", "meaning": tr("the cudaMallocAsync backend leaves several of these "
                                                      "counters at zero (torch documents which)")})
    if d["missing_keys"]:
        rows.append({"name": "missing", "meaning": tr("this torch's memory_stats() lacks {keys} (read as 0)").format(
            keys=", ".join(d["missing_keys"]))})
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
    s.progress(tr("reading the allocator"))
    report["cuda_summary"] = analyze(s.call_probe("summary_json(locals())", module=allocator_probe.PRIVATE_NAME))


def summary_group(r: dict[str, Any]) -> Group:
    parts: list[Any] = [Text(tr("Memory explained"), style="bold")]
    if r["cuda"] != "ok":
        parts.append(Text(tr("No CUDA numbers: {why}.").format(why=from_target(r["cuda_message"])), style="yellow"))
    elif not r["devices"]:
        parts.append(Text(tr("CUDA is initialized but no device has memory reserved."), style="yellow"))
    for d in r["devices"]:
        t = Table(box=box.SIMPLE_HEAD, title=d["device"], title_justify="left")
        t.add_column("", no_wrap=True)
        t.add_column(tr("value"), justify="right", no_wrap=True)
        t.add_column(tr("what it means"))
        for e in d["explained"]:
            value = _b(e["bytes"]) if "bytes" in e else str(e["count"]) if "count" in e else ""
            name = tr(ROW_NAMES[e["name"]]) if e["name"] in ROW_NAMES else e["name"].replace("_", " ")
            t.add_row(name, value, e["meaning"])
        parts.append(t)
    proc = r["process"]
    cpu = r["cpu_tensor_bytes"]
    if proc["rss"] is not None:
        parts.append(Text(tr(
            "process RSS {rss} (peak {peak}): the resident memory of the whole process (Python, torch's "
            "libraries, allocator caches); live CPU tensors hold {cpu}, {percent} of it").format(
            rss=_b(proc["rss"]), peak=human_bytes(proc["peak_rss"] or 0), cpu=_b(cpu),
            percent=_pct(r["cpu_tensor_share_of_rss"]))))
    elif proc["peak_rss"] is not None:
        parts.append(Text(tr("process peak RSS {peak} (current RSS not readable here); live CPU tensors hold "
                             "{cpu}").format(peak=_b(proc["peak_rss"]), cpu=_b(cpu))))
    else:
        parts.append(Text(tr("process RSS not readable on this platform; live CPU tensors hold {cpu}").format(cpu=_b(cpu))))
    others = {dev: v for dev, v in r["tensors"].items() if dev != "cpu" and not dev.startswith("cuda")}
    for dev, v in sorted(others.items()):
        parts.append(Text(tr("{device} tensors: {bytes} in {storages}").format(
            device=dev, bytes=_b(v["bytes"]),
            storages=ntr("{n} storage", "{n} storages", v["storages"]).format(n=f"{v['storages']:,}")), style="dim"))
    return Group(*parts)


def print_text(report: dict[str, Any], console: Console) -> None:
    if "cuda_summary" in report:
        console.print(summary_group(report["cuda_summary"]))
