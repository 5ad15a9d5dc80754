"""Merging the ranks' reports: what one rank holds that the others do not, and named findings.

Input: one dict per rank, `{"rank", "local_rank", "reported", "info", "samples"}`, where
`samples` are the probe's memory reports in order (one per stop) and `info` is what
`rank_probe.rank_info` said. Everything here is plain data in, plain data out.
"""

from __future__ import annotations

from typing import Any

from stridelens.i18n import N_, ntr, tr
from stridelens.inspector.target_text import from_target
from stridelens.server.units import human_bytes

GROW_MIN = 256 << 10  # growth below this (or 2% of the first sample) is not called growth
FLAT_MAX = 64 << 10  # a rank within this (or 0.5%) between samples is flat
LEAK_KINDS = ("graph_kept_alive", "view_pins_storage", "retained_grad", "stale_grad")
# A holder's kind stays English in the data (code compares it); `kind_text` is for people.
KIND_TEXT = {"container": N_("container"), "variable": N_("variable"), "unnamed storages": N_("unnamed storages"),
             "graphs kept": N_("graphs kept")}


def kind_text(kind: str) -> str:
    return tr(KIND_TEXT[kind]) if kind in KIND_TEXT else kind


def _ranks_text(ranks: list[int]) -> str:
    joined = ", ".join(map(str, ranks))
    return (tr("rank {ranks}") if len(ranks) == 1 else tr("ranks {ranks}")).format(ranks=joined)


def total_bytes(report: dict[str, Any]) -> int:
    return sum(int(d["bytes"]) for d in report.get("devices", []))


def holders(report: dict[str, Any], floor: int = 0) -> dict[str, dict[str, Any]]:
    """Bytes per holder: a variable, a container (`losses` for `losses[3]`), the graphs a
    container keeps, or unnamed storages of one size (storages of `floor` bytes or less are
    left out: the top-N list may cut them on one rank and not another)."""
    out: dict[str, dict[str, Any]] = {}

    def add(key: str, kind: str, label: str, nbytes: int) -> None:
        h = out.setdefault(key, {"kind": kind, "holder": label, "bytes": 0, "storages": 0})
        h["bytes"] += nbytes
        h["storages"] += 1

    for g in report.get("top", []):
        if g["bytes"] <= floor:
            continue
        roots: dict[str, bool] = {}
        for n in g["names"]:
            root = n.split("[", 1)[0]
            roots[root] = roots.get(root, False) or "[" in n
        for root, indexed in roots.items():
            kind = "container" if indexed else "variable"
            add(f"{kind}:{root}", kind, root, int(g["bytes"]))
        if not roots:
            saved = " saved by autograd graphs" if g["saved_by_graph"] else ""
            label = (tr("{bytes} storages on {device} saved by autograd graphs") if saved else
                     tr("{bytes} storages on {device}")).format(bytes=human_bytes(g["bytes"]), device=g["device"])
            add(f"storage:{g['device']}:{g['bytes']}:{saved}", "unnamed storages", label, int(g["bytes"]))
    for f in report.get("findings", []):
        if f["kind"] == "graph_kept_alive":
            h = out.setdefault(f"graphs:{f['container']}", {
                "kind": "graphs kept", "holder": tr("{container} (the autograd graphs it keeps)").format(
                    container=from_target(f["container"])),
                "bytes": 0, "storages": 0})
            h["bytes"] += int(f["bytes"])
            h["storages"] += int(f["graph_tensors"])
    return out


def _floor(reports: list[dict[str, Any]], top_len: int) -> int:
    # A rank whose top list is full may have cut storages another rank still lists.
    return max((min(g["bytes"] for g in r["top"]) for r in reports if len(r.get("top", [])) >= top_len),
               default=0)


def differences(ranks: list[dict[str, Any]], top_len: int, limit: int = 20) -> list[dict[str, Any]]:
    """Holders whose bytes differ between ranks (last sample of each reported rank)."""
    rep = [r for r in ranks if r["reported"] and r["samples"]]
    if len(rep) < 2:
        return []
    floor = _floor([r["samples"][-1] for r in rep], top_len)
    per = {r["rank"]: holders(r["samples"][-1], floor) for r in rep}
    keys = sorted({k for h in per.values() for k in h})
    rows = []
    for k in keys:
        vals = {rk: h.get(k) for rk, h in per.items()}
        nbytes = {rk: (v["bytes"] if v else 0) for rk, v in vals.items()}
        lo, hi = min(nbytes.values()), max(nbytes.values())
        if hi == lo or (lo > 0 and hi < 1.1 * lo):
            continue
        some = next(v for v in vals.values() if v)
        rows.append({
            "holder": some["holder"], "kind": some["kind"],
            "bytes": {str(rk): b for rk, b in nbytes.items()},
            "storages": {str(rk): (v["storages"] if v else 0) for rk, v in vals.items()},
            "only_on": sorted(rk for rk, b in nbytes.items() if b > 0) if lo == 0 else [],
            "spread": hi - lo,
        })
    rows.sort(key=lambda r: -r["spread"])
    return rows[:limit]


def cuda_table(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in ranks:
        if not (r["reported"] and r["samples"]):
            continue
        for d in r["samples"][-1]["devices"]:
            if str(d["device"]).startswith("cuda"):
                out.append({"rank": r["rank"], "device": d["device"], "tensor_bytes": d["bytes"],
                            "allocated": d.get("allocated"), "reserved": d.get("reserved")})
    return out


def _cuda_bytes(report: dict[str, Any]) -> dict[int, int]:
    out = {}
    for d in report.get("devices", []):
        dev = str(d["device"])
        if dev.startswith("cuda") and d["bytes"] > 0:
            out[int(dev.split(":")[1]) if ":" in dev else 0] = int(d["bytes"])
    return out


def _names_on(report: dict[str, Any], device: str, limit: int = 3) -> str:
    names = [n for g in report.get("top", []) if g["device"] == device for n in g["names"]]
    return (tr(": ") + ", ".join(names[:limit]) + (" …" if len(names) > limit else "")) if names else ""


def device_findings(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranks holding tensors on another local rank's CUDA device (torchrun's convention: local
    rank k uses cuda:k), and the pattern of every rank holding a copy on cuda:0."""
    rep = [r for r in ranks if r["reported"] and r["samples"]]
    on = {r["rank"]: _cuda_bytes(r["samples"][-1]) for r in rep}
    owners = {r["local_rank"]: r["rank"] for r in rep}
    findings: list[dict[str, Any]] = []
    everyone_on_0 = len(rep) >= 2 and all(0 in on[r["rank"]] for r in rep)
    moved = [r for r in rep if r["local_rank"] != 0 and
             ((r["info"].get("cuda") or {}).get("current_device") == r["local_rank"])]
    if everyone_on_0 and moved:
        parts = [tr("rank {rank}: {bytes}{names}").format(
            rank=r["rank"], bytes=human_bytes(on[r["rank"]][0]), names=_names_on(r["samples"][-1], "cuda:0"))
                 for r in rep if r["local_rank"] != 0]
        findings.append({
            "kind": "every_rank_on_cuda0", "ranks": [r["rank"] for r in rep if r["local_rank"] != 0],
            "message": tr("every rank holds tensors on cuda:0 ({holdings}), though {ranks} set their own "
                          "device. That is what a torch.load without map_location does with a checkpoint saved "
                          "from cuda:0 (each tensor goes back to the device it was saved from); stridelens sees "
                          "where the tensors are, not which call put them there. Load with "
                          "map_location=f'cuda:{{local_rank}}' (or 'cpu').").format(
                holdings=tr("; ").join(parts), ranks=_ranks_text([r["rank"] for r in moved]))})
    for r in rep:
        lr = r["local_rank"]
        cuda = r["info"].get("cuda") or {}
        cur = cuda.get("current_device")
        count = cuda.get("device_count")
        for d, nbytes in sorted(on[r["rank"]].items()):
            if d == lr or (d == 0 and findings and findings[0]["kind"] == "every_rank_on_cuda0"):
                continue
            owner = owners.get(d)
            whose = tr(", rank {rank}'s device").format(rank=owner) if owner is not None else ""
            short = ntr(" (this node has {n} CUDA device for {ranks} local ranks)",
                        " (this node has {n} CUDA devices for {ranks} local ranks)", count).format(
                n=count, ranks=r["info"].get("local_world_size")) if count is not None and count <= lr else ""
            names = _names_on(r["samples"][-1], f"cuda:{d}")
            if cur == d:
                findings.append({
                    "kind": "missing_set_device", "ranks": [r["rank"]], "device": f"cuda:{d}",
                    "message": tr("rank {rank} (LOCAL_RANK {local}) holds {bytes} on cuda:{device}{whose}{names}, "
                                  "and its current CUDA device is cuda:{device}: torch.cuda.set_device(LOCAL_RANK) "
                                  "was not called (or came after these tensors were made){short}").format(
                        rank=r["rank"], local=lr, bytes=human_bytes(nbytes), device=d, whose=whose, names=names,
                        short=short)})
            else:
                findings.append({
                    "kind": "foreign_device", "ranks": [r["rank"]], "device": f"cuda:{d}",
                    "message": tr("rank {rank} (LOCAL_RANK {local}, current device {current}) holds {bytes} on "
                                  "cuda:{device}{whose}{names}: tensors made before torch.cuda.set_device, or "
                                  "loaded without map_location{short}").format(
                        rank=r["rank"], local=lr, current="cuda:" + str(cur) if cur is not None else tr("unknown"),
                        bytes=human_bytes(nbytes), device=d, whose=whose, names=names, short=short)})
    return findings


def growth_findings(ranks: list[dict[str, Any]], how: str) -> tuple[list[dict[str, Any]], list[str]]:
    """A rank whose live tensor bytes grow between samples while other ranks stay flat."""
    rep = [r for r in ranks if r["reported"] and len(r["samples"]) >= 2]
    if len(rep) < 2:
        n = max((len(r["samples"]) for r in ranks), default=0)
        return [], [tr("memory growth not measured: it needs two samples or more per rank and this run took "
                       "{n} (--samples N; {how})").format(n=n, how=how)]
    grow: dict[int, int] = {}
    flat: dict[int, int] = {}
    for r in rep:
        first, last = total_bytes(r["samples"][0]), total_bytes(r["samples"][-1])
        g = last - first
        if g > max(GROW_MIN, 0.02 * first):
            grow[r["rank"]] = g
        elif abs(g) <= max(FLAT_MAX, 0.005 * first):
            flat[r["rank"]] = g
    findings = []
    n = len(rep[0]["samples"])
    for r in rep:
        if r["rank"] not in grow:
            continue
        first, last = r["samples"][0], r["samples"][-1]
        h0, h1 = holders(first), holders(last)
        # A container's graphs are named only from two graphs on: not "grown" from nothing.
        grew = sorted(((h1[k]["bytes"] - h0.get(k, {"bytes": 0})["bytes"], h1[k]["holder"]) for k in h1
                       if k in h0 or h1[k]["kind"] != "graphs kept"), reverse=True)
        top = [f"{name} +{human_bytes(d)}" for d, name in grew[:3] if d >= 0.05 * grow[r["rank"]]]
        if flat:
            spread = max(abs(v) for v in flat.values())
            within = "+0 B" if not spread else tr("within {bytes}").format(bytes=human_bytes(spread))
            kind, others = "rank_memory_grows", tr(" while {ranks} stayed flat ({within})").format(
                ranks=_ranks_text(sorted(flat)), within=within)
        else:
            kind, others = "memory_grows", ""
        findings.append({
            "kind": kind, "ranks": [r["rank"]], "growth_bytes": grow[r["rank"]],
            "samples": [total_bytes(s) for s in r["samples"]],
            "message": tr("rank {rank}'s live tensors grew {bytes} over {n} samples ({first} → {last}){others}").format(
                rank=r["rank"], bytes=human_bytes(grow[r["rank"]]), n=n, first=human_bytes(total_bytes(first)),
                last=human_bytes(total_bytes(last)), others=others)
                       + (tr("; what grew: {what}").format(what=", ".join(top)) if top else "")})
    return findings, []


def leak_findings(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probe's named leaks, merged: the same leak on several ranks is one finding."""
    rep = [r for r in ranks if r["reported"] and r["samples"]]
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rep:
        for f in r["samples"][-1].get("findings", []):
            if f["kind"] not in LEAK_KINDS:
                continue
            key = (f["kind"], str(f.get("container") or f.get("tensor")))
            m = merged.setdefault(key, {"kind": f["kind"], "ranks": [], "bytes": {}, "message": from_target(f["message"])})
            m["ranks"].append(r["rank"])
            m["bytes"][str(r["rank"])] = f["bytes"]
    out = []
    for m in merged.values():
        if len(m["ranks"]) == len(rep) and len(rep) > 1:
            where = tr("on every rank")
        elif len(rep) > 1:
            where = tr("on {ranks} only").format(ranks=_ranks_text(m["ranks"]))
        else:
            where = tr("on {ranks}").format(ranks=_ranks_text(m["ranks"]))
        m["message"] = tr("{where}: {message}").format(where=where, message=m["message"])
        out.append(m)
    return sorted(out, key=lambda m: -max(m["bytes"].values()))


def merge(ranks: list[dict[str, Any]], top_len: int, how: str) -> dict[str, Any]:
    growth, notes = growth_findings(ranks, how)
    return {
        "differences": differences(ranks, top_len),
        "cuda": cuda_table(ranks),
        "findings": device_findings(ranks) + growth + leak_findings(ranks),
        "notes": notes,
    }
