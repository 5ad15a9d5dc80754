"""The recorder behind `stridelens inspect --explain-errors`: runs inside the debuggee.

Its job: when torch raises one of the RuntimeErrors the static rules know, say which op raised
it on which tensors (shape, strides, device at that moment) and which earlier line is the
cause, both in the user's code:
- in-place on a saved tensor (SL213, "one of the variables needed for gradient computation has
  been modified by an inplace operation"): which op saved the tensor and which in-place op
  bumped its version; torch's message gives neither line and often names the wrong op (the
  tensor's producer, "output 0 of AsStridedBackward0");
- a view of a non-contiguous tensor (SL101, "view size is not compatible with input tensor's
  size and stride"): the op that made the operand non-contiguous;
- backward through a freed graph (SL203, "Trying to backward through the graph a second
  time"): the op that saved what was freed, and the earlier backward that freed it;
- a device mismatch (SL214): where each operand was made on, or moved to, its device;
- a shape mismatch in matmul / linear / conv: the operands' shapes and where they were made.

How (measured against saved-tensor hooks in bench/explain_errors_cost.py):
- A `TorchDispatchMode` sees every aten op below autograd. An op that created an autograd
  node sees the thread's sequence counter one past that node's `_sequence_nr()` (the node
  is made just before the op is dispatched), so the first op to see a new counter value
  records "node N came from op F at file:line" in a ring of the last NODE_WINDOW nodes.
  Ops that create no node (no grad, inference) cost one counter read.
- Ops whose schema writes an argument (`mul_`, `add_` of `+=`, `fill_`/`copy_` of `h[i] = v`,
  `out=`) record the storage, the version before the write (torch bumps it when the op
  returns), the op and the line, in a ring of the last INPLACE_WINDOW writes.
- An op that raises records what it was given (never a tensor: shapes, strides, devices,
  storage keys), and what the rings below say of each operand. Remembered by storage (and
  layout): a non-contiguous op output (LAYOUT_WINDOW), a factory's output and a move to
  another device (`_to_copy`, ORIGIN_WINDOW). Each backward (a graph task) records the line
  that called it and the sequence numbers of the nodes it ran (the last BACKWARD_WINDOW).
- torch's own version check stays in force. Saved-tensor hooks would turn it off (torch skips
  the check for hooked tensors, measured), so the recorder never installs them globally.
- At an in-place error, the graph is walked from the tensors backward was called on; reading
  each node's `_saved_*` reproduces torch's message for the stale one. `register_hooks` on
  that one SavedTensor hands the saved tensor over (its unpack hook re-raises the same error,
  so the process behaves as before). At a freed-graph error the same walk finds the freed
  node nearest the roots.

Like the probe it imports only the standard library at import time; its source is evaluated
into a private module. Unlike the probe it changes the process on purpose (see SECURITY.md):
`install()` imports torch if the script has not yet, and pushes the mode on the thread that
calls it; at an explained error `quiet_traceback()` makes the traceback Python prints, if the
error ends the script, show the script's own frames only.
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
LAYOUT_WINDOW = 1 << 14  # non-contiguous op outputs remembered (by storage and layout)
ORIGIN_WINDOW = 1 << 14  # storages made by a factory or moved to another device remembered
BACKWARD_WINDOW = 64  # backward calls remembered (their line and the nodes they ran)
OPERANDS = 6  # tensors described per failing op
GRAPH_NODE_LIMIT = 2_000_000  # bound on the graph walk at the error
ERROR_MARK = "modified by an inplace operation"
FREED_MARKS = ("Trying to backward through the graph a second time",
               "saved tensors after they have already been freed")
# The RuntimeErrors explained, by a piece of torch's message: (kind, static rule, pieces).
KINDS: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("inplace_saved", "SL213", (ERROR_MARK,)),
    ("view_noncontiguous", "SL101", ("view size is not compatible with input tensor's size and stride",)),
    ("backward_twice", "SL203", FREED_MARKS),
    ("device_mismatch", "SL214", ("Expected all tensors to be on the same device", "is not on the expected device",
                                  "Expected object of device type", "found at least two devices")),
    ("shape_mismatch", None, ("shapes cannot be multiplied", "size mismatch, got",
                              "Expected size for first two dimensions of batch2 tensor", "channels, but got",
                              "both arguments to matmul need", "input to conv", "input to conv1d",
                              "Calculated padded input size per channel")),
)
# conv's own device check: "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor)
# should be the same ..." (a device mismatch when one type is a CUDA one and the other is not)
_CONV_TYPES = re.compile(r"Input type \((\S+)\) and weight type \((\S+)\) should be the same")
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


def _layout_key(t: Any) -> tuple[Any, ...]:
    """A tensor's storage (its StorageImpl address) and window in it: what a view op's output
    and the tensor the user later holds share, whatever Python object each of them is."""
    return (t.untyped_storage()._cdata, tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _operand(t: Any, arg: str, tensor_type: Any) -> dict[str, Any] | None:
    """What an op was given, as plain values (no tensor is kept)."""
    if not isinstance(t, tensor_type):
        return None
    d: dict[str, Any] = {"arg": arg, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                         "device": str(t.device), "strides": None, "storage_offset": None, "contiguous": None}
    try:
        d.update(strides=list(t.stride()), storage_offset=t.storage_offset(), contiguous=bool(t.is_contiguous()))
        d["_layout"] = _layout_key(t)
        d["_storage"] = d["_layout"][0]
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # sparse and other layouts
        pass
    return d


def _make_mode(torch: Any) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    seq_now = torch._C._autograd._get_sequence_nr
    task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)
    current_node = getattr(torch._C, "_current_autograd_node", lambda: None)
    get_ident = threading.get_ident
    tid = get_ident()
    mask = NODE_WINDOW - 1
    ring: list[Any] = [None] * NODE_WINDOW
    writes_log: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=INPLACE_WINDOW)
    tick = itertools.count()
    # op -> (the arguments it writes, its kind: 0 plain, 1 factory (no tensor argument), 2 _to_copy);
    # one dict: each lookup hashes the op in Python (OpOverload.__hash__).
    ops: dict[Any, tuple[tuple[tuple[int, str], ...], int]] = {}
    layouts: collections.OrderedDict[tuple[Any, ...], tuple[Any, ...]] = collections.OrderedDict()
    origins: collections.OrderedDict[int, tuple[Any, ...]] = collections.OrderedDict()
    tasks: collections.deque[tuple[int, Any, int, set[int]]] = collections.deque(maxlen=BACKWARD_WINDOW)
    task_now = [-1]
    users: dict[str, bool] = {}
    prefixes = _skip_prefixes(torch)
    last = [seq_now()]
    tensor_type = torch.Tensor
    storage_type = torch.UntypedStorage
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

    def kind_of(func: Any) -> int:
        if func is torch.ops.aten._to_copy.default:
            return 2
        return 0 if any("Tensor" in str(a.type) for a in func._schema.arguments) else 1

    def note_origin(out: Any, what: tuple[Any, ...]) -> None:
        """Remember where a storage was made or moved to its device. A C-level weak reference
        to the storage keeps its address from being reused while the record lives (the data
        is freed as usual): a live storage at that address is the one recorded."""
        if not isinstance(out, tensor_type):
            return
        try:
            key = out.untyped_storage()._weak_ref()
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):
            return
        old = origins.pop(key, None)
        if old is not None:
            storage_type._free_weak_ref(key)  # the same storage again: one reference per record
        origins[key] = what
        if len(origins) > ORIGIN_WINDOW:
            gone, _ = origins.popitem(last=False)
            storage_type._free_weak_ref(gone)

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
            task = task_id()
            if task != -1:  # an op of a backward: which call, which nodes
                if task != task_now[0]:
                    task_now[0] = task
                    tasks.append((task, user_loc(), next(tick), set()))
                node = current_node()
                if node is not None:
                    tasks[-1][3].add(node._sequence_nr())
                del node
                if loc is None:  # what user_loc() would find: the line that called backward
                    loc = tasks[-1][1]
            info = ops.get(func)
            if info is None:
                info = ops[func] = (writes_of(func), kind_of(func))
            w, k = info
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
            try:
                out = func(*args, **kwargs)
            except Exception as e:
                if loc is None:
                    loc = user_loc()
                _note_failure(e, func, args, kwargs, loc, tensor_type)
                raise
            if k == 1:
                note_origin(out, ("made", func, loc or user_loc(), str(out.device) if isinstance(out, tensor_type)
                                  else None, next(tick)))
            elif k == 2 and isinstance(out, tensor_type) and args and isinstance(args[0], tensor_type) \
                    and out.device != args[0].device:
                note_origin(out, ("moved", func, loc or user_loc(), str(args[0].device), str(out.device), next(tick)))
            # Non-contiguous outputs, inline: under pydevd every Python call here costs a trace
            # event (measured: a helper function per such op cost ~6 µs per op of a training step).
            for o in (out,) if isinstance(out, tensor_type) else out if type(out) in (tuple, list) else ():
                if isinstance(o, tensor_type):
                    try:
                        if o.is_contiguous():
                            continue
                        key = (o.untyped_storage()._cdata, tuple(o.shape), tuple(o.stride()), o.storage_offset())
                        a0 = args[0] if args and isinstance(args[0], tensor_type) else None
                        src = None
                        if a0 is not None and not a0.is_contiguous():
                            src = (a0.untyped_storage()._cdata, tuple(a0.shape), tuple(a0.stride()),
                                   a0.storage_offset())
                    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
                        continue  # sparse and other layouts without strides
                    if loc is None:
                        loc = user_loc()
                    layouts.pop(key, None)
                    layouts[key] = (func, loc, src, next(tick))
                    if len(layouts) > LAYOUT_WINDOW:
                        layouts.popitem(last=False)
            return out

    _state.update(ring=ring, writes=writes_log, mask=mask, layouts=layouts, origins=origins, tasks=tasks,
                  tick=tick)
    return InplaceRecorder


def _note_failure(e: BaseException, func: Any, args: Any, kwargs: Any, loc: Any, tensor_type: Any) -> None:
    """An op raised: keep its operands (as values) and their causes for `diagnose` (never raises)."""
    try:
        names = [a.name for a in func._schema.arguments]
        given: list[tuple[str, Any]] = []
        for i, a in enumerate(args):
            name = names[i] if i < len(names) else f"arg{i}"
            if isinstance(a, (list, tuple)):
                given.extend((f"{name}[{j}]", x) for j, x in enumerate(a[:OPERANDS]))
            else:
                given.append((name, a))
        given.extend(kwargs.items())
        operands = []
        for name, a in given:
            d = _operand(a, name, tensor_type)
            if d is not None:
                operands.append(d)
            if len(operands) >= OPERANDS:
                break
        for d in operands:
            d["made_noncontiguous_by"] = _layout_cause(d.get("_layout"))
            d["origin"] = _origin(d.get("_storage"))
        _state["failure"] = {"exception_id": id(e), "message": str(e), "op": _op_name(func), "aten": str(func),
                             "location": _loc_dict(loc), "operands": operands}
    except Exception:  # noqa: BLE001 -- the user's error goes on as it was, explained or not
        pass


def _layout_cause(key: Any) -> dict[str, Any] | None:
    """The op that made this layout non-contiguous from a contiguous input: the recorded
    producers followed back while their input was itself non-contiguous."""
    layouts = _state.get("layouts")
    if key is None or layouts is None:
        return None
    rec = layouts.get(key)
    steps = 0
    while rec is not None and rec[2] is not None and rec[2] in layouts and steps < 64:
        rec = layouts[rec[2]]
        steps += 1
    if rec is None:
        return None
    func, loc, src, _tick = rec
    return {"op": _op_name(func), "aten": str(func), "location": _loc_dict(loc),
            "from_noncontiguous": src is not None}


def _origin(key: Any) -> dict[str, Any] | None:
    """Where a storage was made (a factory) or moved to its device (`_to_copy`), if recorded."""
    origins = _state.get("origins")
    rec = origins.get(key) if origins is not None and key is not None else None
    if rec is None:
        return None
    if rec[0] == "moved":
        _what, func, loc, src, dst, _tick = rec
        return {"how": "moved", "op": _op_name(func), "from": src, "to": dst, "location": _loc_dict(loc)}
    _what, func, loc, dev, _tick = rec
    return {"how": "made", "op": _op_name(func), "device": dev, "location": _loc_dict(loc)}


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
    """Stop recording and drop every reference the recorder holds (the storages' weak
    references included)."""
    origins = _state.get("origins")
    torch = sys.modules.get("torch")
    if origins and torch is not None:
        for key in list(origins):
            torch.UntypedStorage._free_weak_ref(key)
        origins.clear()
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


def classify(exc: BaseException, message: str) -> tuple[str, str | None] | None:
    """(kind, static rule) of an error `diagnose` explains, None for any other."""
    if not isinstance(exc, RuntimeError):
        return None
    for kind, rule, pieces in KINDS:
        if any(p in message for p in pieces):
            return kind, rule
    m = _CONV_TYPES.search(message)
    if m is not None and (".cuda." in m.group(1)) != (".cuda." in m.group(2)):
        return "device_mismatch", "SL214"
    return None


def _public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def diagnose(exc: BaseException, scope: dict[str, Any]) -> dict[str, Any]:
    """Explain `exc` if it is one of the errors of KINDS; `scope` is the stopped frame's (for
    backward errors it holds the tensors backward ran on)."""
    message = str(exc)
    found = classify(exc, message)
    if found is None:
        return {"match": False, "exception": type(exc).__name__, "message": message[:500],
                "exception_id": id(exc)}  # pydevd stops once per frame the exception leaves
    if _state.get("mode") is None:
        raise RecorderError(N_("the recorder is not installed in this process"))
    torch = sys.modules["torch"]
    kind, rule = found
    if kind == "inplace_saved":
        out = _diagnose_inplace(message, scope, torch)
    else:
        first = message.strip().split("\n")[0]
        if kind == "backward_twice":  # its first sentence; the rest is the advice the report gives
            first = first.split("). ")[0] + (")" if "). " in first else "")
        out = {"match": True, "message": first[:600]}
    out.update(kind=kind, rule=rule, exception=type(exc).__name__, exception_id=id(exc), op=None, operands=[])
    fail = _state.get("failure")
    _state["operands"] = []
    if fail is not None and fail["message"] == message and kind != "inplace_saved":
        out["op"] = {"op": fail["op"], "aten": fail["aten"], "location": fail["location"]}
        out["operands"] = [_public(d) for d in fail["operands"]]
        _state["operands"] = [(d.get("_storage"), d.get("_layout")) for d in fail["operands"]]
    if kind == "backward_twice":
        out.update(_diagnose_freed(scope, torch))
    return out


def _diagnose_freed(scope: dict[str, Any], torch: Any) -> dict[str, Any]:
    """Backward through a freed graph: the freed node nearest the roots (breadth first), the
    op and line that made it, and the earlier backward that ran it (and so freed it)."""
    roots = _roots(scope, torch)
    if not roots:
        roots = [o.grad_fn for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    # The failing backward has itself run (and freed) the nodes before the one it failed at:
    # those are in the newest backward's record, unless it failed at its first node. The freed
    # node wanted is the first one met that the newest backward did not run.
    tasks = _state["tasks"]
    newest = tasks[-1][3] if tasks else set()
    seen: set[int] = set()
    keep: list[Any] = []
    queue = collections.deque(roots)
    hit = first = None
    while queue and len(keep) < GRAPH_NODE_LIMIT and hit is None:
        node = queue.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        for attr in _saved_attrs(node):
            try:
                getattr(node, attr)
            except RuntimeError as e:
                if any(mark in str(e) for mark in FREED_MARKS):
                    first = first or (node, attr)
                    if node._sequence_nr() not in newest:
                        hit = (node, attr)
                    break
            except Exception:  # noqa: BLE001 -- an odd node type: skip it
                continue
        queue.extend(n for n, _ in getattr(node, "next_functions", ()))
    hit = hit or first
    out: dict[str, Any] = {"saved_by": None, "freed_by": None}
    if hit is None:
        return out
    node, attr = hit
    seq = node._sequence_nr()
    saved = {"node": node.name(), "as": attr.removeprefix("_saved_"), "op": None, "aten": None, "location": None}
    save_tick = None
    rec = _state["ring"][seq & _state["mask"]]
    if rec is not None and rec[0] == seq:
        _seq, func, loc, save_tick = rec
        saved.update(op=_op_name(func), aten=str(func), location=_loc_dict(loc))
    out["saved_by"] = saved
    for _task, loc, when, ran in reversed(tasks):
        if seq in ran:
            out["freed_by"] = {"location": _loc_dict(loc), "nodes_run": len(ran),
                               "after_saving": save_tick is not None and when > save_tick}
            break
    return out


def _diagnose_inplace(message: str, scope: dict[str, Any], torch: Any) -> dict[str, Any]:
    """torch's in-place error: the saved tensor, the op that saved it, the in-place op(s)."""
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


def names(scope: dict[str, Any], module_level: bool = True) -> list[dict[str, Any]]:
    """Names in `scope` bound to the diagnosed tensor, or to a view sharing its storage."""
    found = _state.get("found")
    if found is None:
        return []
    scope = own_names(scope, module_level)
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


def own_names(scope: dict[str, Any], module_level: bool) -> dict[str, Any]:
    """A function frame's own names: pydevd evaluates in the frame's globals and locals merged,
    so the module's globals (the same objects) are dropped here and named in the `<module>`
    frame instead."""
    if module_level:
        return scope
    name = scope.get("__name__")
    mod = sys.modules.get(name) if isinstance(name, str) else None
    g = vars(mod) if mod is not None else {}
    return {k: v for k, v in scope.items() if not (k in g and g[k] is v)}


def operand_names(scope: dict[str, Any], module_level: bool = True) -> list[list[dict[str, Any]]]:
    """For each operand of the failing op, the names in `scope` (a frame's; module parameters as
    `model.fc.weight`) bound to its storage; `same_window` when the name is that very window of
    it (not another view of the same storage). An object named in an earlier call (an outer
    frame: `model.fc.weight` before `self.fc.weight`) is not named again."""
    wanted = _state.get("operands") or []
    if not wanted:
        return []
    torch = sys.modules["torch"]
    scope = own_names(scope, module_level)
    probe = sys.modules.get("_stridelens_probe")
    if probe is not None:
        entries = probe._frame_entries(scope, torch.Tensor, getattr(torch.nn, "Module", None))
    else:
        entries = [(k, v) for k, v in scope.items() if isinstance(v, torch.Tensor) and not k.startswith("__")]
    named: list[set[int]] = _state.setdefault("named", [set() for _ in wanted])
    out: list[list[dict[str, Any]]] = [[] for _ in wanted]
    for name, v in entries:
        try:
            key = _layout_key(v)
        except (RuntimeError, NotImplementedError, TypeError, AttributeError):
            continue
        for i, (storage, layout) in enumerate(wanted):
            if storage is not None and key[0] == storage and len(out[i]) < 4 and id(v) not in named[i]:
                named[i].add(id(v))
                out[i].append({"name": name, "shape": list(v.shape), "same_window": key == layout})
    return out


def module_here(scope: dict[str, Any]) -> dict[str, Any] | None:
    """The nn.Module whose code this frame runs (`self`), remembered for `module_name`."""
    torch = sys.modules["torch"]
    me = scope.get("self")
    if not isinstance(me, torch.nn.Module):
        return None
    _state["module"] = me
    text = repr(me)
    return {"type": type(me).__name__, "repr": text if len(text) <= 300 else text[:300] + " ...",
            "extra": me.extra_repr()[:300]}


def module_name(scope: dict[str, Any]) -> str | None:
    """The name of the remembered module in `scope`: `model.fc`, or the variable itself."""
    me = _state.get("module")
    torch = sys.modules["torch"]
    if me is None:
        return None
    for var, v in list(scope.items()):
        if var.startswith("__") or not isinstance(v, torch.nn.Module):
            continue
        if var == "self" and v is me:
            continue  # the module's own frame: a caller's name says more
        for sub_name, sub in v.named_modules():
            if sub is me:
                return f"{var}.{sub_name}" if sub_name else var
    return None


def quiet_traceback() -> dict[str, Any]:
    """If the explained error ends the script, the traceback Python prints shows the script's
    own frames only (no debugpy, runpy, torch or recorder frames), then torch's message."""
    import traceback

    prev = sys.excepthook
    if getattr(prev, "_stridelens", False):
        return {"installed": False}
    torch = sys.modules.get("torch")
    prefixes = _skip_prefixes(torch) if torch is not None else ("\0", "\0")

    def hook(tp: Any, value: Any, tb: Any) -> None:
        frames = [f for f in traceback.extract_tb(tb) if _is_user_file(f.filename, prefixes)]
        if not frames:
            prev(tp, value, tb)
            return
        sys.stderr.write("Traceback (most recent call last; the script's own frames):\n")
        sys.stderr.write("".join(traceback.format_list(frames)))
        sys.stderr.write("".join(traceback.format_exception_only(tp, value)))
        sys.stderr.flush()

    hook._stridelens = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    return {"installed": True}


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


def names_json(scope: dict[str, Any], module_level: bool = True) -> str:
    return _json(names, scope, module_level)


def operand_names_json(scope: dict[str, Any], module_level: bool = True) -> str:
    return _json(operand_names, scope, module_level)


def module_here_json(scope: dict[str, Any]) -> str:
    return _json(module_here, scope)


def module_name_json(scope: dict[str, Any]) -> str:
    return _json(module_name, scope)


def quiet_traceback_json() -> str:
    return _json(quiet_traceback)
