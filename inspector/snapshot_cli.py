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

from stridelens.inspector import reports, snapshot, snapshot_diff
from stridelens.inspector.probe import NAMED_LIMIT
from stridelens.inspector.session import UsageError
from stridelens.server.units import human_bytes

DIFF_TOP = 64  # storages each periodic snapshot lists (more than --top shows) for the diff


def add_snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--snapshot", action="store_true",
                   help="with --pid: a process report (as --memory) without a debugger: gdb queues the "
                        "probe in the main thread (or sys.remote_exec on Python >= 3.14), which removes "
                        "itself afterwards")
    p.add_argument("--every", type=float, default=None, metavar="S",
                   help="with --snapshot: seconds between snapshots (with --count)")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="with --snapshot: N snapshots, each later one diffed against the first")


def run_snapshot(args: argparse.Namespace, err: Console) -> int | None:
    """The exit code of a --snapshot run; None when the flags ask for something else."""
    check(args)
    return run(args, err) if args.snapshot else None


def check(args: argparse.Namespace) -> None:
    """Usage errors of the snapshot flags (before anything touches the target)."""
    if not args.snapshot:
        if args.every is not None or args.count is not None:
            raise UsageError("--every / --count need --snapshot")
        return
    if args.pid is None:
        raise UsageError("--snapshot needs --pid PID")
    others = [flag for flag, on in (("--break", args.breaks), ("--pause", args.pause), ("--expr", args.expr),
                                    ("--frame", args.frame), ("--kill", args.kill), ("--grads", args.grads),
                                    ("--graph", args.graph)) if on]
    if others:
        raise UsageError(f"--snapshot takes the process report only; drop {', '.join(others)}")
    if (args.every is None) != (args.count is None):
        raise UsageError("--every S and --count N go together")
    if args.count is not None and args.count < 2:
        raise UsageError("--count must be >= 2 (a diff needs two snapshots)")
    if args.every is not None and args.every <= 0:
        raise UsageError("--every must be > 0 seconds")
    if args.top < 0:
        raise UsageError("--top must be >= 0")


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
                err.print(f"[dim]snapshot {i + 1}/{count}[/dim]")
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
        print_text(report, reports.stdout_console())
    return 0


def _trim(report: dict[str, Any], top: int) -> dict[str, Any]:
    return {**report, "top": report["top"][:top]}


def print_text(report: dict[str, Any], console: Console) -> None:
    tgt, t = report["target"], report["snapshot"]
    console.print(Text.assemble(
        ("snapshot ", "bold"), f"of pid {tgt.get('pid')} (python {tgt.get('python')}, torch {tgt.get('torch')}) "
        f"through {t['method']}", (
            f" — main thread stopped {t['main_thread_stopped_s'] * 1e3:.0f} ms: "
            + (f"ptrace stop {t['ptrace_stop_s'] * 1e3:.0f} ms (all threads, gdb ran {t['injector_s'] * 1e3:.0f} ms), "
               if t["method"] == "gdb" else "")
            + f"report {t['report_s'] * 1e3:.0f} ms (main thread)", "dim")))
    console.print(reports.memory_tables(report["memory"]))
    console.print(Text(f"(the storage list is the top {report['limits']['top']}; totals and findings count every tensor)",
                       style="dim"))
    shots = report.get("snapshots")
    if not shots:
        return
    table = Table(title=f"{len(shots)} snapshots, each against the first", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("at", "tensors", "bytes", "stopped", "what grew since the first"):
        table.add_column(col, justify="left" if col.startswith("what") else "right")
    for s in shots:
        table.add_row(f"{s['at_s']:.1f} s", str(s["tensors"]), human_bytes(s["bytes"]),
                      f"{s['timing']['main_thread_stopped_s'] * 1e3:.0f} ms", s.get("summary", "(first)"))
    console.print(table)
    rows = shots[-1].get("grew") or []
    if rows:
        g = Table(title="Grew from the first to the last snapshot, by owner", box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("owner", "kind", "first", "last", "grew", "storages"):
            g.add_column(col, justify="left" if col in ("owner", "kind") else "right")
        for r in rows:
            g.add_row(Text(r["holder"], style="bold"), r["kind"], human_bytes(r["bytes_first"]),
                      human_bytes(r["bytes_now"]), "+" + human_bytes(r["grew_bytes"]),
                      f"{r['storages_first']} → {r['storages_now']}")
        console.print(g)
