"""The in-place recorder behind `stridelens inspect --explain-errors`: runs inside the debuggee.

One job: when backward raises "one of the variables needed for gradient computation has been
modified by an inplace operation", say which op saved the tensor, which in-place op bumped
its version, and where both ran in the user's code. torch's message gives neither line and
often names the wrong op (the tensor's producer, "output 0 of AsStridedBackward0").

How (measured against saved-tensor hooks in bench/explain_errors_cost.py):
- A `TorchDispatchMode` sees every aten op below autograd. An op that created an autograd
  node sees the thread's sequence counter one past that node's `_sequence_nr()` (the node
  is made just before the op is dispatched), so the first op to see a new counter value
  records "node N came from op F at file:line" in a ring of the last NODE_WINDOW nodes.
  Ops that create no node (no grad, inference) cost one counter read.
- Ops whose schema writes an argument (`mul_`, `add_` of `+=`, `fill_`/`copy_` of `h[i] = v`,
  `out=`) record the storage, the version before the write (torch bumps it when the op
  returns), the op and the line, in a ring of the last INPLACE_WINDOW writes.
- torch's own version check stays in force. Saved-tensor hooks would turn it off (torch skips
  the check for hooked tensors, measured), so the recorder never installs them globally.
- At the error, the graph is walked from the tensors backward was called on; reading each
  node's `_saved_*` reproduces torch's message for the stale one. `register_hooks` on that
  one SavedTensor hands the saved tensor over (its unpack hook re-raises the same error, so
  the process behaves as before).

Like the probe it imports only the standard library at import time; its source is evaluated
into a private module. Unlike the probe it changes the process on purpose (see SECURITY.md):
`install()` imports torch if the script has not yet, and pushes the mode on the thread that
calls it.
"""

from __future__ import annotations

import collections
import gc
import importlib
import itertools
import json
import os
import re
import sys
import threading
from typing import Any

PRIVATE_NAME = "_stridelens_inplace"
# The name its source is compiled under. pydevd neither traces nor shows code from files named
# "<frozen ...>": the recorder runs on every op, and tracing it (line events, with the
# exception breakpoint on) cost ~40% more per step, measured with bench/explain_errors_cost.py.
FILENAME = "<frozen stridelens_inplace_recorder>"
NODE_WINDOW = 1 << 16  # autograd nodes whose creating op and line are remembered
INPLACE_WINDOW = 1 << 16  # in-place writes remembered
GRAPH_NODE_LIMIT = 2_000_000  # bound on the graph walk at the error
ERROR_MARK = "modified by an inplace operation"
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+)")

_state: dict[str, Any] = {}  # mode, rings, and (after a diagnosis) the saved tensor found


def N_(message: str) -> str:
    """Marks an English template for the catalogue (no stridelens import here; see probe.N_)."""
    return message


class RecorderError(Exception):
    """A problem to report to the user as a message (not a traceback)."""


# ---------------------------------------------------------------- where user code is


def _skip_prefixes(torch: Any) -> tuple[str, ...]:
    import sysconfig

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    return (torch_dir, sysconfig.get_paths()["stdlib"] + os.sep)


def _is_user_file(filename: str, prefixes: tuple[str, ...]) -> bool:
    if filename.startswith(("<stridelens", "<frozen")):  # the probes, this recorder, the stdlib
        return False
    norm = filename.replace("\\", "/")
    if "/debugpy/" in norm or "/pydevd" in norm:
        return False
    torch_dir, stdlib = prefixes
    if filename.startswith(torch_dir):
        return False
    # site-packages may live under the stdlib folder (non-venv installs): that is user code.
    return not (filename.startswith(stdlib) and "-packages" not in norm[len(stdlib):])


def _loc_dict(loc: tuple[str, int, str] | None) -> dict[str, Any] | None:
    if loc is None:
        return None
    path, line, function = loc
    code = None
    try:
        import linecache

        code = linecache.getline(path, line).strip() or None
    except (OSError, UnicodeDecodeError):
        pass
    return {"path": path, "line": line, "function": function, "code": code}


# ---------------------------------------------------------------- recording


def _make_mode(torch: Any) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    seq_now = torch._C._autograd._get_sequence_nr
    get_ident = threading.get_ident
    tid = get_ident()
    mask = NODE_WINDOW - 1
    ring: list[Any] = [None] * NODE_WINDOW
    writes_log: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=INPLACE_WINDOW)
    tick = itertools.count()
    written: dict[Any, tuple[tuple[int, str], ...]] = {}
    users: dict[str, bool] = {}
    prefixes = _skip_prefixes(torch)
    last = [seq_now()]
    tensor_type = torch.Tensor
    getframe = sys._getframe

    def user_loc() -> tuple[str, int, str] | None:
        f: Any = getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            u = users.get(fn)
            if u is None:
                u = users[fn] = _is_user_file(fn, prefixes)
            if u:
                return (fn, f.f_lineno, f.f_code.co_name)
            f = f.f_back
        return None

    def writes_of(func: Any) -> tuple[tuple[int, str], ...]:
        args = func._schema.arguments
        return tuple((i, a.name) for i, a in enumerate(args)
                     if a.alias_info is not None and a.alias_info.is_write)

    class InplaceRecorder(TorchDispatchMode):  # type: ignore[misc,valid-type]
        active = True

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if not self.active or get_ident() != tid:  # sequence numbers are per thread
                return func(*args, **kwargs)
            s = seq_now()
            loc = None
            if s != last[0]:
                last[0] = s
                loc = user_loc()
                ring[(s - 1) & mask] = (s - 1, func, loc, next(tick))
            w = written.get(func)
            if w is None:
                w = written[func] = writes_of(func)
            if w:
                if loc is None:
                    loc = user_loc()
                when = next(tick)
                for i, name in w:
                    target = args[i] if i < len(args) else kwargs.get(name)
                    for t in (target if isinstance(target, (list, tuple)) else (target,)):
                        if isinstance(t, tensor_type):
                            # The version is bumped after the op returns: this is its value before.
                            writes_log.append((when, t.untyped_storage()._cdata, t._version, func, loc))
            return func(*args, **kwargs)

    _state.update(ring=ring, writes=writes_log, mask=mask)
    return InplaceRecorder


def install() -> dict[str, Any]:
    """Start recording on this thread (the script's main thread, stopped at its first line)."""
    if _state.get("mode") is not None:
        return _installed()
    # The script imports torch anyway; recording must start before its first op.
    torch = sys.modules.get("torch") or importlib.import_module("torch")
    if not hasattr(torch._C._autograd, "_get_sequence_nr"):
        raise RecorderError(N_("torch {version} has no autograd sequence counter; --explain-errors needs "
                               "torch >= 2.1").format(version=torch.__version__))
    mode = _make_mode(torch)()
    mode.__enter__()
    _state["mode"] = mode
    _state["thread"] = threading.current_thread().name
    return _installed()


def _installed() -> dict[str, Any]:
    return {"mechanism": "TorchDispatchMode", "thread": _state.get("thread"),
            "node_window": NODE_WINDOW, "inplace_window": INPLACE_WINDOW}


def uninstall() -> dict[str, Any]:
    """Stop recording and drop every reference the recorder holds."""
    mode: Any = _state.pop("mode", None)
    popped = False
    if mode is not None:
        mode.active = False  # if it cannot be popped (another mode above it), it only passes ops on
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        top: Any = _get_current_dispatch_mode()
        if top is mode:
            top.__exit__(None, None, None)
            popped = True
    _state.clear()
    return {"popped": popped}


# ---------------------------------------------------------------- at the error


def _roots(scope: dict[str, Any], torch: Any) -> list[Any]:
    nodes: list[Any] = []

    def add(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            if v.grad_fn is not None:
                nodes.append(v.grad_fn)
        elif type(v).__name__ == "GradientEdge" and getattr(v, "node", None) is not None:
            nodes.append(v.node)

    for v in scope.values():
        if isinstance(v, (list, tuple)):
            for x in v[:64]:
                add(x)
        else:
            add(v)
    return nodes


def _saved_attrs(node: Any) -> list[str]:
    names = [a for a in dir(node) if a.startswith("_saved_")]
    if hasattr(type(node), "saved_tensors"):  # a custom autograd.Function's ctx
        names.append("saved_tensors")
    return names


def _find_stale(roots: list[Any], message: str) -> tuple[Any, str, str] | None:
    """The node and attribute whose saved tensor fails torch's version check with `message`."""
    seen: set[int] = set()
    keep: list[Any] = []  # ids stay unique while the nodes are held
    stack = list(roots)
    first: tuple[Any, str, str] | None = None
    while stack and len(keep) < GRAPH_NODE_LIMIT:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        for attr in _saved_attrs(node):
            try:
                getattr(node, attr)
            except RuntimeError as e:  # a stale one, or freed by this backward
                text = str(e)
                if ERROR_MARK in text:
                    if text == message:
                        return node, attr, text
                    first = first or (node, attr, text)
            except Exception:  # noqa: BLE001 -- an odd node type: skip it
                continue
        stack.extend(n for n, _ in getattr(node, "next_functions", ()))
    return first


def _capture(node: Any, attr: str, message: str) -> Any:
    """The saved tensor itself, taken through `register_hooks` on that SavedTensor only."""
    raw = getattr(node, "_raw" + attr, None)
    if raw is None or not hasattr(raw, "register_hooks"):
        return None  # a list of saved tensors, or a custom Function's: node and line only
    got: list[Any] = []

    def pack(t: Any) -> Any:
        got.append(t)
        return t

    def unpack(t: Any) -> Any:
        # Hooked tensors skip torch's check: raise what torch raised, so nothing changes.
        raise RuntimeError(_VERSIONS.sub(
            lambda m: f"is at version {t._version}; expected version {m.group(2)}", message, count=1))

    try:
        raw.register_hooks(pack, unpack)
    except RuntimeError:  # hooks already set by the user's own saved_tensors_hooks
        return None
    return got[0] if got else None


def _key(t: Any) -> int | None:
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        return None


def _op_name(func: Any) -> str:
    try:
        return str(func.overloadpacket.__name__)
    except AttributeError:
        return str(func)


def diagnose(exc: BaseException, scope: dict[str, Any]) -> dict[str, Any]:
    """Explain `exc` if it is torch's in-place error; `scope` holds the tensors backward ran on."""
    message = str(exc)
    if not isinstance(exc, RuntimeError) or ERROR_MARK not in message:
        return {"match": False, "exception": type(exc).__name__, "message": message[:500],
                "exception_id": id(exc)}  # pydevd stops once per frame the exception leaves
    if _state.get("mode") is None:
        raise RecorderError(N_("the recorder is not installed in this process"))
    torch = sys.modules["torch"]
    m = _VERSIONS.search(message)
    actual, expected = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    out: dict[str, Any] = {"match": True, "message": message.split(" Hint:")[0],
                           "expected_version": expected, "actual_version": actual,
                           "tensor": None, "saved_by": None, "modified_by": []}
    roots = _roots(scope, torch)
    if not roots:  # backward called from somewhere we cannot see: every graph in the process
        roots = [o.grad_fn for o in gc.get_objects()
                 if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    hit = _find_stale(roots, message)
    if hit is None:
        return out
    node, attr, text = hit
    seq = node._sequence_nr()
    rec = _state["ring"][seq & _state["mask"]]
    save_tick = None
    saved_by: dict[str, Any] = {"node": node.name(), "as": attr.removeprefix("_saved_"),
                                "op": None, "aten": None, "location": None}
    if rec is not None and rec[0] == seq:
        _seq, func, loc, save_tick = rec
        saved_by.update(op=_op_name(func), aten=str(func), location=_loc_dict(loc))
    out["saved_by"] = saved_by
    t = _capture(node, attr, text)
    if t is None:
        return out
    key = _key(t)
    _state["found"] = (t, key)
    out["tensor"] = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                     "device": str(t.device), "strides": list(t.stride()),
                     "storage_offset": t.storage_offset(), "names": []}
    lo = expected if expected is not None else 0
    hi = actual if actual is not None else t._version
    for when, k, before, func, loc in _state["writes"]:
        if k == key and lo <= before < hi and (save_tick is None or when > save_tick):
            out["modified_by"].append({"op": _op_name(func), "aten": str(func), "version_before": before,
                                       "version_after": before + 1, "location": _loc_dict(loc)})
    return out


def names(scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Names in `scope` bound to the diagnosed tensor, or to a view sharing its storage."""
    found = _state.get("found")
    if found is None:
        return []
    t, key = found
    torch = sys.modules["torch"]
    out = []
    for name, v in scope.items():
        if not isinstance(v, torch.Tensor) or name.startswith("__"):
            continue
        if _key(v) != key:
            continue
        same = (tuple(v.shape) == tuple(t.shape) and v.stride() == t.stride()
                and v.storage_offset() == t.storage_offset())
        out.append({"name": name, "shape": list(v.shape), "same_window": same, "version": v._version})
    return out


# ---------------------------------------------------------------- entry points (JSON out)


def _json(fn: Any, *args: Any) -> str:
    try:
        return json.dumps({"ok": True, "result": fn(*args)})
    except RecorderError as e:
        return json.dumps({"ok": False, "error": str(e)})
    except Exception as e:  # noqa: BLE001 -- report it; never raise into the user's process
        return json.dumps({"ok": False, "error": N_("recorder failed: {error}").format(error=f"{type(e).__name__}: {e}")})


def install_json() -> str:
    return _json(install)


def uninstall_json() -> str:
    return _json(uninstall)


def diagnose_json(exc: BaseException, scope: dict[str, Any]) -> str:
    return _json(diagnose, exc, scope)


def names_json(scope: dict[str, Any]) -> str:
    return _json(names, scope)
