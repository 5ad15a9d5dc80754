"""Run `python -m stridelens ARGS...` under an audit hook installed before stridelens is imported.

Used by test_audit_hook.py (not a test module itself). Run with the workspace as the working
directory, like an editor does; sys.path[0] is set to it, as `python -m` would.

Environment:
  STRIDELENS_AUDIT_LOG      file to append one JSON line per violation (opened before the hook)
  STRIDELENS_AUDIT_WATCH    a directory: `open` of any path under it is a violation...
  STRIDELENS_AUDIT_ALLOWED  ...except these paths (JSON list: the documents, pyproject.toml)
  STRIDELENS_AUDIT_MARKERS  JSON list of strings that only occur in workspace code: code
                            objects compiled or run that contain one are violations

Violations: os.system, subprocess.Popen, os.exec*, os.posix_spawn, os.spawn*, os.fork,
`open` under the watched directory, `exec` of code whose file is in the workspace or whose
constants hold a marker, and `compile` of workspace text to anything but an AST (`ast.parse`
is how the engine reads code; it compiles nothing that can run).
"""

from __future__ import annotations

import json
import os
import runpy
import sys

LOG = open(os.environ["STRIDELENS_AUDIT_LOG"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115
WATCH = os.path.realpath(os.environ["STRIDELENS_AUDIT_WATCH"]) + os.sep
ALLOWED = {os.path.realpath(p) for p in json.loads(os.environ.get("STRIDELENS_AUDIT_ALLOWED", "[]"))}
MARKERS = tuple(json.loads(os.environ.get("STRIDELENS_AUDIT_MARKERS", "[]")))
COMMANDS = ("os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
            "os.forkpty", "pty.spawn")  # fmt: skip
CODE = type(compile("0", "<x>", "eval"))
_busy = False


def report(event: str, detail: str) -> None:
    LOG.write(json.dumps({"event": event, "detail": detail[:500]}) + "\n")


def where() -> str:
    """The innermost frames outside this hook and the import machinery."""
    frames = []
    f = sys._getframe(2)
    while f is not None and len(frames) < 6:
        frames.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}")
        f = f.f_back
    return " < ".join(frames)


def consts_hold_marker(code: object, depth: int = 0) -> bool:
    if not isinstance(code, CODE) or depth > 50:
        return False
    for const in code.co_consts:
        if isinstance(const, str) and any(m in const for m in MARKERS):
            return True
        if isinstance(const, CODE) and consts_hold_marker(const, depth + 1):
            return True
    return False


def text_holds_marker(source: object) -> bool:
    if isinstance(source, bytes):
        source = source.decode("utf-8", "replace")
    return isinstance(source, str) and any(m in source for m in MARKERS)


def hook(event: str, args: tuple[object, ...]) -> None:
    global _busy
    if _busy:
        return
    _busy = True
    try:
        if event in COMMANDS:
            report(event, repr(args))
        elif event == "open":
            path = args[0]
            if isinstance(path, (str, bytes, os.PathLike)):
                full = os.path.realpath(os.fsdecode(path))  # relative: against the workspace
                if (full + os.sep).startswith(WATCH) and full not in ALLOWED:
                    report(event, f"{full} (from {where()})")
        elif event == "exec":
            code = args[0]
            filename = getattr(code, "co_filename", "")
            in_workspace = os.path.isabs(filename) and (os.path.realpath(filename) + os.sep).startswith(WATCH)
            if in_workspace or consts_hold_marker(code):
                report(event, f"{filename}: {getattr(code, 'co_name', '?')}")
        elif event == "compile" and text_holds_marker(args[0]):
            caller = sys._getframe(1)
            if not (caller.f_code.co_name == "parse" and caller.f_globals.get("__name__") == "ast"):
                report(event, f"compile() from {caller.f_code.co_filename}:{caller.f_lineno}")
    finally:
        _busy = False


sys.addaudithook(hook)
sys.path[0] = os.getcwd()  # what `python -m` does
sys.argv = ["stridelens", *sys.argv[1:]]
runpy.run_module("stridelens", run_name="__main__", alter_sys=True)
