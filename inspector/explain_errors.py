"""`inspect --launch SCRIPT --explain-errors`: run a script with the recorder and, when torch
raises one of the RuntimeErrors the static rules know (an in-place change of a tensor saved for
backward, a view of a non-contiguous tensor, backward through a freed graph, a device mismatch,
a shape mismatch in matmul / linear / conv), say which line raised it on which tensors and which
earlier line caused it, and how to fix it.

The order of events in the debuggee:
1. debugpy stops it at the first line of the script (a line breakpoint, removed at once);
2. the recorder (`inplace_recorder.py`) is evaluated into a private module and installed on
   that, the main, thread; the probe is injected too, for the target facts;
3. a debugpy exception breakpoint on raised `RuntimeError` (caught or not) stops the script at
   the raise; a RuntimeError of another kind is let go on;
4. at the raise, the recorder explains the error from the frame where it surfaced (its locals
   hold the tensors backward ran on) and from what it recorded of the op that raised; each
   user frame is asked which of its names are bound to the tensors, the frames that run an
   nn.Module's code which module it is; then the recorder is removed and the target is let go
   (or killed). If the error then ends the script, the traceback it prints shows the script's
   own frames only.
"""

from __future__ import annotations

import linecache
import time
from typing import Any

from stridelens.i18n import tr
from stridelens.inspector import inplace_recorder as recorder
from stridelens.inspector.dap_client import DapTimeout
from stridelens.inspector.session import Breakpoint, InspectError, Session, _library_frame

OP_KINDS = ("view_noncontiguous", "device_mismatch", "shape_mismatch")  # raised by an op the recorder sees
OP_STOPS = 32  # frames of torch code an op's error may pass before the recorder has noted the op
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
    s.progress(tr("running the script until an error it explains"))
    s.resume()

    deadline = time.monotonic() + timeout
    others: set[int] = set()  # RuntimeErrors of other kinds let go (one stop per frame they pass)
    last_other: dict[str, Any] | None = None
    waited = 0
    while True:
        try:
            code = s.next_stop(max(0.0, deadline - time.monotonic()))
        except DapTimeout:
            s.pause()  # the recorder must not stay behind in a process we leave running
            _call(s, "uninstall_json()")
            s.break_on_raised([])
            return _report(target, installed, None, {
                "occurred": False, "finished": False, "exit_code": None, "waited_s": timeout,
                "other_runtime_errors": len(others), "last_other_error": last_other})
        if code is not None:
            return _report(target, installed, None, {
                "occurred": False, "finished": True, "exit_code": code,
                "other_runtime_errors": len(others), "last_other_error": last_other})
        found = _call(s, "diagnose_json(__exception__[1], locals())")
        if found.get("match"):
            # pydevd stops first where the exception appears in Python (torch's OpOverload
            # call), before the recorder's own handler has noted the op that raised and its
            # operands: go on to the next frame the same exception leaves, up to the user's.
            if (found["kind"] in OP_KINDS and found.get("op") is None and _library_frame(s.frame)
                    and waited < OP_STOPS):
                waited += 1
                s.resume()
                continue
            break
        if found["exception_id"] not in others:
            others.add(found["exception_id"])
            last_other = {"exception": found.get("exception"), "message": found.get("message")}
        s.resume()

    s.progress(tr("naming the tensors in the script's frames"))
    frames = s.stack()
    user_frames = [f for f in frames if f["user"]]
    tensor = found.get("tensor")
    for fr in user_frames if tensor is not None else []:
        with s.in_frame(fr["id"]):
            tensor["names"] += [{**n, **_frame_place(fr)}
                                for n in _call(s, f"names_json(locals(), {_module_level(fr)})")]
    if found.get("operands"):
        for n in found["operands"]:
            n["names"] = []
        for fr in reversed(user_frames):  # outer frames first: `model.fc.weight`, not `self.fc.weight`
            with s.in_frame(fr["id"]):
                per = _call(s, f"operand_names_json(locals(), {_module_level(fr)})")
            for n, names in zip(found["operands"], per, strict=False):
                n["names"] += [{**x, **_frame_place(fr)} for x in names][:max(0, 4 - len(n["names"]))]
    found["module"] = _module(s, frames) if found["kind"] != "inplace_saved" else None
    found["traceback"] = [_place(f) for f in reversed(user_frames)]
    found["raised_at"] = _place(user_frames[0]) if user_frames else None
    user = user_frames[0] if user_frames else (frames[0] if frames else {})
    stop = {"reason": s.stop_reason, "path": (user.get("source") or {}).get("path"),
            "line": user.get("line"), "function": user.get("name")}
    found.pop("match", None)
    found.pop("exception_id", None)
    found["quiet_traceback"] = bool(_call(s, "quiet_traceback_json()").get("installed"))
    _call(s, "uninstall_json()")
    s.break_on_raised([])
    return _report(target, installed, stop, {"occurred": True, **found, "other_runtime_errors": len(others)})


def _module_level(fr: dict[str, Any]) -> bool:
    return fr.get("name") == "<module>"


def _frame_place(fr: dict[str, Any]) -> dict[str, Any]:
    return {"function": fr.get("name"), "line": fr.get("line"), "path": (fr.get("source") or {}).get("path")}


def _place(fr: dict[str, Any]) -> dict[str, Any]:
    """A user frame as the report shows it: path, line, function and the line's code."""
    where = _frame_place(fr)
    code = None
    if where["path"] and where["line"]:
        code = linecache.getline(where["path"], int(where["line"])).strip() or None
    return {**where, "code": code}


def _module(s: Session, frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The nn.Module whose code raised (the innermost frame running one, before the user's
    frames), named as a user frame names it (`model.fc`)."""
    found = None
    for fr in frames:
        if fr["user"]:
            break
        with s.in_frame(fr["id"]):
            found = _call(s, "module_here_json(locals())")
        if found:
            break
    if not found:
        return None
    found["name"] = None
    for fr in reversed([f for f in frames if f["user"]]):  # outer frames first: `model.fc`, not `self.fc`
        with s.in_frame(fr["id"]):
            name = _call(s, "module_name_json(locals())")
        if name:
            found["name"] = name
            break
    return dict(found)


def _report(target: dict[str, Any], installed: dict[str, Any], stop: dict[str, Any] | None,
            body: dict[str, Any]) -> dict[str, Any]:
    return {"target": target, "stop": stop, "explain_errors": {"recorder": installed, **body}}
