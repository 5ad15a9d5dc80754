"""Rendering the merged all-ranks report for people (JSON goes out as built)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from stridelens.i18n import ntr, tr
from stridelens.inspector import fit
from stridelens.inspector.rank_findings import kind_text
from stridelens.inspector.reports import describe_table, frame_table, memory_tables
from stridelens.server.units import human_bytes


def _where(stop: dict[str, Any] | None) -> str:
    if not stop or not stop.get("path"):
        return "—"
    path = stop["path"]
    with contextlib.suppress(ValueError):  # another drive (Windows)
        rel = os.path.relpath(path)
        path = path if rel.startswith("..") else rel
    return tr("{where} in {function}").format(where=f"{path}:{stop['line']}", function=stop["function"])


def _common_stop(report: dict[str, Any]) -> str | None:
    wheres = {_where(r["stop"]) for r in report["ranks"]}
    return wheres.pop() if len(wheres) == 1 and report["ranks"][0]["stop"] else None


def ranks_table(report: dict[str, Any]) -> Table:
    common = _common_stop(report)
    title = tr("Ranks, all stopped at {where}").format(where=common) if common else tr("Ranks")
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    cols = [(tr("rank"), True), (tr("local"), True), ("pid", True), (tr("stopped at"), False),
            (tr("live tensors"), True), (tr("bytes per sample"), False), (tr("status"), False)]
    if common:
        del cols[3]
    for col, right in cols:
        t.add_column(col, justify="right" if right else "left")
    for r in report["ranks"]:
        samples = " → ".join(human_bytes(s["bytes"]) for s in r["samples"]) or "—"
        tensors = str(r["samples"][-1]["tensors"]) if r["samples"] else "—"
        status = Text(tr("ok"), style="green") if r["status"] == "ok" else Text(r["error"] or tr("failed"), style="red")
        cells: list[str | Text] = [str(r["rank"]), str(r["local_rank"]), str(r["pid"] or "—"), _where(r["stop"]), tensors,
                 samples, status]
        if common:
            del cells[3]
        t.add_row(*cells)
    return t


def differences_table(report: dict[str, Any]) -> Table | Text:
    rows = report["differences"]
    if not rows:
        return Text(tr("No differences between ranks' tensors (by variable, container and storage size)."),
                    style="green")
    ranks = [str(r["rank"]) for r in report["ranks"] if r["samples"]]
    t = Table(title=tr("What one rank holds that the others do not"), box=box.SIMPLE_HEAD, title_justify="left")
    t.add_column(tr("held by"))
    t.add_column(tr("kind"), style="dim")
    for rk in ranks:
        t.add_column(tr("rank {rank}").format(rank=rk), justify="right")
    t.add_column(tr("only on"))
    for row in rows:
        cells = [human_bytes(row["bytes"][rk]) if row["bytes"].get(rk) else "—" for rk in ranks]
        only = ", ".join(map(str, row["only_on"]))
        t.add_row(Text(row["holder"], style="bold"), kind_text(row["kind"]), *cells, only)
    return t


def cuda_table(report: dict[str, Any]) -> Table | None:
    if not report["cuda"]:
        return None
    t = Table(title=tr("CUDA per rank and device"), box=box.SIMPLE_HEAD, title_justify="left")
    for i, col in enumerate((tr("rank"), tr("device"), tr("tensors"), tr("allocated"), tr("reserved"))):
        t.add_column(col, justify="left" if i == 1 else "right")
    for c in report["cuda"]:
        t.add_row(str(c["rank"]), str(c["device"]), human_bytes(c["tensor_bytes"]),
                  human_bytes(c["allocated"]) if c["allocated"] is not None else "—",
                  human_bytes(c["reserved"]) if c["reserved"] is not None else "—")
    return t


def print_text(report: dict[str, Any], console: Console) -> None:
    n = len(report["ranks"])
    ok = sum(1 for r in report["ranks"] if r["status"] == "ok")
    stop = report.get("stop") or {}
    agent = tr(", torchrun agent PID {pid}").format(pid=report["agent_pid"]) if report.get("agent_pid") else ""
    samples = stop.get("samples") or 0
    how = tr("pause") if stop.get("how") == "pause" else tr("breakpoint") if stop.get("how") == "breakpoint" else stop.get("how")
    console.print(Text.assemble(
        (tr("torchrun job: "), "bold"),
        ntr("{n} rank ({ok} reported in full){agent}", "{n} ranks ({ok} reported in full){agent}", n).format(
            n=n, ok=ok, agent=agent),
        (ntr(" — {how}, {n} sample, {seconds} s", " — {how}, {n} samples, {seconds} s", samples).format(
            how=how, n=stop.get("samples"), seconds=f"{report.get('seconds', 0):.1f}"), "dim")))
    console.print(ranks_table(report))
    if report["findings"]:
        console.print(Text(tr("Findings across ranks"), style="bold"))
        for f in report["findings"]:
            console.print(fit.bullet(("  ⚠ ", "bold red"), (f["kind"], "bold"), tr(": "), f["message"]))
    else:
        console.print(Text(tr("No distributed findings."), style="green"))
    console.print(differences_table(report))
    ct = cuda_table(report)
    if ct is not None:
        console.print(ct)
    for note in report["notes"]:
        console.print(Text(tr("note: {note}").format(note=note), style="dim"))
    for r in report["ranks"]:
        if not (r.get("memory") or r.get("frame") or r.get("expressions")):
            continue
        tgt = r.get("target") or {}
        console.rule(Text(tr("rank {rank} — pid {pid}, {where}, torch {torch}").format(
            rank=r["rank"], pid=r["pid"], where=_where(r["stop"]), torch=tgt.get("torch"))), align="left")
        for item in r.get("expressions", []):
            if "error" in item:
                console.print(Text(f"{item['expr']}: {item['error']}", style="red"))
            else:
                console.print(describe_table(item["expr"], item["result"]))
        if r.get("frame"):
            console.print(frame_table(r["frame"]))
        if r.get("memory"):
            console.print(memory_tables(r["memory"]))
