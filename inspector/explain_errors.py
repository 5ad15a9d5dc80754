"""`inspect --launch SCRIPT --explain-errors`: run a script with the in-place recorder and,
when backward raises torch's "modified by an inplace operation" error, say which op saved
the tensor and which in-place op changed it, with both lines.

The order of events in the debuggee:
1. debugpy stops it at the first line of the script (a line breakpoint, removed at once);
2. the recorder (`inplace_recorder.py`) is evaluated into a private module and installed on
   that, the main, thread; the probe is injected too, for the target facts;
3. a debugpy exception breakpoint on raised `RuntimeError` (caught or not) stops the script at
   the raise; an unrelated RuntimeError is let go on;
4. at the raise, the recorder explains the error from the frame where it surfaced (its locals
   hold the tensors backward ran on), and each user frame is asked which of its names are
   bound to the tensor; then the recorder is removed and the target is let go (or killed).
"""

from __future__ import annotations

import time
from typing import Any

from stridelens.i18n import tr
from stridelens.inspector import inplace_recorder as recorder
from stridelens.inspector.dap_client import DapTimeout
from stridelens.inspector.session import Breakpoint, InspectError, Session

STOP_EXCEPTIONS = ["RuntimeError"]  # torch raises the in-place error as a plain RuntimeError
INSTALL_TIMEOUT = 120.0  # installing may import torch (seconds, cold)


def entry_line(path: str) -> int:
    """The first line of the script's module body that Python stops at."""
    try:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
    except (SyntaxError, ValueError, OSError) as e:
        raise InspectError(tr("--launch {path}: cannot compile the script ({error})").format(path=path, error=e)) from e
    lines = [ln for _s, _e, ln in code.co_lines() if ln is not None and ln > 0]
    if not lines:
        raise InspectError(tr("--launch {path}: the script has no code").format(path=path))
    return min(lines)


def _call(s: Session, call: str, timeout: float | None = None) -> Any:
    return s.call_probe(call, module=recorder.PRIVATE_NAME, timeout=timeout)


def explain(s: Session, script: str, timeout: float) -> dict[str, Any]:
    """Drive a launched, not yet configured session to the error or the end of the script.

    Returns the report: `target`, `stop` (None unless the error occurred) and `explain_errors`.
    The target is left stopped at the error (the caller finishes the session)."""
    s.progress(tr("configuring the debug session"))
    s.handshake([Breakpoint(script, entry_line(script))])
    s.progress(tr("starting the script"))
    s.wait_stop()
    s.progress(tr("installing the in-place recorder"))
    s.inject(recorder.__file__, recorder.PRIVATE_NAME, recorder.FILENAME)
    installed = _call(s, "install_json()", timeout=max(INSTALL_TIMEOUT, s.timeout))
    target = s.ensure_probe()
    s.clear_breakpoints()
    s.break_on_raised(STOP_EXCEPTIONS)
    s.progress(tr("running the script until the in-place error"))
    s.resume()

    deadline = time.monotonic() + timeout
    others: set[int] = set()  # unrelated RuntimeErrors let go (one stop per frame they pass)
    while True:
        try:
            code = s.next_stop(max(0.0, deadline - time.monotonic()))
        except DapTimeout:
            s.pause()  # the recorder must not stay behind in a process we leave running
            _call(s, "uninstall_json()")
            s.break_on_raised([])
            return _report(target, installed, None, {
                "occurred": False, "finished": False, "exit_code": None, "waited_s": timeout,
                "other_runtime_errors": len(others)})
        if code is not None:
            return _report(target, installed, None, {
                "occurred": False, "finished": True, "exit_code": code,
                "other_runtime_errors": len(others)})
        found = _call(s, "diagnose_json(__exception__[1], locals())")
        if found.get("match"):
            break
        others.add(found["exception_id"])
        s.resume()

    s.progress(tr("naming the tensor in the script's frames"))
    frames = s.stack()
    tensor = found.get("tensor")
    for fr in frames if tensor is not None else []:
        if fr["user"]:
            with s.in_frame(fr["id"]):
                tensor["names"] += [{**n, "function": fr.get("name"), "line": fr.get("line"),
                                     "path": (fr.get("source") or {}).get("path")}
                                    for n in _call(s, "names_json(locals())")]
    user = next((f for f in frames if f["user"]), frames[0] if frames else {})
    stop = {"reason": s.stop_reason, "path": (user.get("source") or {}).get("path"),
            "line": user.get("line"), "function": user.get("name")}
    found.pop("match", None)
    _call(s, "uninstall_json()")
    s.break_on_raised([])
    return _report(target, installed, stop, {"occurred": True, **found, "other_runtime_errors": len(others)})


def _report(target: dict[str, Any], installed: dict[str, Any], stop: dict[str, Any] | None,
            body: dict[str, Any]) -> dict[str, Any]:
    return {"target": target, "stop": stop, "explain_errors": {"recorder": installed, **body}}
