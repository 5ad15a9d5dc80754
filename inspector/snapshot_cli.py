"""`stridelens inspect --pid PID --snapshot [--every S --count N]`: reports with no debugger.

See `snapshot` for how a report is taken and what it leaves behind (nothing that runs).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from stridelens.i18n import tr
from stridelens.inspector import reports, snapshot, snapshot_diff
from stridelens.inspector.probe_report import NAMED_LIMIT, group_top_rows
from stridelens.inspector.rank_findings import kind_text
from stridelens.inspector.session import UsageError
from stridelens.server.units import human_bytes

DIFF_TOP = 64  # storages each periodic snapshot lists (more than --top shows) for the diff


def add_snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--snapshot", action="store_true",
                   help=tr("with --pid: a process report (as --memory) without a debugger: gdb queues the "
                        "probe in the main thread (or sys.remote_exec on Python >= 3.14), which removes "
                        "itself afterwards"))
    p.add_argument("--every", type=float, default=None, metavar="S",
                   help=tr("with --snapshot: seconds between snapshots (with --count)"))
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help=tr("with --snapshot: N snapshots, each later one diffed against the first"))


def run_snapshot(args: argparse.Namespace, err: Console) -> int | None:
    """The exit code of a --snapshot run; None when the flags ask for something else."""
    check(args)
    return run(args, err) if args.snapshot else None


def check(args: argparse.Namespace) -> None:
    """Usage errors of the snapshot flags (before anything touches the target)."""
    if not args.snapshot:
        if args.every is not None or args.count is not None:
            raise UsageError(tr("--every / --count need --snapshot"))
        return
    if args.pid is None:
        raise UsageError(tr("--snapshot needs --pid PID"))
    others = [flag for flag, on in (("--break", args.breaks), ("--pause", args.pause), ("--expr", args.expr),
                                    ("--frame", args.frame), ("--kill", args.kill), ("--grads", args.grads),
                                    ("--graph", args.graph)) if on]
    if others:
        raise UsageError(tr("--snapshot takes the process report only; drop {flags}").format(flags=", ".join(others)))
    if (args.every is None) != (args.count is None):
        raise UsageError(tr("--every S and --count N go together"))
    if args.count is not None and args.count < 2:
        raise UsageError(tr("--count must be >= 2 (a diff needs two snapshots)"))
    if args.every is not None and args.every <= 0:
        raise UsageError(tr("--every must be > 0 seconds"))
    if args.top < 0:
        raise UsageError(tr("--top must be >= 0"))


def run(args: argparse.Namespace, err: Console) -> int:
    count = args.count or 1
    top = max(args.top, DIFF_TOP) if count > 1 else args.top
    shots: list[snapshot.Snapshot] = []
    at: list[float] = []
    t0 = time.monotonic()
    for i in range(count):
        if i:
            time.sleep(max(0.0, t0 + i * args.every - time.monotonic()))
            if err.is_terminal:
                err.print(Text(tr("snapshot {i}/{count}").format(i=i + 1, count=count), style="dim"))
        at.append(time.monotonic() - t0)
        shots.append(snapshot.take(args.pid, top, args.min_pin_bytes, args.timeout, python=args.python,
                                   named=count > 1))
    last = shots[-1]
    report: dict[str, Any] = {"target": last.target, "snapshot": last.timing(),
                              "memory": _trim(last.report, args.top),
                              # What is cut: the lists only; totals and findings count every tensor.
                              "limits": {"top": args.top, "named": NAMED_LIMIT if count > 1 else 0,
                                         "diff_top_storages": top if count > 1 else None}}
    if count > 1:
        first = shots[0].report
        report["snapshots"] = []
        for i, s in enumerate(shots):
            entry: dict[str, Any] = {"at_s": round(at[i], 3), "timing": s.timing(),
                                     "tensors": s.report["tensor_count"],
                                     "bytes": sum(d["bytes"] for d in s.report["devices"])}
            if i:
                rows = snapshot_diff.grew(first, s.report)
                entry["grew"] = rows
                entry["summary"] = snapshot_diff.summary(first, s.report, rows)
            report["snapshots"].append(entry)
    if args.format == "json":
        print(reports.render_json(report), flush=True)
    else:
        print_text(report, reports.stdout_console(args.wide))
    return 0


def _trim(report: dict[str, Any], top: int) -> dict[str, Any]:
    kept = report["top"][:top]
    return {**report, "top": kept, "top_rows": group_top_rows(kept)}


def print_text(report: dict[str, Any], console: Console) -> None:
    tgt, t = report["target"], report["snapshot"]
    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.0f}"

    timing = tr(" — main thread stopped {stopped} ms: ").format(stopped=ms(t["main_thread_stopped_s"]))
    if t["method"] == "gdb":
        timing += tr("ptrace stop {ptrace} ms (all threads, gdb ran {gdb} ms), ").format(
            ptrace=ms(t["ptrace_stop_s"]), gdb=ms(t["injector_s"]))
    timing += tr("report {report} ms (main thread)").format(report=ms(t["report_s"]))
    console.print(Text.assemble(
        (tr("snapshot "), "bold"), tr("of pid {pid} (python {python}, torch {torch}) through {method}").format(
            pid=tgt.get("pid"), python=tgt.get("python"), torch=tgt.get("torch"), method=t["method"]),
        (timing, "dim")))
    console.print(reports.memory_tables(report["memory"]))
    console.print(Text(tr("(the storage list is the top {n}; totals and findings count every tensor)").format(
        n=report["limits"]["top"]), style="dim"))
    shots = report.get("snapshots")
    if not shots:
        return
    table = Table(title=tr("{n} snapshots, each against the first").format(n=len(shots)), box=box.SIMPLE_HEAD,
                  title_justify="left")
    for col in (tr("at"), tr("tensors"), tr("bytes"), tr("stopped")):
        table.add_column(col, justify="right")
    table.add_column(tr("what grew since the first"), justify="left")
    for s in shots:
        table.add_row(f"{s['at_s']:.1f} s", str(s["tensors"]), human_bytes(s["bytes"]),
                      f"{s['timing']['main_thread_stopped_s'] * 1e3:.0f} ms", s.get("summary", tr("(first)")))
    console.print(table)
    rows = shots[-1].get("grew") or []
    if rows:
        g = Table(title=tr("Grew from the first to the last snapshot, by owner"), box=box.SIMPLE_HEAD,
                  title_justify="left")
        for i, col in enumerate((tr("owner"), tr("kind"), tr("first"), tr("last"), tr("grew"), tr("storages"))):
            g.add_column(col, justify="left" if i < 2 else "right")
        for r in rows:
            g.add_row(Text(r["holder"], style="bold"), kind_text(r["kind"]), human_bytes(r["bytes_first"]),
                      human_bytes(r["bytes_now"]), "+" + human_bytes(r["grew_bytes"]),
                      f"{r['storages_first']} → {r['storages_now']}")
        console.print(g)
