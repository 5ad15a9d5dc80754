"""`stridelens record [--out DIR] [--max-per-line K] -- python SCRIPT ARGS` (or `-m MODULE`,
or `torchrun OPTS SCRIPT ARGS`).

Runs the program under the target's own interpreter with the recorder of
inspector/tensor_recorder.py, which records the metadata of every tensor a line of the user's
files binds to a local name; `explain` and the hover read them (server/analysis/recorded.py).
Under torchrun the recorder takes the training script's place in each worker and each rank
writes its own files, merged when read. The exit status is the program's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from stridelens.i18n import ntr, tr
from stridelens.inspector import tensor_recorder
from stridelens.server.analysis.recorded import cache_facts_dir, default_facts_dir

STRIDELENS_ROOT = Path(__file__).resolve().parents[1]  # server/ (inspector/ is skipped by the recorder itself)


def register(commands: Any) -> None:
    sub = commands.add_parser(
        "record",
        help=tr("run a Python program and record the tensors its lines bind (for explain and hover)"),
        description=tr("Run `python SCRIPT ARGS` (or `python -m MODULE ARGS`) and record, for every line of "
                       "your own files that binds a tensor to a name, its shape, dtype, device, strides, "
                       "storage offset, contiguity, view-ness, requires_grad and grad_fn. Only metadata is "
                       "read: the program computes what it computes without stridelens."),
    )
    sub.add_argument("--out", metavar="DIR",
                     help=tr("folder for the facts (default: .stridelens/facts in the script's git root, else the working directory)"))
    sub.add_argument("--max-per-line", type=int, default=8, metavar="K",
                     help=tr("distinct observations kept per line and name; a line seen K times is no longer traced (default 8)"))
    sub.add_argument("--flush", type=float, default=5.0, help=argparse.SUPPRESS)
    sub.add_argument("--quiet-after", type=float, default=3.0, help=argparse.SUPPRESS)
    sub.add_argument("program", nargs=argparse.REMAINDER, metavar="-- python SCRIPT ARGS",
                     help=tr("the command to run: a Python interpreter, then a script or -m MODULE, and its arguments; "
                            "or torchrun OPTS SCRIPT ARGS"))
    sub.set_defaults(handler=run)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-", delete=True)  # noqa: SIM115
        probe.close()
    except OSError:
        return False
    return True


def _is_python(word: str) -> bool:
    name = os.path.basename(word).lower()
    return name.startswith("python") or name in {"py", "pypy", "pypy3"}


def _is_torchrun(program: list[str]) -> bool:
    return os.path.basename(program[0]) == "torchrun" or (len(program) >= 3 and program[1:3] == ["-m", "torch.distributed.run"])


def run(args: argparse.Namespace) -> int:
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        print(tr("stridelens record: nothing to run; usage: stridelens record -- python SCRIPT ARGS"), file=sys.stderr)
        return 2
    if _is_torchrun(program):
        return _run_torchrun(args, program)
    if not _is_python(program[0]):
        print(tr("stridelens record: {command!r} is not a Python interpreter; usage: stridelens record -- python SCRIPT ARGS "
                 "(or -m MODULE)").format(command=program[0]), file=sys.stderr)
        return 2
    if len(program) < 2 or (program[1] == "-m" and len(program) < 3) or (program[1].startswith("-") and program[1] != "-m"):
        print(tr("stridelens record: expected a script or -m MODULE after {python}").format(python=program[0]), file=sys.stderr)
        return 2
    script = None if program[1] == "-m" else Path(program[1])
    if script is not None and not script.is_file():
        print(tr("stridelens record: {path}: no such file").format(path=script), file=sys.stderr)
        return 2
    out = _facts_folder(args, script)
    if out is None:
        return 2
    with tempfile.TemporaryDirectory(prefix="stridelens-record-") as work:
        status_path = Path(work) / "status.json"
        command = [
            program[0], tensor_recorder.__file__, "--out", str(out.resolve()), "--status", str(status_path),
            "--max-per-line", str(args.max_per_line), "--skip", str(STRIDELENS_ROOT),
            "--flush", str(args.flush), "--quiet", str(args.quiet_after), "--", *program[1:],
        ]
        code = _call(command, program[0])
        if code is None:
            return 2
        try:
            status = json.loads(status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            status = None
    _report(status, out)
    return code


def _call(command: list[str], python: str, env: dict[str, str] | None = None) -> int | None:
    """The program's exit status (130 on Ctrl-C); None, said why, when it cannot start."""
    try:
        return subprocess.call(command, env=env)
    except OSError as err:
        print(tr("stridelens record: cannot run {python}: {error}").format(python=python, error=err), file=sys.stderr)
        return None
    except KeyboardInterrupt:
        return 130


def _facts_folder(args: argparse.Namespace, script: Path | None) -> Path | None:
    """--out, else the project's facts folder, else the user cache (said so); None: neither."""
    out = Path(args.out) if args.out else default_facts_dir(script)
    if _writable(out):
        return out
    fallback = cache_facts_dir()
    if not _writable(fallback):
        print(tr("stridelens record: cannot write the facts to {out} nor to {fallback}").format(out=out, fallback=fallback),
              file=sys.stderr)
        return None
    print(tr("stridelens record: {out} is not writable; the facts go to {fallback}").format(out=out, fallback=fallback),
          file=sys.stderr)
    return fallback


def _run_torchrun(args: argparse.Namespace, program: list[str]) -> int:
    """`torchrun OPTS SCRIPT ARGS`: the recorder in SCRIPT's place, its settings in the
    environment, one status file per rank, reported together."""
    from stridelens.inspector.ranks import (  # (the debugpy session's modules: only here)
        UsageError,
        rewrite_torchrun,
    )

    try:
        command = rewrite_torchrun(program, tensor_recorder.__file__, tool="stridelens record")
    except UsageError as err:
        print(f"{err}", file=sys.stderr)
        return 2
    at = command.index(tensor_recorder.__file__)
    module = command[at + 1 : at + 2] == ["-m"]
    script_at = at + (2 if module else 1)
    out = _facts_folder(args, None if module else Path(command[script_at]))
    if out is None:
        return 2
    with tempfile.TemporaryDirectory(prefix="stridelens-record-") as work:
        settings = {"out": str(out.resolve()), "status_dir": work, "max_per_line": args.max_per_line,
                    "skip": [str(STRIDELENS_ROOT)], "flush": args.flush, "quiet": args.quiet_after}
        env = {**os.environ, tensor_recorder.WORKER_SETTINGS: json.dumps(settings)}
        code = _call(command, program[0], env)
        if code is None:
            return 2
        statuses = []
        for path in sorted(Path(work).glob("status.rank*.json")):
            try:
                statuses.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    status = None
    if statuses:
        status = {"torch": any(s.get("torch") for s in statuses), "error": next((s["error"] for s in statuses if s.get("error")), None),
                  "bindings": sum(int(s.get("bindings", 0)) for s in statuses),
                  "lines": max(int(s.get("lines", 0)) for s in statuses), "files": max(int(s.get("files", 0)) for s in statuses)}
        print(ntr("stridelens record: {n} rank reported", "stridelens record: {n} ranks reported", len(statuses)).format(n=len(statuses)),
              file=sys.stderr)
    _report(status, out)
    return code


def _report(status: dict[str, Any] | None, out: Path) -> None:
    if status is None:
        print(tr("stridelens record: the program ended before the recorder could say what it saw; "
                 "facts written so far are in {out}").format(out=out), file=sys.stderr)
        return
    if not status.get("torch"):
        print(tr("stridelens record: the program never imported torch: nothing recorded"), file=sys.stderr)
        return
    if status.get("error"):
        print(tr("stridelens record: cannot write the facts: {error}").format(error=status["error"]), file=sys.stderr)
    bindings, lines, files = int(status["bindings"]), int(status["lines"]), int(status["files"])
    if not bindings:
        print(tr("stridelens record: no line of your files bound a tensor to a name: nothing recorded"), file=sys.stderr)
        return
    where = ntr("{lines} line", "{lines} lines", lines).format(lines=lines)
    where += ntr(" of {files} file", " of {files} files", files).format(files=files)
    print(tr("stridelens record: {where} recorded in {out}").format(where=where, out=out), file=sys.stderr)
