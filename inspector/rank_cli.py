"""`stridelens inspect --all-ranks`: every rank of a torchrun job, stopped and reported together.

Launch: `--all-ranks --launch -- torchrun OPTS train.py ARGS` runs torchrun with
`rank_launcher.py` in the script's place; each worker listens on its own loopback port.
Attach: `--all-ranks --pid PID` (the agent or any worker) injects debugpy into every worker.
Then: stop all ranks (`--break`, or `--pause`), read each rank's memory (and frame), optionally
again at later stops (`--samples`), run `--expr` on each, merge, detach from all.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from stridelens.i18n import tr
from stridelens.inspector import rank_findings, rank_reports, reports
from stridelens.inspector.probe_report import group_top_rows
from stridelens.inspector.rank_launcher import DIR_ENV
from stridelens.inspector.rank_session import DIFF_TOP, Rank, Ranks
from stridelens.inspector.ranks import Worker, find_workers, read_port_files, rewrite_torchrun
from stridelens.inspector.session import Breakpoint, InspectError, UsageError, _forward

SETTLE_S = 5.0  # attach: how long stopped ranks wait for the others before being let through


def _check(args: argparse.Namespace) -> list[Breakpoint]:
    if args.connect:
        raise UsageError(tr("--all-ranks works with --launch -- torchrun ... or --pid PID (not --connect)"))
    if args.explain_errors:
        raise UsageError(tr("--all-ranks does not combine with --explain-errors"))
    if args.samples < 1 or args.interval < 0 or args.top < 0:
        raise UsageError(tr("--samples must be >= 1, --interval and --top >= 0"))
    breaks = [Breakpoint.parse(b) for b in args.breaks]
    if args.launch is not None and not breaks and not args.pause:
        raise UsageError(tr("--all-ranks --launch needs --break FILE:LINE or --pause"))
    return breaks


def _launch(ranks: Ranks, cmd: list[str], breaks: list[Breakpoint], rank_dir: Path,
            timeout: float) -> subprocess.Popen[bytes]:
    """Start torchrun; connect to each worker as soon as it has written its port."""
    env = {**os.environ, DIR_ENV: str(rank_dir), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    ranks.progress(tr("starting torchrun"))
    beside = os.path.join(os.path.dirname(sys.executable), cmd[0])
    if os.sep not in cmd[0] and shutil.which(cmd[0]) is None and os.path.isfile(beside):
        cmd = [beside, *cmd[1:]]  # the environment stridelens runs in, not activated in this shell
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env)
    except OSError as e:
        raise InspectError(tr("cannot run {command}: {error}").format(command=cmd[0], error=e.strerror)) from e
    assert proc.stdout is not None
    threading.Thread(target=_forward, args=(proc.stdout, sys.stderr), daemon=True).start()
    deadline = time.monotonic() + timeout
    expected: int | None = None
    threads: list[threading.Thread] = []
    while time.monotonic() < deadline:
        for rank, w in read_port_files(rank_dir).items():
            if rank not in ranks.ranks:
                r = ranks.add(w)
                expected = w.local_world_size
                t = threading.Thread(target=ranks.connect, args=(r, breaks), daemon=True)
                t.start()
                threads.append(t)
        if expected is not None and len(ranks.ranks) >= expected:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    for t in threads:
        t.join()
    if not ranks.ranks:
        code = proc.poll()
        proc.kill()
        raise InspectError(tr("no rank started: torchrun exited (code {code})").format(code=code) if code is not None
                           else tr("no rank started: no worker wrote its port within {seconds} s").format(
                               seconds=f"{timeout:g}"))
    # Ranks that never wrote their port: reported, not waited for.
    for rank in range(expected or 0):
        if rank not in ranks.ranks:
            r = ranks.add(Worker(-1, rank, rank, expected or 0, expected or 0))
            r.failed, r.failed_phase = (tr("torchrun exited before it started") if proc.poll() is not None
                                        else tr("did not start under debugpy within {seconds} s").format(
                                            seconds=f"{timeout:g}")), "start"
    return proc


def _rank_json(r: Rank, top: int, memory: bool) -> dict[str, Any]:
    w = r.worker
    out: dict[str, Any] = {
        "rank": w.rank, "local_rank": w.local_rank, "pid": w.pid if w.pid > 0 else None,
        "status": "ok" if r.failed is None else "failed", "error": r.failed, "failed_phase": r.failed_phase,
        "target": r.target or None, "info": r.info or None, "stop": r.stops[-1] if r.stops else None,
        "samples": [{"bytes": rank_findings.total_bytes(s), "tensors": s["tensor_count"]} for s in r.samples],
        "seconds": r.seconds,
    }
    if r.samples and memory:
        last = r.samples[-1]
        kept = last["top"][:top]
        out["memory"] = {**last, "top": kept, "top_rows": group_top_rows(kept)}
    if r.frame is not None:
        out["frame"] = r.frame
    if r.expressions:
        out["expressions"] = r.expressions
    return out


def run_all_ranks(args: argparse.Namespace, err: Console) -> int:
    breaks = _check(args)
    pause = args.pause or not breaks
    # Every rank's frame and memory, always: the merge compares them (--expr adds to them).
    args.frame = args.memory = True
    t0 = time.perf_counter()
    proc: subprocess.Popen[bytes] | None = None
    rank_dir = Path(tempfile.mkdtemp(prefix="stridelens-ranks-"))  # 0700: only we read the ports
    how = (tr("with --break each sample is the next hit of the breakpoint") if not pause
           else tr("with --pause one pause every --interval seconds"))
    report: dict[str, Any] = {"all_ranks": True}
    failed_expr = False
    try:
        with Ranks(args.timeout, progress=lambda m: err.print(m, style="dim", markup=False) if err.is_terminal else None) as ranks:
            if args.launch is not None:
                cmd = rewrite_torchrun(([args.launch] if args.launch else []) + list(args.script_args))
                report.update(mode="launch", command=cmd, agent_pid=None)
                proc = _launch(ranks, cmd, breaks, rank_dir, args.timeout)
                report["agent_pid"] = proc.pid
            else:
                agent, workers = find_workers(args.pid)
                report.update(mode="attach", agent_pid=agent, command=None)
                for w in workers:
                    ranks.add(w)
                ranks.attach_pids(breaks, python=args.python)
            report["stop"] = {"how": "pause" if pause else "breakpoint", "samples": args.samples}
            for k in range(args.samples):
                if k:
                    ranks.resume_all()
                if pause:
                    if k or args.launch is not None:
                        time.sleep(args.interval)
                    ranks.pause_all()
                else:
                    # Attached ranks were armed while running: they may need the settling dance.
                    ranks.wait_stops(settle=SETTLE_S if args.launch is None and k == 0 else None)
                ranks.snapshot(args.top, args.min_pin_bytes, frame=args.frame and k == args.samples - 1)
            if args.expr:
                failed_expr = not ranks.expressions(args.expr, args.stats)
            per = [_rank_json(r, args.top, args.memory) for r in sorted(ranks.ranks.values(),
                                                                          key=lambda r: r.worker.rank)]
            merged = rank_findings.merge(
                [{"rank": r.worker.rank, "local_rank": r.worker.local_rank, "reported": bool(r.samples),
                  "info": r.info, "samples": r.samples} for r in ranks.ranks.values()],
                top_len=max(args.top, DIFF_TOP), how=how)
            report.update(ranks=per, **merged)
            report["seconds"] = round(time.perf_counter() - t0, 3)
            report["phase_seconds"] = dict(ranks.walls)
            if args.format == "json":
                print(reports.render_json(report), flush=True)
            else:
                rank_reports.print_text(report, reports.stdout_console(args.wide))
            ranks.finish(kill=args.kill)
        if proc is not None:
            _end_torchrun(proc, args.kill)
    finally:
        if proc is not None and proc.poll() is None and args.kill:
            proc.kill()
        shutil.rmtree(rank_dir, ignore_errors=True)
    failed = any(r["status"] != "ok" for r in report.get("ranks", []))
    return 1 if failed or failed_expr else 0


def _end_torchrun(proc: subprocess.Popen[bytes], kill: bool) -> None:
    """--continue: the job runs to its end (as a launched script does); --kill: end it."""
    if kill:
        proc.terminate()  # the agent stops its workers
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()
        return
    proc.wait()
