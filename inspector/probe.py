"""The probe: runs inside the debuggee and reads PyTorch's memory facts without changing them.

This module imports only the standard library. Its source is injected once per debuggee
(through a DAP `evaluate` of one `exec(compile(...))` expression) into a private module in
`sys.modules`, so it must not import stridelens, and it never imports torch itself: it uses the
torch the target already loaded (a target without torch gets a clear error instead of a 3 s
import with side effects).

Rules it keeps, because the debuggee is someone's live process:
- no device allocation, no CUDA synchronisation, no `_version` bumps, no autograd state change;
- never `.storage()` (TypedStorage warning flag) -- `untyped_storage()` only;
- `.grad` is read only where torch does not warn (leaves and `retains_grad` tensors);
- tensor data is read only for value statistics, and only when asked;
- results leave as JSON strings, never tensors (pydevd keeps evaluate results alive);
- no references kept: caches hold types and attribute names only.
"""

from __future__ import annotations

import gc
import heapq
import json
import sys
from collections import Counter
from functools import partial
from itertools import compress, islice, repeat
from operator import attrgetter, is_not, not_
from types import FrameType
from types import GetSetDescriptorType as GetSetType
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
CHAIN_DEPTH = 6  # grad_fn chain shown in `describe`
CHAIN_NODES = 24
GRAPH_NODE_LIMIT = 2_000_000  # bound on any autograd-graph walk
CONTAINER_ITEMS = 64  # tensors looked at inside one list/dict of a frame
PIN_MIN_BYTES = 1 << 20  # a storage smaller than this is not worth a "view pins" finding
PIN_MAX_USED = 0.5  # ... nor one whose live views use at least this fraction
NAMED_LIMIT = 100  # names with the most bytes in a process report's `named` totals

_SAVED_ATTRS: dict[type, tuple[str, ...]] = {}
# Per node type, the saved attributes that can hold a tensor (sizes, strides and scalars
# dropped after the first node of the type is read): half the getattr calls of a graph walk.
_TENSOR_ATTRS: dict[type, tuple[str, ...]] = {}
# What torch raises for facts a tensor kind does not have (sparse strides, nested sizes, a
# saved tensor already freed by backward, ...).
_TORCH_ERRORS = (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError)
# dtype -> its name without "torch.", torch.device -> str(device): torch's own value objects,
# never user data (str() of a device costs as much as four other facts of a tensor).
_DTYPE_NAMES: dict[Any, str] = {}
_DEVICES: dict[Any, tuple[str, str]] = {}  # torch.device -> (str(device), device.type)
# Node types without a `saved_tensors` attribute (every C++ node): no hasattr, which raises and
# catches an AttributeError inside torch, for each of their nodes.
_NO_SAVED_TENSORS: set[type] = set()
# Autograd node type -> (its name, how a graph card reads its saved tensors): see `_node_info`.
_NODE_INFO: dict[type, tuple[str, Any]] = {}
_NOTHING = object()
_SLOW = object()
_ACCUMULATE = object()


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


def _node_info(tp: type) -> tuple[str, Any]:
    """A node type's name and how a graph card reads its saved tensors: _ACCUMULATE for
    AccumulateGrad (neither counted nor walked further, as in `_walk_graph`), None until a node
    of the type has been read the slow way, then `_reader`'s answer."""
    name = tp.__name__
    return name, (_ACCUMULATE if name == "AccumulateGrad" else None)


def _reader(tp: type) -> Any:
    """How a graph card reads a node type's saved tensors once `_saved_tensors` has met one:
    (one C call returning the attributes that can hold a tensor, whether it returns just one),
    _NOTHING for a type that saves none, _SLOW for a custom Function (its `saved_tensors`)."""
    attrs = _TENSOR_ATTRS.get(tp, ())
    if not attrs:
        return _NOTHING if tp in _NO_SAVED_TENSORS else _SLOW
    return attrgetter(*attrs), len(attrs) == 1


def _graph_card(grad_fn: Any, tensor_type: type) -> tuple[list[tuple[str, int, tuple[str, ...]]], dict[str, Any]]:
    """The graph behind a tensor, for `describe`, in one breadth-first walk: the chain shown
    (depth- and size-limited) as (name, depth, next names) rows, and what the whole graph saves.

    The nodes, saved tensors and bytes are those of `_walk_graph` (the same nodes, met in
    another order). Where its depth-first order shows (the in-place problems, listed in the order
    met) or its node bound is reached, `_graph_saved_bytes` gives the graph's part instead.
    """
    # The set holds the node wrappers themselves (hashed by identity): no id is reused mid-walk.
    seen: set[Any] = set()
    rows: list[tuple[str, int, tuple[str, ...]]] = []
    saved: list[Any] = []
    problems: list[str] = []
    infos = _NODE_INFO
    limit = GRAPH_NODE_LIMIT
    level: Any = ((grad_fn, 0),)
    depth = nodes = 0
    listing = True  # the chain is still being listed: depth below CHAIN_DEPTH, under CHAIN_NODES
    while level:
        below: list[Any] = []
        for node, _ in level:
            if node is None or node in seen:
                continue
            if len(seen) >= limit:
                seen.clear()
                return rows, _graph_saved_bytes(grad_fn, tensor_type)
            seen.add(node)
            tp = type(node)
            info = infos.get(tp)
            if info is None:
                info = infos[tp] = _node_info(tp)
            name, read = info
            if read is _ACCUMULATE:
                if listing:
                    nexts = []
                    for n, _ in getattr(node, "next_functions", ()):
                        if n is not None:
                            nexts.append(type(n).__name__)
                    rows.append((name, depth, tuple(nexts)))
                    listing = len(rows) < CHAIN_NODES
                continue
            nodes += 1
            if read is _NOTHING:  # a C++ node type that saves no tensor
                pass
            elif read is None or read is _SLOW:
                saved += _saved_tensors(node, tensor_type, problems)
                if read is None:
                    infos[tp] = (name, _reader(tp))
            else:
                try:
                    vals = read[0](node)
                except _TORCH_ERRORS:  # freed by backward or modified in place: the slow path says which
                    saved += _saved_tensors(node, tensor_type, problems)
                else:
                    found = False
                    for v in ((vals,) if read[1] else vals):
                        tv = type(v)  # issubclass() on torch's tensor metaclass is the slow path
                        if tv is tensor_type or issubclass(tv, tensor_type):
                            saved.append(v)
                            found = True
                        elif isinstance(v, (list, tuple)) and v:
                            more = [x for x in v if issubclass(type(x), tensor_type)]
                            saved += more
                            found = found or bool(more)
                    if not found and tp not in _NO_SAVED_TENSORS:
                        saved += _custom_saved_tensors(node, tp, tensor_type, [])
            try:
                nxt = node.next_functions
            except AttributeError:
                continue
            if listing:
                nexts = []
                for n, _ in nxt:
                    if n is not None:
                        nexts.append(type(n).__name__)
                rows.append((name, depth, tuple(nexts)))
                listing = len(rows) < CHAIN_NODES
            below += nxt
        level = below
        depth += 1
        listing = listing and depth < CHAIN_DEPTH
    del node, level, below
    seen.clear()
    if problems:  # listed in the order of the depth-first walk
        saved.clear()
        return rows, _graph_saved_bytes(grad_fn, tensor_type)
    sizes: dict[int, int] = {}
    t = s = None
    for t in saved:
        try:
            s = t.untyped_storage()
        except _TORCH_ERRORS:
            continue
        key = s.data_ptr() or -s._cdata  # `_fast_key`
        if key not in sizes:
            sizes[key] = s.nbytes()
    count = len(saved)
    del saved, t, s
    return rows, {"nodes": nodes, "saved_tensors": count, "saved_storages": len(sizes),
                  "saved_bytes": sum(sizes.values()), "problems": problems}


# ---------------------------------------------------------------- describe


def _cuda_memory(t: Any, storage_bytes: int | None) -> dict[str, Any] | None:
    torch = _torch()
    if not t.is_cuda:
        return None
    idx = t.device.index
    # memory_allocated & co read the caching allocator's counters: no sync, no allocation.
    alloc = int(torch.cuda.memory_allocated(idx))
    return {
        "device": str(t.device),
        "allocated": alloc,
        "reserved": int(torch.cuda.memory_reserved(idx)),
        "peak": int(torch.cuda.max_memory_allocated(idx)),
        "share": (storage_bytes / alloc) if alloc and storage_bytes else None,
    }


def _stats(t: Any) -> dict[str, Any]:
    torch = _torch()
    with torch.no_grad():
        x = t.detach()
        if x.is_complex() or x.dtype == torch.bool or not x.numel():
            return {"numel": x.numel()}
        xf = x.float() if not x.is_floating_point() else x
        finite = torch.isfinite(xf)
        out: dict[str, Any] = {"nan": int(torch.isnan(xf).sum()), "inf": int((~finite & ~torch.isnan(xf)).sum())}
        if bool(finite.any()):
            vals = xf[finite]
            out.update(min=float(vals.min()), max=float(vals.max()), mean=float(vals.double().mean()))
        return out


def describe(t: Any, stats: bool = False) -> dict[str, Any]:
    """The card of one tensor: layout, storage, version, autograd state and graph (README: inspect)."""
    d = _card(t, stats)
    d["grad_fn_chain"] = _chain_dicts(d["grad_fn_chain"])
    return d


def _chain_dicts(rows: list[tuple[str, int, tuple[str, ...]]]) -> list[dict[str, Any]]:
    return [{"name": name, "depth": depth, "next": list(nexts)} for name, depth, nexts in rows]


def _card(t: Any, stats: bool) -> dict[str, Any]:
    """`describe`'s card with the grad_fn chain as `_graph_card`'s rows."""
    # One pass over the tensor, each fact read once (the device string feeds both "device" and
    # the storage key), inline try blocks instead of closures: the card of a plain tensor is
    # about 30 C calls. The unguarded reads keep their order, so an error names the same fact.
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise ProbeError(N_("not a tensor: the expression is a {type}").format(
            type=f"{type(t).__module__}.{type(t).__qualname__}"))
    tp = type(t)
    lay = t.layout
    strided = lay == torch.strided
    layout = "strided" if strided else str(lay).replace("torch.", "")
    try:
        shape: list[int] | None = list(t.shape)
    except _TORCH_ERRORS:
        shape = None
    dtype = t.dtype
    dtype_name = _DTYPE_NAMES.get(dtype)
    if dtype_name is None:
        dtype_name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    dev = t.device
    known = _DEVICES.get(dev)
    if known is None:
        known = _DEVICES[dev] = (str(dev), dev.type)
    device, device_type = known
    nested = bool(t.is_nested)
    quantized = bool(t.is_quantized)
    try:
        contiguous = t.is_contiguous()
    except _TORCH_ERRORS:
        contiguous = None
    memory_format = strides = offset = None
    if strided:
        if not nested and contiguous is not None:
            memory_format = "contiguous" if contiguous else _strided_format(t, torch)
        try:
            strides = list(t.stride())
        except _TORCH_ERRORS:
            strides = None
        try:
            offset = t.storage_offset()
        except _TORCH_ERRORS:
            offset = None
    numel = int(t.numel())
    element_size = int(t.element_size())
    nbytes = numel * element_size
    storage_key = storage_bytes = None
    notes: list[str] = []
    s = None
    if strided:
        try:
            s = t.untyped_storage()
        except _TORCH_ERRORS:  # sparse, mkldnn, some subclasses: no single storage
            s = None
    if s is None:
        notes.append(N_("{layout} tensor: no single strided storage").format(layout=layout))
    else:
        ptr = s.data_ptr()
        # Meta and empty storages all have data_ptr 0: the StorageImpl address tells them apart.
        storage_key = f"{device}@{ptr:#x}" if ptr else f"{device}#{s._cdata:#x}"
        storage_bytes = int(s.nbytes())
        del s
    if device_type == "meta":
        notes.append(N_("meta tensor: shape and strides only, no data"))
    base = t._base
    base_card = None
    if base is not None:
        try:
            base_offset = base.storage_offset()
        except _TORCH_ERRORS:
            base_offset = None
        base_card = {"shape": list(base.shape), "storage_offset": base_offset}
        del base
    if not nested:
        version: int | None = int(t._version)
    else:
        try:
            version = int(t._version)
        except _TORCH_ERRORS:
            version = None
    requires_grad = bool(t.requires_grad)
    is_leaf = bool(t.is_leaf)
    retains_grad = bool(t.retains_grad)
    # Reading .grad of a non-leaf that does not retain it prints a UserWarning in the target.
    g = t.grad if is_leaf or retains_grad else None
    grad = None if g is None else {"shape": list(g.shape), "dtype": str(g.dtype).replace("torch.", ""),
                                   "nbytes": g.numel() * g.element_size()}
    del g
    fn = t.grad_fn
    if fn is None:
        grad_fn = None
        chain: list[tuple[str, int, tuple[str, ...]]] = []
        graph = None
    else:
        grad_fn = type(fn).__name__
        chain, graph = _graph_card(fn, torch.Tensor)
        del fn
        notes.extend(graph["problems"])
    if contiguous is False and strided:
        notes.append(N_("not contiguous: .contiguous(), .view() fallbacks and conv/linear kernels "
                        "copy it first ({bytes} each time)").format(bytes=_human(nbytes)))
    return {
        "type": tp.__qualname__ if tp is torch.Tensor else f"{tp.__module__}.{tp.__qualname__}",
        "shape": shape,
        "dtype": dtype_name,
        "device": device,
        "layout": layout,
        "is_nested": nested,
        "is_quantized": quantized,
        "memory_format": memory_format,
        "strides": strides,
        "storage_offset": offset,
        "contiguous": contiguous,
        "numel": numel,
        "element_size": element_size,
        "nbytes": nbytes,
        "storage_key": storage_key,
        "storage_bytes": storage_bytes,
        "notes": notes,
        "is_view": base_card is not None,
        "base": base_card,
        "version": version,
        "requires_grad": requires_grad,
        "is_leaf": is_leaf,
        "retains_grad": retains_grad,
        "grad": grad,
        "grad_fn": grad_fn,
        "grad_fn_chain": chain,
        "graph": graph,
        "cuda": _cuda_memory(t, storage_bytes) if device_type == "cuda" else None,
        "stats": _stats(t) if stats else None,
    }


# ---------------------------------------------------------------- frame report


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
    id of the base -> that name, so `grid.t()` reads as a view of `grid`, not of "a base"."""
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


def _named_tensors(ns: dict[str, Any]) -> tuple[list[tuple[str, Any]], dict[int, str]]:
    """The frame's tensors (see `_frame_entries`) and, per object, the first name it has."""
    torch = _torch()
    entries = _frame_entries(ns, torch.Tensor, getattr(torch.nn, "Module", None))
    ids: dict[int, str] = {}
    for name, t in entries:
        ids.setdefault(id(t), name)
    return entries, ids


def _member(name: str, t: Any, ids: dict[int, str], whole: dict[int, str]) -> dict[str, Any]:
    m: dict[str, Any] = {
        "name": name,
        "shape": _safe(lambda: list(t.shape)),
        "dtype": str(t.dtype).replace("torch.", ""),
        "strides": _safe(lambda: list(t.stride())),
        "storage_offset": _safe(t.storage_offset),
        "contiguous": _safe(t.is_contiguous),
        "nbytes": t.numel() * t.element_size(),
        "requires_grad": bool(t.requires_grad),
        "grad_fn": type(t.grad_fn).__name__ if t.grad_fn is not None else None,
        "version": _safe(lambda: int(t._version)),
    }
    base = t._base
    m["is_view"] = base is not None
    view_of = None
    if base is not None:
        view_of = ids.get(id(base)) or whole.get(id(base))
    m["view_of"] = view_of if view_of != name else None
    return m


def frame_report(ns: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    entries, ids = _named_tensors(ns)
    whole = _whole_views(entries, ids)
    groups: dict[str, dict[str, Any]] = {}
    loose: list[dict[str, Any]] = []
    for name, t in entries:
        st = _storage(t) if t.layout == torch.strided else None
        if st is None:
            loose.append({"name": name, "layout": str(t.layout).replace("torch.", ""), "note": N_("no single strided storage")})
            continue
        g = groups.setdefault(st[0], {"storage_key": st[0], "device": st[2], "storage_bytes": st[1], "tensors": []})
        g["tensors"].append(_member(name, t, ids, whole))
    out = sorted(groups.values(), key=lambda g: -g["storage_bytes"])
    for g in out:
        g["summary"] = _group_summary(g)
    return {"groups": out, "no_storage": loose, "tensor_count": len(entries),
            "total_bytes": sum(g["storage_bytes"] for g in out)}


def _group_summary(g: dict[str, Any]) -> str:
    names = [m["name"] for m in g["tensors"]]
    size = f"{g['storage_bytes']}-byte" if g["storage_bytes"] < 10240 else _human(g["storage_bytes"])
    head = f"{names[0]} uses one {size} storage" if len(names) == 1 else f"{', '.join(names)} share one {size} storage"
    views = [
        f"{m['name']} is a view of {m['view_of'] or 'an unnamed base'} at offset {m['storage_offset']}"
        for m in g["tensors"] if m["is_view"]
    ]
    written = max((m["version"] or 0) for m in g["tensors"])
    if written and len(names) > 1:
        views.append(f"written in place {written} time{'s' if written > 1 else ''} "
                     "(every tensor sharing it sees the change)")
    return "; ".join([head, *views])


# ---------------------------------------------------------------- process report


def _skip_frame(f: Any) -> bool:
    fn = f.f_code.co_filename
    return (f.f_globals.get("__name__") == PRIVATE_NAME or f.f_globals is globals()
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


def _label_objects(torch: Any, ns: dict[str, Any] | None, tensor_types: set[type] | None = None,
                   held: dict[str, list[int]] | None = None) -> dict[int, Any]:
    """id(object) -> name for tensors and containers reachable one or two steps from names.

    With `held`, each named list/tuple/dict also gets the ids of the tensors in it (for totals
    per container). Items of large containers are labelled in C (compress/zip, no bytecode per
    item): a list of 1M tensors costs what reading it costs.
    """
    labels = _Labels()
    T = torch.Tensor
    tt = tensor_types if tensor_types is not None else {T, getattr(torch.nn, "Parameter", T)}
    is_tensor = tt.__contains__
    Module = getattr(torch.nn, "Module", None)
    Optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
    for prefix, space in _namespaces(ns):
        for name, v in list(space.items()):
            if name.startswith("__") or name == PRIVATE_NAME or type(v) is type(sys):
                continue
            label = prefix + name
            if id(v) in labels:
                continue
            if issubclass(type(v), T):
                labels[id(v)] = label
            elif type(v) in (list, tuple, dict):
                labels[id(v)] = label
                values = list(v.values()) if type(v) is dict else v
                picks = list(map(is_tensor, map(type, values)))
                keys: Any = v.keys() if type(v) is dict else range(len(v))
                if all(picks):  # only tensors (a list of a million): no compress passes
                    ids = list(map(id, values))
                else:
                    ids = list(compress(map(id, values), picks))
                    keys = compress(keys, picks)
                if not ids:
                    continue
                labels.containers.append((label, dict(zip(ids, keys, strict=True))))
                if held is not None:
                    held.setdefault(label, []).extend(ids)
            elif Module is not None and issubclass(type(v), Module):
                for pname, p in v.named_parameters():
                    labels.setdefault(id(p), f"{label}.{pname}")
                for bname, b in v.named_buffers():
                    labels.setdefault(id(b), f"{label}.{bname}")
            elif Optimizer is not None and issubclass(type(v), Optimizer):
                for i, (p, state) in enumerate(list(v.state.items())):
                    pl = _name_of(labels, id(p)) or f"param{i}"
                    for k, x in state.items():
                        if issubclass(type(x), T):
                            labels.setdefault(id(x), f"{label}.state[{pl}][{k!r}]")
    return labels


class _Labels(dict):  # type: ignore[type-arg]
    """id(object) -> name (a str, or (container name, key) formatted only when used).

    Items of named containers live in one {id: key} dict per container, consulted on lookup
    (few lookups: top-N members, bases, findings): a list of 1M tensors costs one dict built in
    C, not 1M label tuples merged here.
    The first name wins, as names are met (module parameters' names over container items).
    """

    def __init__(self) -> None:
        super().__init__()
        self.containers: list[tuple[str, dict[int, Any]]] = []

    def get(self, i: int, default: Any = None) -> Any:
        v = dict.get(self, i)
        if v is not None:
            return v
        for label, index in self.containers:
            if i in index:
                return (label, index[i])
        return default

    def __contains__(self, i: object) -> bool:
        return dict.__contains__(self, i) or any(i in index for _, index in self.containers)


def _referrer_names(objs: list[Any], labels: dict[int, Any], frame_locals: bool = True) -> dict[int, str]:
    """Name containers through the garbage collector's referrers (one gc pass for all)."""
    out: dict[int, str] = {}
    want = {id(o) for o in objs if id(o) not in labels}
    for o in objs:
        n = _name_of(labels, id(o))
        if n is not None:
            out[id(o)] = n
    if not want:
        return out
    refs = gc.get_referrers(*[o for o in objs if id(o) in want])
    for r in refs:
        if type(r) is dict:
            owner = "module " + r["__name__"] + "." if "__builtins__" in r and "__name__" in r else ""
            for k, v in r.items():
                if id(v) in want and id(v) not in out:
                    out[id(v)] = f"{owner}{k}" if issubclass(type(k), str) else f"[{k!r}]"
        elif type(r) is FrameType:
            if not frame_locals or _skip_frame(r):
                continue
            # Only frames that hold a finding's object are read (see `_namespaces`).
            for k, v in list(r.f_locals.items()):
                if id(v) in want and id(v) not in out:
                    out[id(v)] = k
        elif not issubclass(type(r), type) and type(getattr(type(r), "__dict__", {}).get("__dict__")) is GetSetType:
            for k, v in list(vars(r).items()):
                if id(v) in want and id(v) not in out:
                    out[id(v)] = f"{type(r).__name__}.{k}"
    del refs
    return out


def _namespace_dict_ids() -> set[int]:
    ids = {id(m.__dict__) for m in list(sys.modules.values()) if hasattr(m, "__dict__")}
    return ids


class _Group:
    """Tensors sharing one storage, found during a process walk."""

    __slots__ = ("by_graph", "device", "key", "members", "nbytes")

    def __init__(self, key: int, nbytes: int, device: str | None) -> None:
        self.key = key
        self.nbytes = nbytes
        self.device = device
        self.members: list[Any] = []
        self.by_graph = False

    def key_str(self) -> str:
        return f"{self.device}@{self.key:#x}" if self.key > 0 else f"{self.device}#{-self.key:#x}"


def _fast_key(s: Any) -> int:
    """A storage's data address; CPU and CUDA share one virtual address space. Meta and empty
    storages all have address 0: minus their StorageImpl address tells them apart."""
    return s.data_ptr() or -s._cdata


def _used_bytes(g: _Group, exclude: set[int]) -> int:
    intervals = []
    for t in g.members:
        if id(t) in exclude:
            continue
        try:
            intervals.append(_extent(t))
        except _TORCH_ERRORS:  # nested and other layouts: assume the whole storage
            intervals.append((0, g.nbytes))
    return _union(intervals)


def _name_of(labels: dict[int, Any], i: int) -> str | None:
    v = labels.get(i)
    if v is None or type(v) is str:
        return v
    return f"{v[0]}[{v[1]!r}]"


def process_report(top: int = 20, min_pin_bytes: int = PIN_MIN_BYTES,
                   ns: dict[str, Any] | None = None, frame_locals: bool = True,
                   named: bool = False) -> dict[str, Any]:
    """Every live tensor grouped by storage, per-device totals, top-N storages, named leaks.

    `ns` is the stopped frame's namespace (the client passes `locals()`), used for names.
    `frame_locals=False` never reads a function frame's locals (a snapshot on Python <= 3.12:
    see `_namespaces`); findings held only by a frame stay unnamed then. `named=True` adds the
    bytes per name over every storage (`named`: what periodic snapshots diff).
    """
    # The walk builds ~one small object per tensor; with the collector on, each generation-0
    # threshold triggers collections that traverse the whole heap (half the run time at 100k).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _process_report(top, min_pin_bytes, ns, frame_locals, named)
    finally:
        if was_enabled:
            gc.enable()


def _process_report(top: int, min_pin_bytes: int, ns: dict[str, Any] | None,
                    frame_locals: bool = True, named: bool = False) -> dict[str, Any]:
    torch = _torch()
    T = torch.Tensor
    # Where the time goes (100k small tensors, CPU time): the walk over gc.get_objects() and
    # one storage object per tensor dominate; every per-tensor fact is read with map() over a
    # C method (no bytecode per tensor), and per-storage Python work is done only for the
    # storages a report shows (top-N, pin candidates, storages graphs saved).
    objs = gc.get_objects()
    # type(), never isinstance: a lazy proxy's __class__ can run code. The tensor types are read
    # from the class tree (a dozen), not from the type of every object on the heap: one pass.
    tensor_types = _subclasses(T)
    tensors = list(compress(objs, map(tensor_types.__contains__, map(type, objs))))
    ts = tensors
    try:
        storages = list(map(T.untyped_storage, tensors))
    except _TORCH_ERRORS:  # sparse & co: no single storage
        storages = _storages_of(tensors)
        # `is` tests only: an empty storage is falsy, and == on a tensor is an elementwise op.
        has_storage = list(map(is_not, storages, repeat(None)))
        ts = list(compress(tensors, has_storage))
        storages = list(compress(storages, has_storage))
    no_storage = len(tensors) - len(ts)
    base = torch._C.StorageBase
    keys = list(map(base.data_ptr, storages))
    sbytes: dict[int, int] = dict(zip(keys, map(base.nbytes, storages), strict=True))
    dev_index = list(map(T.get_device, ts))  # -1 on CPU
    odd_code: dict[str, int] = {}  # address-0 storages' devices (meta, ...): their own codes
    if 0 in keys:
        del sbytes[0]
        for i in compress(range(len(keys)), map(not_, keys)):
            keys[i] = -storages[i]._cdata
            sbytes[keys[i]] = storages[i].nbytes()
            dev_index[i] = odd_code.setdefault(str(ts[i].device), -1000 - len(odd_code))
    del storages
    # A device name per device code, from one tensor that has it.
    dev_name = {i: str(ts[dev_index.index(i)].device) for i in set(dev_index)}
    extra_dev: dict[int, int] = {}  # storage key -> device code, for storages added below

    # Autograd state: only tensors that require grad need a closer look.
    rg = list(map(attrgetter("requires_grad"), ts))
    graph_roots: list[Any] = []
    grads: list[tuple[Any, Any]] = []
    for t in compress(ts, rg):
        if t.grad_fn is not None:
            graph_roots.append(t)
            if t.retains_grad and t.grad is not None:
                grads.append((t, t.grad))
        elif t.grad is not None:
            grads.append((t, t.grad))
    # Never require grad: leaves, .grad reads no warning. A grad there is rare: looked for in C
    # first, listed only when one is there.
    if any(map(is_not, map(attrgetter("grad"), compress(ts, map(not_, rg))), repeat(None))):
        plain = list(compress(ts, map(not_, rg)))
        grads.extend((t, g) for t, g in zip(plain, map(attrgetter("grad"), plain), strict=True) if g is not None)
        del plain
    del rg
    # Grads with no Python object before this walk (reading .grad made one): their storages,
    # unless a tensor seen above has the same storage.
    extra: dict[int, list[Any]] = {}
    t = None
    for _t, gr in grads:
        try:
            st = gr.untyped_storage()
        except _TORCH_ERRORS:
            continue
        key = _fast_key(st)
        if key not in sbytes or key in extra:
            if key not in sbytes:
                sbytes[key] = st.nbytes()
                dname = str(gr.device)
                code = gr.get_device() if key > 0 else odd_code.setdefault(dname, -1000 - len(odd_code))
                dev_name.setdefault(code, dname)
                extra_dev[key] = code
            extra.setdefault(key, []).append(gr)
        del st

    # Tensors saved by live autograd graphs (often no Python object holds them).
    graph_only: dict[int, tuple[int, str]] = {}  # storages no live tensor has
    by_graph: set[int] = set()
    seen_nodes: dict[int, Any] = {}
    root_saved: dict[int, dict[int, int]] = {}
    current: dict[int, int] = {}

    def on_saved(_node: Any, st: Any) -> None:
        try:
            s = st.untyped_storage()
        except _TORCH_ERRORS:
            return
        key = _fast_key(s)
        nbytes = sbytes.get(key)
        if nbytes is None:
            got = graph_only.get(key)
            if got is None:
                got = graph_only[key] = (s.nbytes(), str(st.device))
            nbytes = got[0]
        by_graph.add(key)
        current[key] = nbytes

    owner: dict[int, int] = {}  # node id -> index of the root whose walk reached it first
    parent: list[int] = []  # union-find over roots: graphs sharing nodes are one graph

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, t in enumerate(graph_roots):
        parent.append(i)
        current = {}
        touched: set[int] = set()
        fn = t.grad_fn
        _walk_graph(fn, seen_nodes, T, on_saved, owner, i, touched)
        del fn
        for j in touched:
            parent[find(j)] = find(i)
        root_saved[id(t)] = current
    root_component = {id(t): find(i) for i, t in enumerate(graph_roots)}
    component_saved: dict[int, dict[int, int]] = {}
    for rid, comp in root_component.items():
        component_saved.setdefault(comp, {}).update(root_saved[rid])
    graph_nodes = len(seen_nodes)
    seen_nodes.clear()
    owner.clear()

    one_device = len(dev_name) == 1
    key_dev: dict[int, int] = {} if one_device else {**dict(zip(keys, dev_index, strict=True)), **extra_dev}
    only_name = next(iter(dev_name.values()), "cpu")

    def device_of(key: int) -> str:
        return only_name if one_device else dev_name[key_dev[key]]

    # The storages the report shows get their tensors: the top-N and the pin candidates.
    top_keys = _largest(max(0, top), sbytes, {k: v[0] for k, v in graph_only.items()})
    wanted = {k for k, n in sbytes.items() if n >= min_pin_bytes} if min_pin_bytes > 0 else set(sbytes)
    wanted.update(top_keys)
    groups: dict[int, _Group] = {}
    for k in wanted:
        graph_dev = graph_only.get(k)
        g = groups[k] = (_Group(k, sbytes[k], device_of(k)) if graph_dev is None
                         else _Group(k, graph_dev[0], graph_dev[1]))
        g.by_graph = k in by_graph
    for i in compress(range(len(keys)), map(wanted.__contains__, keys)):
        groups[keys[i]].members.append(ts[i])
    for k, more in extra.items():
        if k in groups:
            groups[k].members.extend(more)
    n_extra = [extra_dev.get(k, key_dev.get(k, -1)) for k, more in extra.items() for _ in more]
    del wanted, extra

    named_ids: dict[str, list[int]] = {}
    labels = _label_objects(torch, ns, tensor_types, named_ids)
    findings: list[dict[str, Any]] = []

    # Containers (lists, dicts, deques) holding tensors of several separate graphs.
    containers: list[tuple[Any, list[int]]] = []
    if graph_roots:
        ns_dicts = _namespace_dict_ids()
        deque_t = type(sys.modules["collections"].deque()) if "collections" in sys.modules else None
        kinds = {list, dict, deque_t}
        in_graph = root_component.__contains__
        for o in compress(objs, map(kinds.__contains__, map(type, objs))):
            if type(o) is dict:
                if id(o) in ns_dicts:
                    continue
                held = list(filter(in_graph, map(id, o.values())))
            else:
                held = list(filter(in_graph, map(id, o)))
            # Several separate graphs, not one graph's tensors (like `out` and `loss`).
            if len(held) >= 2 and len({root_component[i] for i in held}) >= 2:
                containers.append((o, held))
    del objs

    # Views pinning a large storage: the tensors with names (or no view's base) use little of it.
    # A base kept alive only by its views' `_base` does not count as a user of the storage.
    # A view and its base share a storage: the bases that matter are those of the shown groups'
    # members (`_base` read for those only; the list keeps the bases' wrappers, so ids stay unique).
    bases = list(filter(partial(is_not, None), map(attrgetter("_base"), [t for g in groups.values() for t in g.members])))
    unnamed_bases = {i for i in map(id, bases) if i not in labels}
    pins: list[tuple[_Group, int, Any]] = []
    for g in groups.values():
        if g.nbytes < min_pin_bytes or not g.members or g.by_graph:
            continue
        used = _used_bytes(g, unnamed_bases)
        if used < PIN_MAX_USED * g.nbytes:
            users = [t for t in g.members if id(t) not in unnamed_bases]
            pins.append((g, used, users[0] if users else g.members[0]))
    grad_owners = [(t, gr) for t, gr in grads if (not t.is_leaf and t.retains_grad) or not t.requires_grad]
    grads = []

    # One gc pass names whatever the namespaces above did not.
    names = _referrer_names([c for c, _ in containers] + [t for _, _, t in pins]
                            + [t for t, _ in grad_owners], labels, frame_locals)

    for c, held in containers:
        name = names.get(id(c))
        if type(c) is dict and name is None:
            continue  # an object's attribute dict or similar namespace, not a container
        saved: dict[int, int] = {}
        for comp in {root_component[i] for i in held}:
            saved.update(component_saved[comp])
        nbytes = sum(saved.values())
        kind = type(c).__name__
        who = name or N_("an unnamed {kind}").format(kind=kind)
        findings.append({
            "kind": "graph_kept_alive",
            "container": who,
            "container_type": kind,
            "length": len(c),
            "graph_tensors": len(held),
            "bytes": nbytes,
            "message": N_("{who} ({kind} of {length}) keeps {graphs} autograd graphs alive holding "
                          "{bytes} of saved tensors; store .item() or .detach() instead").format(
                who=who, kind=kind, length=len(c), graphs=len(held), bytes=_human(nbytes)),
        })
    containers = []

    for g, used, t in pins:
        who = names.get(id(t)) or N_("an unnamed tensor")
        findings.append({
            "kind": "view_pins_storage",
            "tensor": who,
            "storage_key": g.key_str(),
            "device": g.device,
            "used_bytes": used,
            "bytes": g.nbytes,
            "message": N_("{who} uses {used} of a {total} storage it keeps alive ({percent}% used); "
                          ".clone() it to free {free}").format(
                who=who, used=_human(used), total=_human(g.nbytes), percent=f"{100.0 * used / g.nbytes:.2g}",
                free=_human(g.nbytes - used)),
        })
    pins = []

    for t, gr in grad_owners:
        gbytes = gr.numel() * gr.element_size()
        who = names.get(id(t)) or N_("an unnamed tensor")
        if not t.is_leaf and t.retains_grad:
            findings.append({"kind": "retained_grad", "tensor": who, "bytes": gbytes,
                             "message": N_("{who} (non-leaf) retains its grad: {bytes}").format(
                                 who=who, bytes=_human(gbytes))})
        else:
            findings.append({"kind": "stale_grad", "tensor": who, "bytes": gbytes,
                             "message": N_("{who}.grad holds {bytes} though {who} no longer requires "
                                           "grad; set it to None").format(who=who, bytes=_human(gbytes))})
    grad_owners = []
    t = gr = None

    # Totals per device, and the allocator's own count where CUDA is initialised.
    devices: dict[str, dict[str, Any]] = {}

    def device_row(name: str) -> dict[str, Any]:
        d = devices.get(name)
        if d is None:
            d = devices[name] = {"device": name, "storages": 0, "tensors": 0, "bytes": 0, "graph_only_bytes": 0}
        return d

    if one_device and sbytes:
        device_row(only_name).update(storages=len(sbytes), tensors=len(ts) + len(n_extra), bytes=sum(sbytes.values()))
    elif sbytes:
        for k, nbytes in sbytes.items():
            d = device_row(device_of(k))
            d["storages"] += 1
            d["bytes"] += nbytes
        for code, n in Counter(dev_index + n_extra).items():
            device_row(dev_name[code])["tensors"] += n
    for nbytes, dev in graph_only.values():
        d = device_row(dev)
        d["storages"] += 1
        d["bytes"] += nbytes
        d["graph_only_bytes"] += nbytes
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        for dev, d in devices.items():
            if dev.startswith("cuda"):
                idx = int(dev.split(":")[1]) if ":" in dev else 0
                d["allocated"] = int(cuda.memory_allocated(idx))
                d["reserved"] = int(cuda.memory_reserved(idx))
                d["peak"] = int(cuda.max_memory_allocated(idx))

    top_groups = []
    for k in top_keys:
        g = groups[k]
        member_names = [n for n in (_name_of(labels, id(t)) for t in g.members) if n]
        top_groups.append({
            "storage_key": g.key_str(), "device": g.device, "bytes": g.nbytes,
            "tensors": len(g.members), "names": member_names[:8], "unnamed": len(g.members) - len(member_names),
            "used_bytes": _used_bytes(g, unnamed_bases) if g.members else g.nbytes,
            "saved_by_graph": g.by_graph,
        })
    report = {
        "tensor_count": len(tensors),
        "storage_count": len(sbytes) + len(graph_only),
        "no_storage_count": no_storage,
        "graph_roots": len(graph_roots),
        "graph_nodes": graph_nodes,
        "devices": sorted(devices.values(), key=lambda d: str(d["device"])),
        "top": top_groups,
        "findings": sorted(findings, key=lambda f: -f["bytes"]),
        **({"named": _named_totals(labels, named_ids, dict(zip(map(id, ts), keys, strict=True)), sbytes)}
           if named else {}),
    }
    groups.clear()
    return report


def _subclasses(cls: type) -> set[type]:
    """`cls` and every class deriving from it (`type.__subclasses__`: a metaclass cannot hide
    them), the classes whose instances `issubclass(type(o), cls)` finds."""
    out = {cls}
    stack = [cls]
    while stack:
        subs: list[type] = type.__subclasses__(stack.pop())
        for sub in subs:
            if sub not in out:
                out.add(sub)
                stack.append(sub)
    return out


def _named_totals(labels: dict[int, Any], held: dict[str, list[int]], key_of: dict[int, int],
                  sbytes: dict[int, int], limit: int = NAMED_LIMIT) -> list[dict[str, Any]]:
    """Bytes per name over every storage (not only the top-N): `history` sums the storages of
    all tensors in it; a storage counts once per name. The `limit` largest names."""
    per: dict[str, set[Any]] = {}
    for oid, label in labels.items():
        if type(label) is str and oid in key_of:
            per.setdefault(label.split("[", 1)[0], set()).add(key_of[oid])
    rows = []
    for name, ks in per.items():
        rows.append({"name": name, "container": "[" in name, "storages": len(ks),
                     "bytes": sum(map(sbytes.__getitem__, ks))})
    for name, ids in held.items():
        ks = set(map(key_of.get, ids))
        ks.discard(None)
        rows.append({"name": name, "container": True, "storages": len(ks),
                     "bytes": sum(map(sbytes.__getitem__, ks))})
    return heapq.nlargest(limit, rows, key=lambda r: r["bytes"])


def _largest(n: int, sizes: dict[int, int], more: dict[int, int]) -> list[int]:
    """The keys of the n largest sizes, largest first (ties in dict order), without a
    per-key Python comparison: one C sort of the values, then C filters at the threshold."""
    if not n:
        return []
    values = sorted([*sizes.values(), *more.values()], reverse=True)
    if len(values) <= n:
        both = {**more, **sizes}
        return sorted(both, key=both.__getitem__, reverse=True)
    cut = values[n - 1]
    out: list[int] = []
    for d in (sizes, more):
        out.extend(compress(d.keys(), map(cut.__lt__, d.values())))
    for d in (sizes, more):
        out.extend(islice(compress(d.keys(), map(cut.__eq__, d.values())), max(0, n - len(out))))
    both = {k: sizes[k] if k in sizes else more[k] for k in out}
    return sorted(out, key=both.__getitem__, reverse=True)[:n]


def _storages_of(tensors: list[Any]) -> list[Any]:
    """Each tensor's untyped storage, None where it has none (sparse, mkldnn, ...)."""
    try:
        return list(map(_torch().Tensor.untyped_storage, tensors))
    except _TORCH_ERRORS:
        out = []
        for t in tensors:
            try:
                out.append(t.untyped_storage())
            except _TORCH_ERRORS:
                out.append(None)
        return out


def _union(intervals: list[tuple[int, int]]) -> int:
    total = 0
    end = -1
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


# ---------------------------------------------------------------- entry points (JSON out)


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


# A card is written by one f-string, keys in `_card`'s order: the generic encoder spends most of a
# card's microseconds on keys and on the chain's small dicts, `%` formatting half as much again.
# `_card_text` writes the text `_ENCODE(describe(t))` writes (tests/inspector/test_describe_json.py).
_LITERALS = {True: "true", False: "false", None: "null"}
_QUOTE = json.encoder.encode_basestring_ascii  # what _ENCODE writes a str as


class _Quoted(dict):  # type: ignore[type-arg]
    """A str -> its JSON text, for the few names a process's cards repeat (dtypes, devices,
    layouts, tensor types, memory formats): an item lookup costs less than the encoder call."""

    def __missing__(self, name: str) -> str:
        text = self[name] = _QUOTE(name)
        return text


_QUOTED = _Quoted()
CHAIN_TEXTS_KEPT = 256
_CHAIN_TEXTS: dict[tuple[tuple[str, int, tuple[str, ...]], ...], str] = {}


def _chain_text(rows: list[tuple[str, int, tuple[str, ...]]]) -> str:
    """The chain's JSON, remembered by its rows: a training loop's loss has the same chain at
    every step. The rows hold node type names only, never a node or a tensor."""
    key = tuple(rows)
    text = _CHAIN_TEXTS.get(key)
    if text is None:
        q = _QUOTE
        entries = []
        for name, depth, nexts in rows:
            names = ", ".join(map(q, nexts))
            entries.append(f'{{"name": {q(name)}, "depth": {depth:d}, "next": [{names}]}}')
        text = "[" + ", ".join(entries) + "]"
        if len(_CHAIN_TEXTS) >= CHAIN_TEXTS_KEPT:
            _CHAIN_TEXTS.clear()
        _CHAIN_TEXTS[key] = text
    return text


def _card_json(t: Any, stats: bool) -> str:
    return _card_text(_card(t, stats))


def _card_text(d: dict[str, Any]) -> str:
    """`_card`'s card as JSON. A value of a kind the f-string does not write (a symbolic size)
    goes to the generic encoder, whose error is the one reported."""
    names = _QUOTED
    lit = _LITERALS
    enc = _ENCODE
    ints = int.__repr__
    try:
        shape, strides, fmt, offset = d["shape"], d["strides"], d["memory_format"], d["storage_offset"]
        key, size, version, fn, graph = d["storage_key"], d["storage_bytes"], d["version"], d["grad_fn"], d["graph"]
        base, grad, cuda, st, notes = d["base"], d["grad"], d["cuda"], d["stats"], d["notes"]
        shape_text = "null" if shape is None else "[" + ", ".join(map(ints, shape)) + "]"
        strides_text = "null" if strides is None else "[" + ", ".join(map(ints, strides)) + "]"
        notes_text = ", ".join(map(_QUOTE, notes)) if notes else ""
        return (
            f'{{"type": {names[d["type"]]}, "shape": {shape_text}, '
            f'"dtype": {names[d["dtype"]]}, "device": {names[d["device"]]}, "layout": {names[d["layout"]]}, '
            f'"is_nested": {lit[d["is_nested"]]}, "is_quantized": {lit[d["is_quantized"]]}, '
            f'"memory_format": {"null" if fmt is None else names[fmt]}, "strides": {strides_text}, '
            f'"storage_offset": {"null" if offset is None else ints(offset)}, '
            f'"contiguous": {lit[d["contiguous"]]}, "numel": {ints(d["numel"])}, '
            f'"element_size": {ints(d["element_size"])}, "nbytes": {ints(d["nbytes"])}, '
            f'"storage_key": {"null" if key is None else _QUOTE(key)}, '
            f'"storage_bytes": {"null" if size is None else ints(size)}, '
            f'"notes": [{notes_text}], "is_view": {lit[d["is_view"]]}, '
            f'"base": {"null" if base is None else _base_text(base)}, '
            f'"version": {"null" if version is None else ints(version)}, '
            f'"requires_grad": {lit[d["requires_grad"]]}, "is_leaf": {lit[d["is_leaf"]]}, '
            f'"retains_grad": {lit[d["retains_grad"]]}, "grad": {"null" if grad is None else enc(grad)}, '
            f'"grad_fn": {"null" if fn is None else names[fn]}, "grad_fn_chain": {_chain_text(d["grad_fn_chain"])}, '
            f'"graph": {"null" if graph is None else _graph_text(graph)}, '
            f'"cuda": {"null" if cuda is None else enc(cuda)}, "stats": {"null" if st is None else enc(st)}}}'
        )
    except (TypeError, ValueError, KeyError):
        d["grad_fn_chain"] = _chain_dicts(d["grad_fn_chain"])
        return enc(d)


def _base_text(base: dict[str, Any]) -> str:
    """A view's base: shape and offset, and in `describe_expr` its name in the frame."""
    offset = base["storage_offset"]
    text = (f'{{"shape": [{", ".join(map(int.__repr__, base["shape"]))}], '
            f'"storage_offset": {"null" if offset is None else int.__repr__(offset)}')
    if "name" not in base:
        return text + "}"
    name = base["name"]
    return f'{text}, "name": {"null" if name is None else _QUOTE(name)}}}'


def _graph_text(graph: dict[str, Any]) -> str:
    ints = int.__repr__
    return (f'{{"nodes": {ints(graph["nodes"])}, "saved_tensors": {ints(graph["saved_tensors"])}, '
            f'"saved_storages": {ints(graph["saved_storages"])}, "saved_bytes": {ints(graph["saved_bytes"])}, '
            f'"problems": [{", ".join(map(_QUOTE, graph["problems"]))}]}}')


def setup_json() -> str:
    return _json(setup)


def describe_json(t: Any, stats: bool = False) -> str:
    return _json_text(_card_json, t, stats)


def describe_expr(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool = False) -> dict[str, Any]:
    """Evaluate the user's expression here, so a raising one is a message, not a traceback,
    and the tensor never becomes the debugger's evaluate result (pydevd keeps those alive)."""
    d = _expr_card(expr, globs, locs, stats)
    d["grad_fn_chain"] = _chain_dicts(d["grad_fn_chain"])
    return d


def _expr_card(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool) -> dict[str, Any]:
    try:
        code = compile(expr, "<stridelens-expr>", "eval")
    except SyntaxError as e:
        raise ProbeError(N_("not a Python expression: {expr} ({error})").format(expr=repr(expr), error=e.msg)) from None
    try:
        value = eval(code, globs, locs)
    except Exception as e:  # noqa: BLE001 -- any error of the user's expression is reported
        raise ProbeError(N_("the expression raised {error}").format(error=f"{type(e).__name__}: {e}")) from None
    try:
        d = _card(value, stats)
        if d.get("base") is not None:
            d["base"]["name"] = _base_name(value, {**globs, **locs})
        return d
    finally:
        del value


def _base_name(t: Any, ns: dict[str, Any]) -> str | None:
    """The name in the stopped frame of `t`'s base, or of a tensor covering that base whole
    (see `_whole_views`); None when neither exists or it would be `t` itself."""
    entries, ids = _named_tensors(ns)
    base = t._base
    name = ids.get(id(base)) or _whole_views(entries, ids).get(id(base))
    del base
    return name if name is not None and dict(entries)[name] is not t else None


def describe_expr_json(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool = False) -> str:
    return _json_text(_expr_card_json, expr, globs, locs, stats)


def _expr_card_json(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool) -> str:
    return _card_text(_expr_card(expr, globs, locs, stats))


def frame_report_json(ns: dict[str, Any]) -> str:
    return _json(frame_report, ns)


def process_report_json(top: int = 20, min_pin_bytes: int = PIN_MIN_BYTES,
                        ns: dict[str, Any] | None = None, frame_locals: bool = True,
                        named: bool = False) -> str:
    return _json(process_report, top, min_pin_bytes, ns, frame_locals, named)
