"""`stridelens inspect`: stop a process under debugpy and report its tensors.

Exit codes: 0 the report was produced (findings do not change it: they are facts, not lint);
1 the job failed (target not reachable, exited before the stop, an expression raised or is not
a tensor, the target has no torch, ...); 2 usage error (bad flags, a breakpoint on a line
without code, a non-loopback address without --allow-remote).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from stridelens import i18n
from stridelens.i18n import tr
from stridelens.inspector import (
    cuda_report,
    explain_errors,
    explain_report,
    grad_reports,
    rank_cli,
    reports,
    step_diff,
)
from stridelens.inspector.probe_report import PIN_MIN_BYTES
from stridelens.inspector.session import (
    Breakpoint,
    InspectError,
    Session,
    TargetGone,
    UsageError,
    parse_address,
)
from stridelens.inspector.snapshot_cli import add_snapshot_arguments, run_snapshot

EPILOG_EXAMPLES = """\
  stridelens inspect --launch train.py --break train.py:42 --memory
  stridelens inspect --launch train.py --break 'train.py:42:step == 3' --expr 'x[0]' --frame
  stridelens inspect --connect 127.0.0.1:5678 --memory --top 10 --format json
  stridelens inspect --pid 4242 --memory
  stridelens inspect --pid 4242 --snapshot --every 60 --count 5
  stridelens inspect --launch train.py --break train.py:42 --diff-steps 5
  stridelens inspect --pid 4242 --cuda-summary
  stridelens inspect --launch train.py --explain-errors
  stridelens inspect --all-ranks --launch --break train.py:42 -- torchrun --nproc-per-node 2 train.py
  stridelens inspect --all-ranks --pid 4242 --samples 3 --interval 2
"""


def epilog() -> str:
    return tr("examples:") + "\n" + EPILOG_EXAMPLES + tr("Script arguments for --launch go after `--`.") + "\n"


def register(commands: Any) -> None:
    p = commands.add_parser(
        "inspect", help=tr("inspect tensors in a running process (through debugpy)"),
        description=tr("Stop a Python process under debugpy and report its tensors: one expression, "
                    "a frame's tensors grouped by storage, or all live tensors with named leaks."),
        epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--launch", metavar="SCRIPT", nargs="?", const="",
                     help=tr("run SCRIPT under debugpy (args after --); with --all-ranks: the torchrun "
                          "command after --"))
    how.add_argument("--connect", metavar="HOST:PORT",
                     help=tr("a process that called debugpy.listen() / runs python -m debugpy --listen"))
    how.add_argument("--pid", type=int, help=tr("inject debugpy into a running process (needs gdb)"))
    p.add_argument("--break", dest="breaks", action="append", default=[], metavar="FILE:LINE[:COND]",
                   help=tr("stop there (repeatable); report at the first hit"))
    p.add_argument("--pause", action="store_true",
                   help=tr("interrupt the main thread now (default for --connect/--pid without --break)"))
    p.add_argument("--expr", action="append", default=[], metavar="EXPR",
                   help=tr("describe the tensor EXPR evaluates to in the stopped frame (repeatable)"))
    p.add_argument("--stats", action="store_true", help=tr("with --expr: value statistics (reads data)"))
    p.add_argument("--frame", action="store_true", help=tr("the frame's tensors grouped by storage"))
    p.add_argument("--memory", action="store_true", help=tr("all live tensors, per device, top-N, leaks"))
    p.add_argument("--top", type=int, default=10, metavar="N", help=tr("with --memory: N largest storages"))
    p.add_argument("--min-pin-bytes", type=int, default=PIN_MIN_BYTES, metavar="B",
                   help=tr("with --memory: smallest storage worth a 'view pins storage' finding"))
    p.add_argument("--explain-errors", action="store_true",
                   help=tr("with --launch: record the script's ops; when torch raises an error the static "
                        "rules know (in-place change of a saved tensor, view of a non-contiguous tensor, "
                        "backward through a freed graph, device or shape mismatch), name the line that "
                        "raised it, the tensors as they were, the line that caused it and the fix; exits "
                        "with the script's status (slows every op)"))
    grad_reports.add_arguments(p)
    add_snapshot_arguments(p)
    step_diff.add_arguments(p)
    cuda_report.add_arguments(p)
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help=tr("text for people (fits the terminal); json for tools (always in English)"))
    p.add_argument("--wide", action="store_true",
                   help=tr("text: every column, no wrapping (reports fit COLUMNS, the terminal's width, or 80 "
                        "columns by default, leaving out the least essential columns and saying which)"))
    after = p.add_mutually_exclusive_group()
    after.add_argument("--continue", dest="kill", action="store_false",
                       help=tr("afterwards detach and let the target run (default)"))
    after.add_argument("--kill", dest="kill", action="store_true", help=tr("afterwards end the target"))
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help=tr("seconds to wait for attach / the breakpoint / the explained error (default 60)"))
    p.add_argument("--allow-remote", action="store_true",
                   help=tr("allow a non-loopback --connect address (debugpy runs code for any client)"))
    p.add_argument("--python", metavar="PATH", help=tr("interpreter for --launch / the PID injector"))
    p.add_argument("--all-ranks", action="store_true",
                   help=tr("every rank of a torchrun job: --launch -- torchrun ..., or --pid of the agent or "
                        "any worker; reports merged across ranks"))
    p.add_argument("--samples", type=int, default=1, metavar="N",
                   help=tr("with --all-ranks: read memory at N stops (the next hits of --break, or pauses "
                        "--interval apart) to find a rank whose memory grows"))
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help=tr("with --all-ranks --pause: seconds between samples (default 1)"))
    p.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(handler=run, kill=False)  # store_false on --continue would default it to True


def run(args: argparse.Namespace) -> int:
    if args.format == "json":
        with i18n.english():  # the machine interface: the same report in every language
            return _run_reporting(args)
    return _run_reporting(args)


def _run_reporting(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        return _run(args, err)
    except UsageError as e:
        err.print(Text.assemble((tr("stridelens inspect:"), "red"), " ", str(e)))
        return 2
    except InspectError as e:
        err.print(Text.assemble((tr("stridelens inspect:"), "red"), " ", str(e)))
        return 1


def _run(args: argparse.Namespace, err: Console) -> int:
    if args.all_ranks:
        if step_diff.requested(args) or cuda_report.requested(args):
            raise UsageError(tr("--diff-steps and --cuda-summary read one process; not with --all-ranks "
                                "(its merged report has each rank's CUDA numbers; --samples follows growth)"))
        return rank_cli.run_all_ranks(args, err)
    if args.launch == "":
        raise UsageError(tr("--launch needs SCRIPT (or: --all-ranks --launch -- torchrun ...)"))
    if args.samples != 1:
        raise UsageError(tr("--samples needs --all-ranks"))
    if (code := run_snapshot(args, err)) is not None:
        return code
    if args.explain_errors:
        return _run_explain(args, err)
    breaks = [Breakpoint.parse(b) for b in args.breaks]
    address = parse_address(args.connect, args.allow_remote) if args.connect else None
    if args.launch and not breaks:
        raise UsageError(tr("--launch needs at least one --break FILE:LINE"))
    if args.top < 0:
        raise UsageError(tr("--top must be >= 0"))
    if args.script_args and not args.launch:
        raise UsageError(tr("unexpected arguments: {arguments}").format(arguments=" ".join(args.script_args)))
    step_diff.check_usage(args)
    if not (args.expr or args.frame or args.memory or grad_reports.requested(args)
            or step_diff.requested(args) or cuda_report.requested(args)):
        args.frame = True

    with Session(timeout=args.timeout) as s, _status(err, tr("starting")) as status:
        s.progress = lambda msg: status.update(msg) if status else None
        if args.launch:
            s.launch(os.path.abspath(args.launch), args.script_args, python=args.python)
        elif address:
            s.connect(*address)
        else:
            s.attach_pid(args.pid, python=args.python)
        s.progress(tr("configuring the debug session"))
        s.handshake(breaks)
        if breaks and not args.pause:
            s.progress(tr("waiting for a breakpoint"))
            s.wait_stop()
        else:
            s.progress(tr("pausing the target"))
            s.pause()
        s.progress(tr("injecting the probe"))
        target = s.ensure_probe()
        if target.get("torch") is None:
            raise InspectError(no_torch_message(s.frame))
        diff = step_diff.run_steps(s, args)  # moves the target on to the second stop
        report: dict[str, Any] = {
            "target": target,
            "stop": {"reason": s.stop_reason, "path": (s.frame.get("source") or {}).get("path"),
                     "line": s.frame.get("line"), "function": s.frame.get("name")},
        }
        failed = False
        if args.expr:
            report["expressions"] = []
            for expr in args.expr:
                try:
                    report["expressions"].append({"expr": expr, "result": s.describe(expr, args.stats)})
                except TargetGone:
                    raise
                except InspectError as e:
                    failed = True
                    report["expressions"].append({"expr": expr, "error": str(e)})
        if args.frame:
            report["frame"] = s.frame_report()
        if args.memory:
            s.progress(tr("walking live tensors"))
            report["memory"] = s.process_report(args.top, args.min_pin_bytes)
        failed = grad_reports.collect(s, args, report) or failed
        cuda_report.collect(s, args, report)
        if diff is not None:
            report["diff_steps"] = diff
        _print_and_leave(s, args, report, status, _print_reports)
    return 1 if failed else 0


def _print_reports(report: dict[str, Any], out: Console) -> None:
    reports.print_text(report, out)
    grad_reports.print_text(report, out)
    step_diff.print_text(report, out)
    cuda_report.print_text(report, out)


def _print_and_leave(
    s: Session, args: argparse.Namespace, report: dict[str, Any], status: Any,
    print_text: Callable[[dict[str, Any], Console], None],
) -> int | None:
    """Print the report (JSON or text), then detach from the target or end it, as asked. The
    launched script's exit code when it was waited for (it runs to its end), else None."""
    if status is not None:
        status.stop()
    if args.format == "json":
        print(reports.render_json(report), flush=True)
    else:
        print_text(report, reports.stdout_console(args.wide))
    s.finish(kill=args.kill)
    if args.launch and not args.kill:
        return s.wait_target(timeout=None)  # type: ignore[arg-type]
    return None


def _run_explain(args: argparse.Namespace, err: Console) -> int:
    if not args.launch:
        raise UsageError(tr("--explain-errors needs --launch SCRIPT (recording starts before its first line)"))
    given = [flag for flag, on in (("--break", args.breaks), ("--pause", args.pause), ("--expr", args.expr),
                                   ("--frame", args.frame), ("--memory", args.memory), ("--stats", args.stats),
                                   ("--grads", args.grads), ("--graph", args.graph),
                                   ("--diff-steps", args.diff_steps), ("--cuda-summary", args.cuda_summary))
             if on]
    if given:
        raise UsageError(tr("--explain-errors stops at the error by itself; drop {flags}").format(flags=", ".join(given)))
    script = os.path.abspath(args.launch)
    with Session(timeout=args.timeout) as s, _status(err, tr("starting")) as status:
        s.progress = lambda msg: status.update(msg) if status else None
        s.launch(script, args.script_args, python=args.python)
        report = explain_errors.explain(s, script, timeout=args.timeout)
        code = _print_and_leave(s, args, report, status, explain_report.print_explain_errors)
    # The script's own exit status: it ran on to its end after the report (--continue), or it
    # finished without the error. Killed at an explained error (--kill): 1, as an uncaught one.
    ex = report["explain_errors"]
    if code is None and ex.get("finished"):
        code = ex.get("exit_code")
    if code is None:
        return 1 if ex["occurred"] else 0
    return code if 0 <= code < 256 else 1


def no_torch_message(frame: dict[str, Any]) -> str:
    """The target stopped before torch was imported. A breakpoint on the `import torch` line
    stops before that line runs: say so, and name the line to break at instead (the next
    statement after the import)."""
    msg = tr("the target process has not imported torch")
    path, line = (frame.get("source") or {}).get("path"), frame.get("line")
    if not path or not isinstance(line, int):
        return msg
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return msg
    stmts = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    imports = sorted((n for n in stmts if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno >= line and (
        any(a.name.split(".")[0] == "torch" for a in n.names) if isinstance(n, ast.Import)
        else (n.module or "").split(".")[0] == "torch" and not n.level)), key=lambda n: n.lineno)
    if not imports:
        return msg
    imp = imports[0]
    end = imp.end_lineno or imp.lineno
    after = min((n.lineno for n in stmts if n.lineno > end), default=None)
    rel = os.path.relpath(path)
    where = path if rel.startswith("..") else rel
    if imp.lineno == line:
        msg += tr(": line {line} imports it, and a breakpoint stops before its line runs").format(line=line)
    else:
        msg += tr(" yet: line {import_line} imports it").format(import_line=imp.lineno)
    if after is None:
        return msg + tr("; break after the import (no statement follows it in {file})").format(file=where)
    return msg + tr("; break after the import, at the next statement: --break {file}:{line}").format(
        file=where, line=after)


@contextlib.contextmanager
def _status(console: Console, msg: str) -> Any:
    if not console.is_terminal:
        yield None
        return
    with console.status(msg) as st:
        yield st
