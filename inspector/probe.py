"""The probe: runs inside the debuggee and reads PyTorch's memory facts without changing them.

The probe is three files run, in this order, in one private module of the target
(`sys.modules["_stridelens_probe"]`):
- `probe.py` (this file): storage facts, autograd-graph walks, the names a frame gives tensors,
  and the JSON envelope every answer leaves in;
- `probe_describe.py`: `describe`, the card of one tensor;
- `probe_report.py`: the frame report and the process report.
`probe_parts.py` lists them for whoever injects the probe. In the target the three share one
namespace; imported in-process (a notebook, the tests), the other two import this one's names.

These files import only the standard library. Their source is injected once per debuggee
(through a DAP `evaluate` of one `exec(compile(...))` expression per file) or queued by a
snapshot's boot file, so they must not import stridelens there, and they never import torch
themselves: they use the torch the target already loaded (a target without torch gets a clear
error instead of a 3 s import with side effects).

Rules they keep, because the debuggee is someone's live process:
- no device allocation, no CUDA synchronisation, no `_version` bumps, no autograd state change;
- never `.storage()` (TypedStorage warning flag) -- `untyped_storage()` only;
- `.grad` is read only where torch does not warn (leaves and `retains_grad` tensors);
- tensor data is read only for value statistics, and only when asked;
- results leave as JSON strings, never tensors (pydevd keeps evaluate results alive);
- no references kept: caches hold types and attribute names only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PRIVATE_NAME = "_stridelens_probe"


def N_(message: str) -> str:
    """Marks an English template for the catalogue (stridelens.i18n cannot be imported here):
    the CLI matches the filled text back to it and shows it in the user's language."""
    return message


# A template filled by an f-string where it is used (_note_inplace), listed here for the catalogue.
FILLED_ELSEWHERE = (
    N_("{saved} was modified in place after being saved: backward through this graph will fail"),
)
GRAPH_NODE_LIMIT = 2_000_000  # bound on any autograd-graph walk
CONTAINER_ITEMS = 64  # tensors looked at inside one list/dict of a frame

_SAVED_ATTRS: dict[type, tuple[str, ...]] = {}
# Per node type, the saved attributes that can hold a tensor (sizes, strides and scalars
# dropped after the first node of the type is read): half the getattr calls of a graph walk.
_TENSOR_ATTRS: dict[type, tuple[str, ...]] = {}
# What torch raises for facts a tensor kind does not have (sparse strides, nested sizes, a
# saved tensor already freed by backward, ...).
_TORCH_ERRORS = (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError)
# Node types without a `saved_tensors` attribute (every C++ node): no hasattr, which raises and
# catches an AttributeError inside torch, for each of their nodes.
_NO_SAVED_TENSORS: set[type] = set()


def _encoder() -> Any:
    """One encoder for every result, not one per json.dumps call. No circular check: results
    are fresh trees of dicts and lists (saves ~15% of the dump). Where the standard library has
    its C encoder, the encoder object is made once here, not in each `JSONEncoder.encode` call
    (a microsecond of each describe), if it writes what `encode` writes."""
    plain = json.JSONEncoder(check_circular=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain.encode
    try:
        c_encode = make(None, plain.default, json.encoder.encode_basestring_ascii, None,
                        plain.key_separator, plain.item_separator, False, False, True)
    except (TypeError, ValueError):  # another signature
        return plain.encode
    join = "".join

    def encode(o: Any) -> str:
        return join(c_encode(o, 0))

    sample = {"a": [1, -2.5, None, True, "\u00e9\n\"", float("nan"), float("inf")], "b": {"c": {}, "d": []}}
    try:
        same = encode(sample) == plain.encode(sample) and encode("x") == plain.encode("x")
    except (TypeError, ValueError):
        same = False
    return encode if same else plain.encode


_ENCODE = _encoder()


class ProbeError(Exception):
    """A problem to report to the user as a message (not a traceback)."""


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        raise ProbeError(N_("the target process has not imported torch"))
    return torch


def _human(n: float) -> str:
    # stridelens.server.units.human_bytes, repeated: the probe runs in the target with the
    # standard library only (tests/test_units.py holds the two equal).
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# ---------------------------------------------------------------- storage facts


def _storage(t: Any) -> tuple[Any, int, str] | None:
    """(key, storage bytes, device) or None for tensors without one strided storage."""
    try:
        s = t.untyped_storage()
    except _TORCH_ERRORS:  # sparse, mkldnn, some subclasses: no single storage
        return None
    dev = str(t.device)
    ptr = s.data_ptr()
    # Meta and empty storages all have data_ptr 0: the StorageImpl address tells them apart.
    key = f"{dev}@{ptr:#x}" if ptr else f"{dev}#{s._cdata:#x}"
    return key, int(s.nbytes()), dev


def _fast_key(s: Any) -> int:
    """A storage's data address; CPU and CUDA share one virtual address space. Meta and empty
    storages all have address 0: minus their StorageImpl address tells them apart."""
    return s.data_ptr() or -s._cdata


def _extent(t: Any) -> tuple[int, int]:
    """Byte interval [lo, hi) of the storage this tensor can reach."""
    es = t.element_size()
    off = t.storage_offset()
    if t.numel() == 0:
        return off * es, off * es
    lo = hi = off
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return lo * es, (hi + 1) * es


def _safe(fn: Any, default: Any = None) -> Any:
    try:
        return fn()
    except _TORCH_ERRORS:
        return default


def _strided_format(t: Any, torch: Any) -> str | None:
    """The memory format of a strided, not nested tensor that is not contiguous; None if torch
    cannot tell."""
    try:
        dim = t.dim()
        if dim == 4 and t.is_contiguous(memory_format=torch.channels_last):
            return "channels_last"
        if dim == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
            return "channels_last_3d"
    except _TORCH_ERRORS:
        return None
    return "non-contiguous"


def _grad_of(t: Any) -> Any:
    # Reading .grad of a non-leaf that does not retain it prints a UserWarning in the target.
    if t.is_leaf or t.retains_grad:
        return t.grad
    return None


# ---------------------------------------------------------------- autograd graphs


def _saved_attrs(node: Any) -> tuple[str, ...]:
    tp = type(node)
    names = _SAVED_ATTRS.get(tp)
    if names is None:
        names = tuple(a for a in dir(tp) if a.startswith("_saved_"))
        _SAVED_ATTRS[tp] = names
    return names


def _saved_tensors(node: Any, tensor_type: type, problems: list[str] | None = None) -> list[Any]:
    tp = type(node)
    attrs = _TENSOR_ATTRS.get(tp)
    if attrs is None:
        return _first_saved_tensors(node, tp, tensor_type, problems)
    out: list[Any] = []
    for attr in attrs:
        try:
            v = getattr(node, attr)
        except _TORCH_ERRORS as e:  # freed by backward, or changed in place since saved
            _note_inplace(problems, e, tp, attr)
            continue
        if issubclass(type(v), tensor_type):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend([x for x in v if issubclass(type(x), tensor_type)])
    if not out and tp not in _NO_SAVED_TENSORS:
        return _custom_saved_tensors(node, tp, tensor_type, out)
    return out


def _first_saved_tensors(node: Any, tp: type, tensor_type: type, problems: list[str] | None) -> list[Any]:
    """`_saved_tensors` for the first node of its type: learns which attributes can hold a tensor."""
    out: list[Any] = []
    keep: list[str] = []
    for attr in _saved_attrs(node):
        try:
            v = getattr(node, attr)
        except _TORCH_ERRORS as e:  # freed by backward, or changed in place since saved
            keep.append(attr)
            _note_inplace(problems, e, tp, attr)
            continue
        if issubclass(type(v), tensor_type):
            out.append(v)
            keep.append(attr)
        elif isinstance(v, (list, tuple)):
            found = [x for x in v if issubclass(type(x), tensor_type)]
            out.extend(found)
            if found or not v:
                keep.append(attr)
        elif v is None:
            keep.append(attr)  # an optional tensor, absent in this node only
        # else sizes, strides, scalars, dtypes: never a tensor for this node type
    _TENSOR_ATTRS[tp] = tuple(keep)
    if not out and tp not in _NO_SAVED_TENSORS:
        return _custom_saved_tensors(node, tp, tensor_type, out)
    return out


def _note_inplace(problems: list[str] | None, e: Exception, tp: type, attr: str) -> None:
    if problems is not None and "inplace operation" in str(e):
        problems.append(f"{tp.__name__}.{attr[7:]} was modified in place after "
                        "being saved: backward through this graph will fail")


def _custom_saved_tensors(node: Any, tp: type, tensor_type: type, out: list[Any]) -> list[Any]:
    """A custom autograd.Function's `saved_tensors` (C++ nodes have none: remembered per type)."""
    if not hasattr(tp, "saved_tensors"):
        _NO_SAVED_TENSORS.add(tp)
        return out
    if not hasattr(node, "saved_tensors"):
        return out
    try:
        out.extend(x for x in node.saved_tensors if issubclass(type(x), tensor_type))
    except _TORCH_ERRORS:  # already freed by backward
        return out
    return out


def _walk_graph(root: Any, seen: dict[int, Any], tensor_type: type, on_saved: Any,
                owner: dict[int, int] | None = None, me: int = 0, touched: set[int] | None = None,
                problems: list[str] | None = None) -> int:
    """Visit nodes reachable from `root` not yet in `seen`; call on_saved(node, tensor).

    `seen` keeps the node wrappers alive during the walk so ids stay unique. With `owner`,
    new nodes are marked as `me`'s and the owners of already-seen nodes go into `touched`
    (graphs that share nodes are one graph). AccumulateGrad nodes are skipped for this:
    every graph of a model shares them. Returns the number of new nodes.
    """
    new = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        nid = id(node)
        if nid in seen:
            if owner is not None and touched is not None and nid in owner:
                touched.add(owner[nid])
            continue
        if len(seen) >= GRAPH_NODE_LIMIT:
            break
        seen[nid] = node
        if type(node).__name__ == "AccumulateGrad":
            continue
        new += 1
        if owner is not None:
            owner[nid] = me
        for t in _saved_tensors(node, tensor_type, problems):
            on_saved(node, t)
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None:
                stack.append(nxt)
    return new


def _graph_saved_bytes(grad_fn: Any, tensor_type: type) -> dict[str, Any]:
    """What the graph behind `grad_fn` saves, by `_walk_graph`'s depth-first walk."""
    storages: dict[int, int] = {}
    count = [0]

    def on_saved(_node: Any, t: Any) -> None:
        count[0] += 1
        try:
            s = t.untyped_storage()
        except _TORCH_ERRORS:
            return
        key = _fast_key(s)
        if key not in storages:
            storages[key] = s.nbytes()

    problems: list[str] = []
    nodes = _walk_graph(grad_fn, {}, tensor_type, on_saved, problems=problems)
    return {"nodes": nodes, "saved_tensors": count[0], "saved_storages": len(storages),
            "saved_bytes": sum(storages.values()), "problems": problems}


# ---------------------------------------------------------------- names of a frame's tensors


def _frame_entries(ns: dict[str, Any], tensor_type: type, module_type: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, v in list(ns.items()):
        if name.startswith("__") or name == PRIVATE_NAME:
            continue
        if issubclass(type(v), tensor_type):
            out.append((name, v))
        elif type(v) in (list, tuple):
            out.extend((f"{name}[{i}]", x) for i, x in enumerate(v[:CONTAINER_ITEMS]) if issubclass(type(x), tensor_type))
        elif type(v) is dict:
            items = list(v.items())[:CONTAINER_ITEMS]
            out.extend((f"{name}[{k!r}]", x) for k, x in items if issubclass(type(x), tensor_type))
        elif module_type is not None and issubclass(type(v), module_type):
            for pname, p in list(v.named_parameters())[:256]:
                out.append((f"{name}.{pname}", p))
            for bname, b in list(v.named_buffers())[:256]:
                out.append((f"{name}.{bname}", b))
    return out


def _whole_views(entries: list[tuple[str, Any]], ids: dict[int, str]) -> dict[int, str]:
    """Unnamed bases that a named tensor covers whole (`grid = arange(12).reshape(3, 4)`):
    id of the base -> that name. Such a name is never the base (`grid.t()._base is grid` is
    False): reports say the view *shares the storage of* `grid`, not that it is a view of it."""
    out: dict[int, str] = {}
    for name, t in entries:
        base = t._base
        if base is None or id(base) in ids or id(base) in out:
            continue
        same = _safe(lambda t=t, base=base: t.numel() == base.numel() and t.is_contiguous()
                     and base.is_contiguous() and t.storage_offset() == base.storage_offset()
                     and t.dtype == base.dtype)
        if same:
            out[id(base)] = name
    return out


def _storage_sharer(t: Any, entries: list[tuple[str, Any]], ids: dict[int, str],
                    whole: dict[int, str] | None = None) -> str | None:
    """For a view whose `_base` has no name: the name of another tensor of the frame with the
    same storage, to say "shares the storage of `a`" (never "a view of `a`": it is not `a`'s
    view). The tensor covering the base whole first, then one that is no view, then any."""
    base = t._base
    if base is None or id(base) in ids:
        return None
    covering = (whole if whole is not None else _whole_views(entries, ids)).get(id(base))
    del base
    if covering is not None:  # none when `t` itself covers it: the storage is in effect t's
        return covering if dict(entries)[covering] is not t else None
    try:
        key = _fast_key(t.untyped_storage())
    except _TORCH_ERRORS:
        return None
    found: str | None = None
    for name, x in entries:
        if x is t:
            continue
        try:
            same = _fast_key(x.untyped_storage()) == key
        except _TORCH_ERRORS:
            continue
        if same:
            if x._base is None:
                return name
            found = found or name
    return found


def _named_tensors(ns: dict[str, Any]) -> tuple[list[tuple[str, Any]], dict[int, str]]:
    """The frame's tensors (see `_frame_entries`) and, per object, the first name it has."""
    torch = _torch()
    entries = _frame_entries(ns, torch.Tensor, getattr(torch.nn, "Module", None))
    ids: dict[int, str] = {}
    for name, t in entries:
        ids.setdefault(id(t), name)
    return entries, ids


# ---------------------------------------------------------------- namespaces that name tensors


def _skip_frame(f: Any) -> bool:
    """A frame that is not the user's: the probe's own, the debugger's."""
    fn = f.f_code.co_filename
    name = f.f_globals.get("__name__")
    # Injected, the probe is one private module; imported in-process, its parts are named after
    # this file (probe_describe, probe_report).
    return ((type(name) is str and name.startswith((PRIVATE_NAME, __name__)))
            or "pydevd" in fn or "debugpy" in fn or fn.startswith("<stridelens"))


def _namespaces(ns: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """Namespaces whose names label tensors: the stopped frame's, __main__, module frames.

    Names are plain variable names (`losses`), as the user wrote them; the first one wins.
    Other function frames are not read here: in CPython <= 3.12, `frame.f_locals` snapshots the
    fast locals into a dict cached on the frame, which would keep objects alive after the
    function deletes them. Findings fall back to gc referrers (see `_referrer_names`).
    """
    out: list[tuple[str, dict[str, Any]]] = []
    if ns is not None:
        out.append(("", ns))
    main = sys.modules.get("__main__")
    if main is not None:
        out.append(("", vars(main)))
    frames = list(sys._current_frames().values())
    top: Any = None
    f: Any = None
    try:
        for top in frames:
            f = top
            while f is not None:
                if f.f_code.co_name == "<module>" and not _skip_frame(f) and f.f_globals is not getattr(main, "__dict__", None):
                    out.append(("", f.f_globals))
                f = f.f_back
    finally:
        # Our own frame is among them: holding it from a local makes a reference cycle that
        # would keep every tensor we touched alive until the next gc collection.
        del frames, top, f
    return out


def _namespace_dict_ids() -> set[int]:
    ids = {id(m.__dict__) for m in list(sys.modules.values()) if hasattr(m, "__dict__")}
    return ids


# ---------------------------------------------------------------- entry points (JSON out): see also probe_describe, probe_report


def setup() -> dict[str, Any]:
    """Speed up the DAP link and say what the target has."""
    nodelay = False
    try:
        import socket

        pydevd = sys.modules.get("pydevd")
        dbg = pydevd.get_global_debugger() if pydevd is not None else None
        sock = getattr(getattr(dbg, "writer", None), "sock", None)
        if sock is not None:
            # pydevd sends header and body separately: Nagle + delayed ACK cost ~45 ms each.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            nodelay = True
    except (OSError, AttributeError):  # a pydevd without this layout: just slower
        pass
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return {
        "pid": __import__("os").getpid(),
        "python": sys.version.split()[0],
        "torch": getattr(torch, "__version__", None),
        "cuda_available": bool(cuda.is_available()) if cuda is not None else False,
        "cuda_initialized": bool(cuda.is_initialized()) if cuda is not None else False,
        "tcp_nodelay": nodelay,
    }


def _evaluate(expr: str, globs: dict[str, Any], locs: dict[str, Any], error: type[Exception] = ProbeError) -> Any:
    """The value of the user's expression in the stopped frame. One that does not parse or that
    raises is an `error` with a message, never a traceback into the user's process."""
    try:
        code = compile(expr, "<stridelens-expr>", "eval")
    except SyntaxError as e:
        raise error(N_("not a Python expression: {expr} ({error})").format(expr=repr(expr), error=e.msg)) from None
    try:
        return eval(code, globs, locs)
    except Exception as e:  # noqa: BLE001 -- any error of the user's expression is reported
        raise error(N_("the expression raised {error}").format(error=f"{type(e).__name__}: {e}")) from None


def _json(fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        return _ENCODE({"ok": True, "result": fn(*args, **kwargs)})
    except ProbeError as e:
        return json.dumps({"ok": False, "error": str(e)})
    except Exception as e:  # noqa: BLE001 -- report it; never raise into the user's process
        return json.dumps({"ok": False, "error": N_("probe failed: {error}").format(error=f"{type(e).__name__}: {e}")})


def _json_text(fn: Any, *args: Any) -> str:
    """`_json` for a result that `fn` writes as JSON text itself."""
    try:
        return f'{{"ok": true, "result": {fn(*args)}}}'
    except ProbeError as e:
        return json.dumps({"ok": False, "error": str(e)})
    except Exception as e:  # noqa: BLE001 -- report it; never raise into the user's process
        return json.dumps({"ok": False, "error": N_("probe failed: {error}").format(error=f"{type(e).__name__}: {e}")})


def setup_json() -> str:
    return _json(setup)
