"""`stridelens record [--out DIR] [--max-per-line K] -- python SCRIPT ARGS` (or `-m MODULE`).

Runs the program under the target's own interpreter with the recorder of
inspector/tensor_recorder.py, which records the metadata of every tensor a line of the user's
files binds to a local name; `explain` and the hover read them (server/analysis/recorded.py).
The exit status is the program's.
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
                     help=tr("the command to run: a Python interpreter, then a script or -m MODULE, and its arguments"))
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


def run(args: argparse.Namespace) -> int:
    program = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        print(tr("stridelens record: nothing to run; usage: stridelens record -- python SCRIPT ARGS"), file=sys.stderr)
        return 2
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
    out = Path(args.out) if args.out else default_facts_dir(script)
    if not _writable(out):
        fallback = cache_facts_dir()
        if not _writable(fallback):
            print(tr("stridelens record: cannot write the facts to {out} nor to {fallback}").format(out=out, fallback=fallback),
                  file=sys.stderr)
            return 2
        print(tr("stridelens record: {out} is not writable; the facts go to {fallback}").format(out=out, fallback=fallback),
              file=sys.stderr)
        out = fallback
    stridelens_root = Path(__file__).resolve().parents[1]  # server/ (inspector/ is skipped by the recorder itself)
    with tempfile.TemporaryDirectory(prefix="stridelens-record-") as work:
        status_path = Path(work) / "status.json"
        command = [
            program[0], tensor_recorder.__file__, "--out", str(out.resolve()), "--status", str(status_path),
            "--max-per-line", str(args.max_per_line), "--skip", str(stridelens_root),
            "--flush", str(args.flush), "--quiet", str(args.quiet_after), "--", *program[1:],
        ]
        try:
            code = subprocess.call(command)
        except OSError as err:
            print(tr("stridelens record: cannot run {python}: {error}").format(python=program[0], error=err), file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            code = 130
        try:
            status = json.loads(status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            status = None
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
