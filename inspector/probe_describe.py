"""`describe`: the card of one tensor, part of the probe (see probe.py), run in the target.

The card: layout facts, storage, view base, autograd state, the grad_fn chain (depth- and
size-limited) and what the whole graph behind the tensor saves; on CUDA, the allocator's view of
its storage; with `stats`, value statistics. `describe_json` writes it with one f-string, the
generic encoder's exact text (tests/inspector/test_describe_json.py), at a fraction of the cost.
"""

from __future__ import annotations

import json
from operator import attrgetter
from typing import Any

# Injected, this file runs after probe.py in the probe's one private module and uses its names as
# they are there; imported in-process, it takes them from stridelens.inspector.probe.
if __name__ != "_stridelens_probe":
    from stridelens.inspector.probe import (
        _ENCODE,
        _NO_SAVED_TENSORS,
        _TENSOR_ATTRS,
        _TORCH_ERRORS,
        GRAPH_NODE_LIMIT,
        N_,
        ProbeError,
        _custom_saved_tensors,
        _evaluate,
        _graph_saved_bytes,
        _human,
        _json_text,
        _named_tensors,
        _saved_tensors,
        _storage_sharer,
        _strided_format,
        _torch,
    )


CHAIN_DEPTH = 6  # grad_fn chain shown in `describe`
CHAIN_NODES = 24
# dtype -> its name without "torch.", torch.device -> str(device): torch's own value objects,
# never user data (str() of a device costs as much as four other facts of a tensor).
_DTYPE_NAMES: dict[Any, str] = {}
_DEVICES: dict[Any, tuple[str, str]] = {}  # torch.device -> (str(device), device.type)
# Autograd node type -> (its name, how a graph card reads its saved tensors): see `_node_info`.
_NODE_INFO: dict[type, tuple[str, Any]] = {}
_NOTHING = object()
_SLOW = object()
_ACCUMULATE = object()


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
    name, sharer = base["name"], base["shares_with"]
    return (f'{text}, "name": {"null" if name is None else _QUOTE(name)}, '
            f'"shares_with": {"null" if sharer is None else _QUOTE(sharer)}}}')


def _graph_text(graph: dict[str, Any]) -> str:
    ints = int.__repr__
    return (f'{{"nodes": {ints(graph["nodes"])}, "saved_tensors": {ints(graph["saved_tensors"])}, '
            f'"saved_storages": {ints(graph["saved_storages"])}, "saved_bytes": {ints(graph["saved_bytes"])}, '
            f'"problems": [{", ".join(map(_QUOTE, graph["problems"]))}]}}')


def describe_json(t: Any, stats: bool = False) -> str:
    return _json_text(_card_json, t, stats)


def describe_expr(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool = False) -> dict[str, Any]:
    """Evaluate the user's expression here, so a raising one is a message, not a traceback,
    and the tensor never becomes the debugger's evaluate result (pydevd keeps those alive)."""
    d = _expr_card(expr, globs, locs, stats)
    d["grad_fn_chain"] = _chain_dicts(d["grad_fn_chain"])
    return d


def _expr_card(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool) -> dict[str, Any]:
    value = _evaluate(expr, globs, locs)
    try:
        d = _card(value, stats)
        if d.get("base") is not None:
            d["base"]["name"], d["base"]["shares_with"] = _base_names(value, {**globs, **locs})
        return d
    finally:
        del value


def _base_name(t: Any, ns: dict[str, Any]) -> str | None:
    """The name in the stopped frame of `t`'s base itself (`t._base is a`); None when it has
    none there or it would be `t` itself."""
    return _base_names(t, ns)[0]


def _base_names(t: Any, ns: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the name of `t._base` in the frame, or None; when the base has no name, the name of
    another tensor of the frame sharing its storage, or None): `t = a.t()` with
    `a = arange(12).reshape(3, 4)` is a view of the unnamed arange result, and shares the
    storage of `a`."""
    entries, ids = _named_tensors(ns)
    base = t._base
    name = ids.get(id(base))
    del base
    if name is not None:
        return (name if dict(entries)[name] is not t else None), None
    return None, _storage_sharer(t, entries, ids)


def describe_expr_json(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool = False) -> str:
    return _json_text(_expr_card_json, expr, globs, locs, stats)


def _expr_card_json(expr: str, globs: dict[str, Any], locs: dict[str, Any], stats: bool) -> str:
    return _card_text(_expr_card(expr, globs, locs, stats))
