"""The frame report and the process report, part of the probe (see probe.py), run in the target.

- `frame_report`: the stopped frame's tensors grouped by the storage they share, with who is a
  view of whom;
- `process_report`: every live tensor on the heap grouped by storage, per-device totals, the
  top-N storages with their names, and the leak findings (graphs kept alive, views pinning big
  storages, gradients kept); its names come from namespaces, containers and gc referrers.
"""

from __future__ import annotations

import gc
import heapq
import sys
from collections import Counter
from functools import partial
from itertools import compress, islice, repeat
from operator import attrgetter, is_not, not_
from types import FrameType
from types import GetSetDescriptorType as GetSetType
from typing import Any

# Injected, this file runs after probe.py in the probe's one private module and uses its names as
# they are there; imported in-process, it takes them from stridelens.inspector.probe.
if __name__ != "_stridelens_probe":
    from stridelens.inspector.probe import (
        _TORCH_ERRORS,
        N_,
        PRIVATE_NAME,
        _extent,
        _fast_key,
        _human,
        _json,
        _named_tensors,
        _namespace_dict_ids,
        _namespaces,
        _safe,
        _skip_frame,
        _storage,
        _torch,
        _walk_graph,
        _whole_views,
    )


PIN_MIN_BYTES = 1 << 20  # a storage smaller than this is not worth a "view pins" finding
PIN_MAX_USED = 0.5  # ... nor one whose live views use at least this fraction
NAMED_LIMIT = 100  # names with the most bytes in a process report's `named` totals


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
    # Named as the base only when it is the base (`t._base is a`); a tensor that merely covers
    # an unnamed base (`a = arange(12).reshape(3, 4)`, `t = a.t()`) is `shares_storage_of`.
    view_of = ids.get(id(base)) if base is not None else None
    m["view_of"] = view_of if view_of != name else None
    # "" while unknown: filled from the storage group by `frame_report` (None: nothing to say,
    # the base is named, or this tensor covers the unnamed base whole).
    m["shares_storage_of"] = None
    if base is not None and view_of is None:
        covering = whole.get(id(base))
        m["shares_storage_of"] = "" if covering is None else (covering if covering != name else None)
    return m


def frame_report(ns: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    entries, ids = _named_tensors(ns)
    whole = _whole_views(entries, ids)
    groups: dict[str, dict[str, Any]] = {}
    objects: dict[str, set[int]] = {}  # storage key -> ids of the tensor objects in its group
    loose: list[dict[str, Any]] = []
    for name, t in entries:
        st = _storage(t) if t.layout == torch.strided else None
        if st is None:
            loose.append({"name": name, "layout": str(t.layout).replace("torch.", ""), "note": N_("no single strided storage")})
            continue
        g = groups.setdefault(st[0], {"storage_key": st[0], "device": st[2], "storage_bytes": st[1], "tensors": []})
        g["tensors"].append(_member(name, t, ids, whole))
        objects.setdefault(st[0], set()).add(id(t))
    t = None
    out = sorted(groups.values(), key=lambda g: -g["storage_bytes"])
    for g in out:
        for m in g["tensors"]:  # a view of an unnamed base: another name of its storage
            if m["shares_storage_of"] == "":
                m["shares_storage_of"] = next((o["name"] for o in g["tensors"] if o is not m and not o["is_view"]),
                                              next((o["name"] for o in g["tensors"] if o is not m), None))
        g["summary"] = _group_summary(g)
    one_object = {k for k, o in objects.items() if len(o) == 1}
    return {"groups": out, "rows": _item_rows(out, one_object), "no_storage": loose, "tensor_count": len(entries),
            "total_bytes": sum(g["storage_bytes"] for g in out)}


def _item(name: str) -> tuple[str, int] | None:
    """(`losses`, 3) for `losses[3]`; None for any other name (`x`, `d['k']`, `xs[-1]`)."""
    i = name.rfind("[")
    digits = name[i + 1:-1]
    if i < 1 or not name.endswith("]") or not (digits.isascii() and digits.isdigit()):
        return None
    return name[:i], int(digits)


RUN_MIN = 3  # items of one list alike and in a row shown as one row: `losses[0..19]`


def _item_rows(groups: list[dict[str, Any]], one_object: set[str]) -> list[dict[str, Any]]:
    """The frame table's rows, for every client alike: {"at": index in `groups`, "count", "name",
    "aliases"}. Storages of one tensor each, `losses[0]` … `losses[19]` of one shape, dtype,
    strides, offset and grad_fn, at least RUN_MIN of them at consecutive indices, are one row
    `losses[0..19]` (count 20, at the first one's place); an item that has other names too
    (`loss` is `losses[19]`: one object, keys of `one_object`) joins it, its other names in
    `aliases` ([["loss", "losses[19]"]]). Any other group is a row of its own (count 1, name None)."""
    members: dict[tuple[Any, ...], list[tuple[int, int, str]]] = {}  # alike -> (index, position, item name)
    for pos, g in enumerate(groups):
        ms = g["tensors"]
        if g["storage_key"] not in one_object or ms[0]["is_view"]:
            continue
        hit = next(((m["name"], it) for m in ms if (it := _item(m["name"])) is not None), None)
        if hit is None:
            continue
        item, (base, index) = hit
        m = ms[0]
        k = (base, g["storage_bytes"], g["device"], str(m["shape"]), m["dtype"], str(m["strides"]),
             m["storage_offset"], m["grad_fn"])
        members.setdefault(k, []).append((index, pos, item))
    runs: dict[int, dict[str, Any]] = {}  # position of a run's first row -> the row
    folded: set[int] = set()
    for k, items in members.items():
        items.sort()
        start = 0
        for end in range(1, len(items) + 1):
            if end < len(items) and items[end][0] == items[end - 1][0] + 1:
                continue
            run = items[start:end]
            if len(run) >= RUN_MIN:
                first = min(pos for _, pos, _ in run)
                aliases = [[m["name"], item] for _, pos, item in run for m in groups[pos]["tensors"]
                           if m["name"] != item]
                runs[first] = {"at": first, "count": len(run), "name": f"{k[0]}[{run[0][0]}..{run[-1][0]}]",
                               "aliases": aliases}
                folded.update(pos for _, pos, _ in run if pos != first)
            start = end
    return [runs.get(pos) or {"at": pos, "count": 1, "name": None, "aliases": []}
            for pos in range(len(groups)) if pos not in folded]


def _group_summary(g: dict[str, Any]) -> str:
    names = [m["name"] for m in g["tensors"]]
    size = f"{g['storage_bytes']}-byte" if g["storage_bytes"] < 10240 else _human(g["storage_bytes"])
    head = f"{names[0]} uses one {size} storage" if len(names) == 1 else f"{', '.join(names)} share one {size} storage"
    views = [
        f"{m['name']} is a view of {m['view_of']} at offset {m['storage_offset']}" if m["view_of"] else
        f"{m['name']} is a view of an unnamed base at offset {m['storage_offset']}"
        + (f" (it shares the storage of {m['shares_storage_of']}, not a view of it)"
           if m.get("shares_storage_of") else "")
        for m in g["tensors"] if m["is_view"]
    ]
    written = max((m["version"] or 0) for m in g["tensors"])
    if written and len(names) > 1:
        views.append(f"written in place {written} time{'s' if written > 1 else ''} "
                     "(every tensor sharing it sees the change)")
    return "; ".join([head, *views])


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
                    g = p.grad  # a leaf's .grad: no warning, and the walk's grad objects are these
                    if g is not None:
                        labels.setdefault(id(g), f"{label}.{pname}.grad")
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
    for d in devices.values():
        d["graph_saved_bytes"] = d["graph_only_bytes"]
    for k in by_graph:  # every storage a live graph saved, whether a tensor object also holds it
        if k in sbytes:
            device_row(device_of(k))["graph_saved_bytes"] += sbytes[k]
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        for dev, d in devices.items():
            if dev.startswith("cuda"):
                idx = int(dev.split(":")[1]) if ":" in dev else 0
                d["allocated"] = int(cuda.memory_allocated(idx))
                d["reserved"] = int(cuda.memory_reserved(idx))
                d["peak"] = int(cuda.max_memory_allocated(idx))

    # Saved storages among the top-N: the graph that saved them, by its outermost named root.
    graph_keys = {k for k in top_keys if groups[k].by_graph}
    graph_of: dict[int, str | None] = {}
    if graph_keys:
        named_roots: dict[int, list[tuple[str, Any]]] = {}  # component -> its named roots
        for t in graph_roots:
            root_name = _name_of(labels, id(t))
            if root_name is not None:
                named_roots.setdefault(root_component[id(t)], []).append((root_name, t))
        for comp, saved in component_saved.items():
            here = graph_keys.intersection(saved)
            if here:
                root = _outermost(named_roots.get(comp, []))
                for k in here:
                    graph_of[k] = root
        named_roots.clear()
    t = None

    top_groups = []
    for k in top_keys:
        g = groups[k]
        member_names = [n for n in (_name_of(labels, id(t)) for t in g.members) if n]
        top_groups.append({
            "storage_key": g.key_str(), "device": g.device, "bytes": g.nbytes,
            "tensors": len(g.members), "names": member_names[:8], "unnamed": len(g.members) - len(member_names),
            "used_bytes": _used_bytes(g, unnamed_bases) if g.members else g.nbytes,
            "saved_by_graph": g.by_graph, "graph_root": graph_of.get(k), "graph_line": None,
        })
    if graph_of and ns is not None:
        _graph_lines(top_groups, ns)
    report = {
        "tensor_count": len(tensors),
        "storage_count": len(sbytes) + len(graph_only),
        "no_storage_count": no_storage,
        "graph_roots": len(graph_roots),
        "graph_nodes": graph_nodes,
        "devices": sorted(devices.values(), key=lambda d: str(d["device"])),
        "top": top_groups,
        "top_rows": group_top_rows(top_groups),
        "findings": sorted(findings, key=lambda f: -f["bytes"]),
        **({"named": _named_totals(labels, named_ids, dict(zip(map(id, ts), keys, strict=True)), sbytes)}
           if named else {}),
    }
    groups.clear()
    return report


def group_top_rows(top: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The top-N table's rows, for every client alike: {"at": index in `top`, "count",
    "graph_root", "graphs"}. Storages no tensor object names, of one size, device and use, saved
    by one graph (`loss`) or by the graphs of one list's items (`losses[0]` … `losses[7]`: root
    `losses[0..7]`, 8 graphs), bound on one line, are one row at the first one's place:
    `8 × 256.0 KiB saved by `losses[0..7]`'s 8 graphs, from line 21`."""
    rows: list[dict[str, Any]] = []
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    items: dict[int, tuple[str, list[int]]] = {}  # id of a row -> its roots' list, their indices
    for i, g in enumerate(top):
        root = g.get("graph_root")
        item = _item(root) if root else None
        # What the row says: the unnamed count only where no graph root names the storage.
        key = (g["bytes"], g["device"], g["used_bytes"], g["saved_by_graph"], g.get("graph_line"),
               item[0] + "[]" if item else root, None if g["saved_by_graph"] and root else g["unnamed"])
        row = index.get(key) if not g["names"] else None
        if row is None:
            row = {"at": i, "count": 0, "graph_root": root, "graphs": 1 if root else 0}
            rows.append(row)
            if not g["names"]:
                index[key] = row
        row["count"] += 1
        if item:
            items.setdefault(id(row), (item[0], []))[1].append(item[1])
    for row in rows:
        base, xs = items.get(id(row), ("", []))
        distinct = sorted(set(xs))
        if len(distinct) > 1:
            row["graph_root"] = f"{base}[{_index_ranges(distinct)}]"
            row["graphs"] = len(distinct)
    return rows


def _index_ranges(xs: list[int]) -> str:
    """`0..7` for [0, …, 7], `0..3, 5` for [0, 1, 2, 3, 5] (sorted, distinct)."""
    out: list[str] = []
    start = 0
    for end in range(1, len(xs) + 1):
        if end < len(xs) and xs[end] == xs[end - 1] + 1:
            continue
        out.append(str(xs[start]) if end - start == 1 else f"{xs[start]}..{xs[end - 1]}")
        start = end
    return ", ".join(out)


_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's frame (fast locals)


def _stop_code(ns: dict[str, Any]) -> tuple[Any, int] | None:
    """(code, line) of the frame the client evaluates in, or None where that is not sure.

    The client passes `locals()` as `ns`: under pydevd, a fresh dict of the frame's globals and
    locals (plus `globals`), made in the stopped thread, which runs the evaluate under its own
    frames (the stopped frame is below them on this thread's stack); in a notebook, the user
    namespace, the globals of the cell that runs the magic. A frame matches when its globals are
    `ns`, or when `ns` holds all of its globals and, past them, only names its code binds, its
    arguments included. Frames' `f_locals` are never read (on Python <= 3.12 that snapshots a
    function's locals on its frame); two frames that match (a caller in the same module whose
    locals shadow globals) give None."""
    keys = ns.keys()
    found: list[tuple[Any, int]] = []
    f: Any = sys._getframe(1)
    try:
        while f is not None and len(found) < 2:
            # pydevd's `eval` of the client's expression (its globals are `ns`) is the debugger's.
            if not (_skip_frame(f) or (f.f_code.co_filename == "<string>" and f.f_back is not None
                                       and _skip_frame(f.f_back))):
                c = f.f_code
                g = f.f_globals
                if g is ns:
                    return c, f.f_lineno
                if g.keys() <= keys:
                    extra = keys - g.keys() - {"globals"}
                    if c.co_flags & _CO_OPTIMIZED:
                        own = {*c.co_varnames, *c.co_cellvars, *c.co_freevars}
                        args = c.co_varnames[:c.co_argcount + c.co_kwonlyargcount]
                        if extra <= own and keys >= set(args):
                            found.append((c, f.f_lineno))
                    elif not extra:
                        found.append((c, f.f_lineno))
            f = f.f_back
    finally:
        del f
    return found[0] if len(found) == 1 else None


_STORES = frozenset({"STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF"})
_GROWS = frozenset({"append", "extend", "insert"})


def _binding_line(code: Any, stop: int, name: str, container: bool) -> int | None:
    """The line of `code` that bound `name` (`loss = …`), or with `container`, that put an item
    into the list `name` (`losses.append(…)`, `losses[i] = …`, else `losses = [...]`, `losses +=
    …`): the last such line at or before `stop`, else the last one (the stop is above it in a loop)."""
    # The probe imports nothing in the target beyond what it has: torch has loaded `dis` (through
    # `inspect`); without it, no line.
    dis = sys.modules.get("dis")
    if dis is None:
        return None
    stores: set[int] = set()
    grows: set[int] = set()
    prev: Any = None
    before_prev: Any = None
    line: int | None = None
    for ins in dis.get_instructions(code):
        # The instruction's line: 3.13 `line_number`, 3.11 `positions`, 3.10 `starts_line` (an int
        # on an instruction that starts a line; a bool on 3.13).
        n = getattr(ins, "line_number", None) or getattr(getattr(ins, "positions", None), "lineno", None)
        if n is None and type(ins.starts_line) is int:
            n = ins.starts_line
        line = n or line
        if line is not None and ins.opname in _STORES and ins.argval == name:
            stores.add(line)
        elif line is not None and container and (
                # `losses.append(…)`: the list, then its method
                (ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and ins.argval in _GROWS
                 and prev is not None and prev.opname.startswith("LOAD_") and prev.argval == name)
                # `losses[i] = …`: the list, the index, then the store
                or (ins.opname == "STORE_SUBSCR" and before_prev is not None
                    and before_prev.opname.startswith("LOAD_") and before_prev.argval == name)):
            grows.add(line)
        before_prev, prev = prev, ins
    lines = grows or stores
    if not lines:
        return None
    before = [n for n in lines if n <= stop]
    return max(before) if before else max(lines)


def _graph_lines(top: list[dict[str, Any]], ns: dict[str, Any]) -> None:
    """Each top entry's `graph_line`: the stopped frame's line that bound its graph's root
    (`loss = …`), or that put the root into its list (`losses.append(loss)` for `losses[3]`);
    None where the frame has none, or which frame was stopped is not sure."""
    where = _stop_code(ns)
    if where is None:
        return
    code, stop = where
    found: dict[tuple[str, bool], int | None] = {}  # (name, a list's item) -> line
    for g in top:
        root = g["graph_root"]
        if not root:
            continue
        item = _item(root)
        k = (item[0], True) if item else (root, False)
        if not k[0].isidentifier():  # `model.out`, `history[2][0]`: no one name bound it
            continue
        if k not in found:
            try:
                found[k] = _binding_line(code, stop, *k)
            except (TypeError, ValueError, AttributeError):  # a code object dis cannot read
                found[k] = None
        g["graph_line"] = found[k]


def _outermost(roots: list[tuple[str, Any]]) -> str | None:
    """The name of the root no other root's graph reaches (`loss` of `h = tanh(x); loss = h.sum()`,
    not `h`); the first such name when several are."""
    if len(roots) < 2:
        return roots[0][0] if roots else None
    # Node wrappers are held while their ids are compared (a freed wrapper's id can be reused).
    fns = {id(fn): (name, fn) for name, fn in ((name, t.grad_fn) for name, t in roots)}
    inner: set[str] = set()
    for name, t in roots:
        seen: dict[int, Any] = {}
        stack = [t.grad_fn]
        while stack and len(seen) < 20000:
            node = stack.pop()
            for nxt, _ in getattr(node, "next_functions", ()):
                if nxt is None or id(nxt) in seen:
                    continue
                seen[id(nxt)] = nxt
                other = fns.get(id(nxt))
                if other is not None and other[0] != name:
                    inner.add(other[0])
                stack.append(nxt)
        del stack, node
        seen.clear()
    fns.clear()
    return next((name for name, _ in roots if name not in inner), roots[0][0])


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


def frame_report_json(ns: dict[str, Any]) -> str:
    return _json(frame_report, ns)


def process_report_json(top: int = 20, min_pin_bytes: int = PIN_MIN_BYTES,
                        ns: dict[str, Any] | None = None, frame_locals: bool = True,
                        named: bool = False) -> str:
    return _json(process_report, top, min_pin_bytes, ns, frame_locals, named)
