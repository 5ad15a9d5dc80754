"""The step-diff probe behind `inspect --diff-steps N`: runs inside the debuggee.

Injected like the gradient probe (its source evaluated into the private module
`_stridelens_diff`), after the probe (`_stridelens_probe`), whose storage keys, graph walk and
names it reuses. Three calls, one per kind of stop:

- `begin` (the first stop): every live storage (tensors found by a gc walk, gradients, tensors
  saved by live autograd graphs) with its bytes and what keeps it; kept here until `end`.
- `sample` (each hit in between): the same walk, to see when new storages appear and how
  each keeper's bytes move from step to step.
- `end` (the N-th hit after the first): the same walk, then every keeper's bytes at every stop
  and the storages new since the first; the state is dropped.

What is kept between the stops is ints and strings (storage keys, bytes, keeper names), never a
tensor or a weak reference, so the target's objects live and die as they would without us. A
run that never reaches its second stop (a timeout while the target runs) leaves that record
until the next `begin` replaces it; a failed `sample` is followed by `reset`.
A storage is "new" when its key (address and device) was not live at the first stop, or was
kept by something else then (an address freed and reused by another keeper); an address freed
and reused by the same keeper reads as old, which only hides churn, not growth: growth is
measured per keeper, as bytes at each stop.

Like the probe it imports only the standard library; torch is the target's own.
"""

from __future__ import annotations

import gc
import json
import sys
from functools import partial
from itertools import compress, groupby, repeat
from operator import attrgetter, is_, not_
from types import FrameType
from typing import Any

PRIVATE_NAME = "_stridelens_diff"
FILENAME = "<stridelens-diff-probe>"
PROBE_NAME = "_stridelens_probe"  # stridelens.inspector.probe.PRIVATE_NAME (no stridelens import here)

# Keeper kinds, in the order a storage is claimed when several things hold it.
VARIABLE, MODULE, GRADIENT, OPTIMIZER, CONTAINER, GRAPH, OTHER = (
    "variable", "module", "gradient", "optimizer_state", "container", "graph", "unnamed")

_state: dict[str, Any] = {}  # between begin and end; see the module docstring
# Py_TPFLAGS_MANAGED_DICT: the type's instances can keep attribute values inline (Python >= 3.11)
_MANAGED_DICT = 1 << 4 if sys.version_info >= (3, 11) else 0


def N_(message: str) -> str:
    """Marks an English template for the catalogue (no stridelens import here; see probe.N_)."""
    return message


class DiffError(Exception):
    """A problem to report to the user as a message (not a traceback)."""


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        raise DiffError(N_("the target process has not imported torch"))
    return torch


def _probe() -> Any:
    p = sys.modules.get(PROBE_NAME)
    if p is None:
        raise DiffError(N_("the stridelens probe is not loaded in the target"))
    return p


def _key_of_storage(s: Any) -> int:
    # CPU and CUDA share one virtual address space; meta and empty storages all have address 0:
    # minus their StorageImpl address tells them apart.
    return int(s.data_ptr()) or -int(s._cdata)


class _Live:
    """One walk: storage key -> bytes and device, and which tensor objects hold which storage.

    Per-tensor facts are read with map() over C methods (no bytecode per tensor): 100k tensors
    cost about what reading them costs."""

    def __init__(self, torch: Any, probe: Any) -> None:
        T = torch.Tensor
        self.errors = probe._TORCH_ERRORS
        self.bytes: dict[int, int] = {}
        self.device: dict[int, int] = {}  # storage key -> device code (get_device(); own codes for address 0)
        self.dev_name: dict[int, str] = {}
        self._odd: dict[str, int] = {}
        self.key_of: dict[int, int] = {}  # id(tensor object) -> storage key
        self.grad_owner: dict[int, Any] = {}  # id(grad) -> the leaf it belongs to
        self.graph_root: dict[int, Any] = {}  # storage only a graph saved -> that graph's root tensor
        self.objs: list[Any] = gc.get_objects()
        self.types: list[type] = list(map(type, self.objs))  # type(), never isinstance (lazy proxies)
        self.tensor_types = {tp for tp in set(self.types) if issubclass(tp, T)}
        tensors = list(compress(self.objs, map(self.tensor_types.__contains__, self.types)))
        self.tensor_count = len(tensors)
        self._add(T, tensors)
        wants_grad = list(compress(tensors, map(attrgetter("requires_grad"), tensors)))
        roots = [t for t in wants_grad if t.grad_fn is not None]
        grads = []
        t = g = None
        for t in wants_grad:
            if t.grad_fn is None and t.is_leaf:
                g = t.grad
                if g is not None:
                    self.grad_owner[id(g)] = t
                    grads.append(g)
        del t, g, wants_grad
        self._add(T, grads)
        del grads, tensors
        self.root_tensors = roots
        self.roots = len(roots)
        self._probe, self._T = probe, T

    def walk_graphs(self, first: Any) -> None:
        """Add the storages the graphs saved, each claimed by the first root (in the order
        `first` gives) whose walk reaches it: a named root before a saved tensor's wrapper."""
        held = set(self.bytes)
        seen: dict[int, Any] = {}
        walking: list[Any] = [None]  # the root whose graph is being walked

        def on_saved(_node: Any, st: Any) -> None:
            try:
                s = st.untyped_storage()
            except self.errors:
                return
            k = _key_of_storage(s)
            if k in self.graph_root:
                return
            # Saved tensors whose wrapper a walk created (torch keeps it as long as the graph)
            # are gc-visible tensors too: graph-kept, whether or not they are in `held`.
            self.graph_root[k] = walking[0]
            if k not in held:
                self.bytes[k] = int(s.nbytes())
                code = st.get_device() if k > 0 else self.odd_code(str(st.device))
                self.device[k] = code
                self.dev_name.setdefault(code, str(st.device))

        for r in sorted(self.root_tensors, key=first):
            walking[0] = r
            self._probe._walk_graph(r.grad_fn, seen, self._T, on_saved)
        seen.clear()
        walking.clear()
        self.root_tensors = []

    def _add(self, T: Any, ts: list[Any]) -> None:
        try:
            storages = list(map(T.untyped_storage, ts))
        except self.errors:  # sparse & co have no single storage: one by one
            kept, storages = [], []
            for t in ts:
                try:
                    storages.append(t.untyped_storage())
                except self.errors:
                    continue
                kept.append(t)
            ts = kept
        if not storages:
            return
        S = type(storages[0])
        keys = list(map(S.data_ptr, storages))
        codes = list(map(T.get_device, ts))
        if 0 in keys:
            for i in [i for i, k in enumerate(keys) if k == 0]:
                keys[i] = -int(storages[i]._cdata)
                codes[i] = self.odd_code(str(ts[i].device))
        self.bytes.update(zip(keys, map(S.nbytes, storages), strict=True))
        self.device.update(zip(keys, codes, strict=True))
        self.key_of.update(zip(map(id, ts), keys, strict=True))
        for code in set(codes) - self.dev_name.keys():
            self.dev_name[code] = str(ts[codes.index(code)].device)
        del storages

    def odd_code(self, device: str) -> int:
        """A device code of our own for address-0 storages (meta, empty): not a device index."""
        code = self._odd.setdefault(device, -1000 - len(self._odd))
        self.dev_name[code] = device
        return code

    def device_of(self, key: int) -> str:
        return self.dev_name.get(self.device.get(key, -1), "?")

    def drop(self) -> None:
        """Let go of every object (only keys, bytes and names stay)."""
        self.root_tensors = []
        self.key_of.clear()
        self.grad_owner.clear()
        self.graph_root.clear()
        self.objs = []
        self.types = []


def _is_optimizer(torch: Any, v: Any) -> bool:
    opt = getattr(getattr(torch, "optim", None), "Optimizer", None)
    return opt is not None and isinstance(v, opt)


_RANK = {k: i for i, k in enumerate((VARIABLE, MODULE, GRADIENT, OPTIMIZER, CONTAINER, GRAPH, OTHER))}


def _labels(torch: Any, probe: Any, live: _Live, ns: dict[str, Any] | None) -> dict[int, tuple[str, str]]:
    """Storage key -> (keeper kind, keeper name) for storages of tensors reachable from the
    namespaces; where several reach one storage, the kind first in _RANK wins, then the first name."""
    Module = torch.nn.Module
    is_tensor = live.tensor_types.__contains__
    key_of = live.key_of.get
    by_kind: dict[str, list[tuple[list[int | None], tuple[str, str]]]] = {}

    def add(kind: str, name: str, tensors: Any) -> None:
        by_kind.setdefault(kind, []).append((list(map(key_of, map(id, tensors))), (kind, name)))

    for _prefix, space in probe._namespaces(ns):
        for name, v in list(space.items()):
            if name.startswith("__") or name.startswith("_stridelens") or type(v) is type(sys):
                continue
            tp = type(v)
            if is_tensor(tp):
                add(VARIABLE, name, [v])
            elif tp in (list, tuple, dict):
                values = list(v.values()) if tp is dict else v
                add(CONTAINER, name, compress(values, map(is_tensor, map(type, values))))
                del values
            elif isinstance(v, Module):
                add(MODULE, name, [*(p for _, p in v.named_parameters()), *(b for _, b in v.named_buffers())])
            elif _is_optimizer(torch, v):
                add(OPTIMIZER, name, [x for state in list(v.state.values()) for x in state.values()
                                      if is_tensor(type(x))])
    out: dict[int, tuple[str, str]] = {}
    for kind in sorted(by_kind, key=_RANK.__getitem__):
        for keys, label in by_kind[kind]:
            new = dict.fromkeys(keys, label)
            new.pop(None, None)  # type: ignore[call-overload]
            for k in new.keys() & out.keys():  # first name wins
                del new[k]
            out.update(new)  # type: ignore[arg-type]
    return out


def _param_names(torch: Any, probe: Any, ns: dict[str, Any] | None) -> dict[int, str]:
    names: dict[int, str] = {}
    for _prefix, space in probe._namespaces(ns):
        for name, v in list(space.items()):
            if isinstance(v, torch.nn.Module) and not name.startswith("__"):
                for pname, p in v.named_parameters():
                    names.setdefault(id(p), f"{name}.{pname}")
            elif issubclass(type(v), torch.Tensor) and v.is_leaf and v.requires_grad:
                names.setdefault(id(v), name)
    return names


def _container_names(containers: list[Any], ns_dicts: set[int], objs: list[Any], types: list[type],
                     skip: set[type]) -> dict[int, str]:
    """Names of containers no namespace reaches: `Trainer.history` for an attribute, `module
    m.cache` for a module global, `[key]` inside an unnamed dict.

    Every container gets its name from what holds it, whatever else lives in the process: the
    holders are found top-down, in one pass over the heap's objects (`objs`, the walk's
    gc.get_objects(), and their `types`; `skip`: the tensor types, which hold no attributes worth
    a name) in C calls, not by gc.get_referrers, whose cost grows with the number of containers
    asked about
    (a cap on that number, given to the longest containers, named a list that had just started
    growing only once it outgrew 64 others: its bytes at the first stop went to "an unnamed
    list"). A module global's name comes first, then an attribute, then a plain dict's key.
    An attribute is named after its owner's type whether the instance dict exists or not
    (Python creates it lazily; a name must not change between two stops for that)."""
    want = {id(c) for c in containers}
    out: dict[int, str] = {}
    # Dicts holding a container: module globals, instance dicts, plain dicts.
    dicts = list(compress(objs, map(is_, types, repeat(dict))))
    holders = list(compress(dicts, map(not_, map(want.isdisjoint, map(partial(map, id), map(dict.values, dicts))))))
    del dicts
    owners_of: dict[int, list[tuple[int, Any]]] = {}  # id(dict) -> (id(container), key)
    for r in holders:
        if id(r) in ns_dicts and "__name__" not in r:
            continue  # our own bookkeeping, or a namespace dict without a module name
        for k, v in list(r.items()):
            if id(v) not in want or id(v) in out:
                continue
            if id(r) in ns_dicts:
                out[id(v)] = f"module {r['__name__']}.{k}"
            elif isinstance(k, str):
                owners_of.setdefault(id(r), []).append((id(v), k))
            else:
                out[id(v)] = f"[{k!r}]"
    del holders
    # Objects holding a container as an attribute: inline (Python >= 3.11 keeps attribute values
    # in the object until its dict is asked for), or through an instance dict found above.
    kinds = {tp for tp in set(types) if getattr(tp, "__dictoffset__", 0) and not issubclass(tp, (type, FrameType))}
    kinds -= skip
    if not owners_of:  # only objects that can keep attributes inline can hold one then
        kinds = {tp for tp in kinds if tp.__flags__ & _MANAGED_DICT}
    if kinds:
        targets = want | owners_of.keys()
        objects = list(compress(objs, map(kinds.__contains__, types)))
        hits = list(compress(objects, map(not_, map(targets.isdisjoint,
                                                     map(partial(map, id), map(gc.get_referents, objects))))))
        del objects
        for o in hits:
            d = getattr(o, "__dict__", None)  # reading it makes it, as the probe's own naming does
            if type(d) is not dict:
                continue
            name = type(o).__name__
            for cid, k in owners_of.get(id(d), ()):
                out.setdefault(cid, f"{name}.{k}")
            for k, v in list(d.items()):
                if id(v) in want and id(v) not in out:
                    out[id(v)] = f"{name}.{k}"
        del hits
    for entries in owners_of.values():
        for cid, k in entries:
            out.setdefault(cid, f"[{k!r}]")  # a plain dict's value
    return out


def _keepers(torch: Any, probe: Any, live: _Live, ns: dict[str, Any] | None) -> dict[int, tuple[str, str]]:
    """Storage key -> (kind, name) of what keeps it alive (see the kind order above)."""
    out = _labels(torch, probe, live, ns)
    if live.grad_owner:
        pnames = _param_names(torch, probe, ns)
        for gid, owner in live.grad_owner.items():
            k = live.key_of.get(gid)
            label = (GRADIENT, N_("{owner}.grad").format(owner=pnames.get(id(owner), N_("an unnamed leaf"))))
            if k is not None and (k not in out or _RANK[out[k][0]] > _RANK[GRADIENT]):
                out[k] = label
    # Unnamed tensors inside lists / deques / dicts that no name reaches directly (self.history).
    unnamed_keys = live.key_of.values() - out.keys()
    if unnamed_keys:
        unnamed = dict(compress(live.key_of.items(), map(unnamed_keys.__contains__, live.key_of.values())))
        ns_dicts = probe._namespace_dict_ids()
        deque_t = type(sys.modules["collections"].deque()) if "collections" in sys.modules else list
        kinds = {list, deque_t, dict}
        found: dict[int, Any] = {}
        holds: dict[int, int] = {}  # storage key -> id(container)
        for o in compress(live.objs, map(kinds.__contains__, live.types)):
            if type(o) is dict and id(o) in ns_dicts:
                continue
            hit = unnamed.keys() & set(map(id, o.values() if type(o) is dict else o))
            for i in hit:
                k = unnamed[i]
                if k not in holds:
                    holds[k] = id(o)
                    found.setdefault(id(o), o)
        names = _container_names(list(found.values()), ns_dicts | {id(found), id(holds)}, live.objs,
                                 live.types, live.tensor_types) if found else {}
        for k, cid in holds.items():
            out[k] = (CONTAINER, names.get(cid) or N_("an unnamed {kind}").format(kind=type(found[cid]).__name__))
        found.clear()
        del o
    # Graphs last: a root with a name (by kind) claims the saved tensors it shares with others.
    live.walk_graphs(lambda r: _RANK[out[live.key_of[id(r)]][0]] if live.key_of.get(id(r)) in out else len(_RANK))
    for key, root in live.graph_root.items():
        if key in out:
            continue
        via = out.get(live.key_of.get(id(root), 0))
        out[key] = (GRAPH, N_("graph of {name}").format(name=via[1]) if via else N_("a graph with no named root"))
    nobody = (OTHER, N_("no name or container reaches it"))
    for key in live.bytes.keys() - out.keys():
        out[key] = nobody
    return out


def _totals(live: _Live) -> dict[str, int]:
    return {"bytes": sum(live.bytes.values()), "storages": len(live.bytes), "tensors": live.tensor_count,
            "graph_roots": live.roots}


def _walk(ns: dict[str, Any] | None) -> tuple[_Live, dict[int, tuple[str, str]]]:
    torch, probe = _torch(), _probe()
    # As in the probe's process report: the walk allocates per tensor; collections would traverse
    # the whole heap again and again.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        live = _Live(torch, probe)
        keepers = _keepers(torch, probe, live, ns)
        live.drop()
        return live, keepers
    finally:
        if was_enabled:
            gc.enable()


def _record(ns: dict[str, Any] | None) -> dict[str, Any]:
    """Walk, name, and add this stop's totals and per-keeper bytes to the state."""
    live, keepers = _walk(ns)
    per: dict[tuple[str, str], list[int]] = {}
    label_of, nbytes = keepers.__getitem__, live.bytes.__getitem__
    # sorted + groupby: the per-storage work runs in C (100k storages, a few keepers)
    for label, keys in groupby(sorted(live.bytes, key=label_of), key=label_of):
        ks = list(keys)
        per[label] = [sum(map(nbytes, ks)), len(ks)]
    stop = len(_state["stops"])
    if stop:
        first = _state["first_seen"]
        for pair in keepers.items() - _state["keepers"].items():  # storages new, or kept anew
            first.setdefault(pair, stop)
    else:
        _state["bytes"] = dict(live.bytes)
        _state["keepers"] = keepers
    totals = _totals(live)
    _state["stops"].append({"totals": totals, "keepers": per})
    _state["last"] = (live.bytes, keepers)
    return totals


def begin(ns: dict[str, Any] | None) -> dict[str, Any]:
    _state.clear()
    _state.update(stops=[], first_seen={})
    return _record(ns)


def sample(ns: dict[str, Any] | None) -> dict[str, Any]:
    if "bytes" not in _state:
        raise DiffError(N_("no first stop recorded (begin was not called)"))
    totals = _record(ns)
    _state.pop("last", None)
    return totals


def end(ns: dict[str, Any] | None) -> dict[str, Any]:
    if "bytes" not in _state:
        raise DiffError(N_("no first stop recorded (begin was not called)"))
    try:
        _record(ns)
        stops: list[dict[str, Any]] = _state["stops"]
        steps = len(stops) - 1
        old: dict[int, int] = _state["bytes"]
        old_keepers: dict[int, tuple[str, str]] = _state["keepers"]
        first: dict[tuple[int, tuple[str, str]], int] = _state["first_seen"]
        live_bytes, keepers = _state["last"]
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for i, st in enumerate(stops):
            for kk, (n, count) in st["keepers"].items():
                g = groups.get(kk)
                if g is None:
                    g = groups[kk] = {"kind": kk[0], "keeper": kk[1], "bytes_by_stop": [0] * len(stops),
                                      "storages_by_stop": [0] * len(stops), "new_storages": 0, "new_bytes": 0,
                                      "new_bytes_by_step": [0] * steps}
                g["bytes_by_stop"][i] = n
                g["storages_by_stop"][i] = count
        new = [(k, live_bytes[k]) for k, _ in keepers.items() - old_keepers.items()]
        for k, n in new:
            g = groups[keepers[k]]
            g["new_storages"] += 1
            g["new_bytes"] += n
            g["new_bytes_by_step"][first.get((k, keepers[k]), steps) - 1] += n
        freed = [old[k] for k in old.keys() - live_bytes.keys()]
        return {"steps": steps, "stops": [st["totals"] for st in stops], "groups": list(groups.values()),
                "new_storages": len(new), "new_bytes": sum(n for _, n in new),
                "freed_storages": len(freed), "freed_bytes": sum(freed)}
    finally:
        _state.clear()


def reset() -> bool:
    """Forget the first stop (a run that could not reach its second stop)."""
    had = bool(_state)
    _state.clear()
    return had


# ---------------------------------------------------------------- entry points (JSON out)


def _json(fn: Any, *args: Any) -> str:
    try:
        return json.dumps({"ok": True, "result": fn(*args)})
    except DiffError as e:
        return json.dumps({"ok": False, "error": str(e)})
    except Exception as e:  # noqa: BLE001 -- report it; never raise into the user's process
        return json.dumps({"ok": False, "error": N_("diff probe failed: {error}").format(error=f"{type(e).__name__}: {e}")})


def begin_json(ns: dict[str, Any] | None) -> str:
    return _json(begin, ns)


def sample_json(ns: dict[str, Any] | None) -> str:
    return _json(sample, ns)


def end_json(ns: dict[str, Any] | None) -> str:
    return _json(end, ns)


def reset_json() -> str:
    return _json(reset)
