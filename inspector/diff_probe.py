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
tensor or a weak reference, so the target's objects live and die as they would without us.
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
from typing import Any

PRIVATE_NAME = "_stridelens_diff"
FILENAME = "<stridelens-diff-probe>"
PROBE_NAME = "_stridelens_probe"  # stridelens.inspector.probe.PRIVATE_NAME (no stridelens import here)
NAMED_CONTAINERS = 64  # containers named through gc referrers (each name costs a heap pass)

# Keeper kinds, in the order a storage is claimed when several things hold it.
VARIABLE, MODULE, GRADIENT, OPTIMIZER, CONTAINER, GRAPH, OTHER = (
    "variable", "module", "gradient", "optimizer_state", "container", "graph", "unnamed")

_state: dict[str, Any] = {}  # between begin and end; see the module docstring


class DiffError(Exception):
    """A problem to report to the user as a message (not a traceback)."""


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        raise DiffError("the target process has not imported torch")
    return torch


def _probe() -> Any:
    p = sys.modules.get(PROBE_NAME)
    if p is None:
        raise DiffError("the stridelens probe is not loaded in the target")
    return p


def _key(probe: Any, t: Any) -> tuple[str, int] | None:
    try:
        s = t.untyped_storage()
    except probe._TORCH_ERRORS:  # sparse & co: no single storage
        return None
    ptr = s.data_ptr()
    # Meta and empty storages all have address 0: the StorageImpl address tells them apart.
    return f"{t.device}@{ptr:#x}" if ptr else f"{t.device}#{s._cdata:#x}", int(s.nbytes())


class _Live:
    """One walk: storage key -> bytes, and the objects that hold each storage."""

    def __init__(self, torch: Any, probe: Any) -> None:
        T = torch.Tensor
        self.bytes: dict[str, int] = {}
        self.members: dict[str, list[Any]] = {}
        self.grad_owner: dict[int, Any] = {}  # id(grad) -> the leaf it belongs to
        self.graph_root: dict[str, Any] = {}  # storage saved by a graph -> that graph's root tensor
        self.objs: list[Any] = gc.get_objects()
        tensors = [o for o in self.objs if issubclass(type(o), T)]
        self.tensor_count = len(tensors)
        roots: list[Any] = []
        t = g = None
        for t in tensors:
            self._add(probe, t)
            if t.requires_grad:
                if t.grad_fn is not None:
                    roots.append(t)
                    continue
                g = t.grad if t.is_leaf else None
                if g is not None:
                    self.grad_owner[id(g)] = t
                    self._add(probe, g)
        del t, g
        self.roots = len(roots)
        seen: dict[int, Any] = {}
        walking: list[Any] = [None]  # the root whose graph is being walked

        def on_saved(_node: Any, st: Any) -> None:
            k = _key(probe, st)
            if k is not None:
                self.bytes.setdefault(k[0], k[1])
                self.graph_root.setdefault(k[0], walking[0])

        for r in roots:
            walking[0] = r
            probe._walk_graph(r.grad_fn, seen, T, on_saved)
        seen.clear()
        walking.clear()
        del roots, tensors

    def _add(self, probe: Any, t: Any) -> None:
        k = _key(probe, t)
        if k is not None:
            self.bytes[k[0]] = k[1]
            self.members.setdefault(k[0], []).append(t)

    def drop(self) -> None:
        """Let go of every object (only keys, bytes and names stay)."""
        self.members.clear()
        self.grad_owner.clear()
        self.graph_root.clear()
        self.objs = []


def _is_optimizer(torch: Any, v: Any) -> bool:
    opt = getattr(getattr(torch, "optim", None), "Optimizer", None)
    return opt is not None and isinstance(v, opt)


def _labels(torch: Any, probe: Any, ns: dict[str, Any] | None) -> dict[int, tuple[str, str]]:
    """id(tensor) -> (keeper kind, keeper name) for tensors reachable from the namespaces."""
    T = torch.Tensor
    Module = torch.nn.Module
    out: dict[int, tuple[str, str]] = {}
    containers = (list, tuple, dict)
    for _prefix, space in probe._namespaces(ns):
        for name, v in list(space.items()):
            if name.startswith("__") or name.startswith("_stridelens") or type(v) is type(sys):
                continue
            if issubclass(type(v), T):
                out.setdefault(id(v), (VARIABLE, name))
            elif type(v) in containers:
                items = v.values() if type(v) is dict else v
                for x in items:
                    if issubclass(type(x), T):
                        out.setdefault(id(x), (CONTAINER, name))
            elif isinstance(v, Module):
                for _pname, p in v.named_parameters():
                    out.setdefault(id(p), (MODULE, name))
                for _bname, b in v.named_buffers():
                    out.setdefault(id(b), (MODULE, name))
            elif _is_optimizer(torch, v):
                for state in list(v.state.values()):
                    for x in state.values():
                        if issubclass(type(x), T):
                            out.setdefault(id(x), (OPTIMIZER, name))
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


def _keepers(torch: Any, probe: Any, live: _Live, ns: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    """Storage key -> (kind, name) of what keeps it alive (see the kind order above)."""
    labels = _labels(torch, probe, ns)
    pnames = _param_names(torch, probe, ns)
    T = torch.Tensor
    out: dict[str, tuple[str, str]] = {}
    unlabeled: dict[int, str] = {}  # id(tensor) -> its storage key, for the container scan
    rank = {k: i for i, k in enumerate((VARIABLE, MODULE, GRADIENT, OPTIMIZER, CONTAINER, GRAPH, OTHER))}
    for key, ts in live.members.items():
        best: tuple[str, str] | None = None
        for t in ts:
            lab = labels.get(id(t))
            if lab is None and id(t) in live.grad_owner:
                owner = live.grad_owner[id(t)]
                lab = (GRADIENT, f"{pnames.get(id(owner), 'an unnamed leaf')}.grad")
            if lab is not None and (best is None or rank[lab[0]] < rank[best[0]]):
                best = lab
        if best is None:
            for t in ts:
                unlabeled[id(t)] = key
        else:
            out[key] = best
    # Unnamed tensors inside lists / deques / dicts that no name reaches directly (self.history).
    if unlabeled:
        ns_dicts = probe._namespace_dict_ids()
        deque_t = type(sys.modules["collections"].deque()) if "collections" in sys.modules else None
        found: dict[int, Any] = {}
        holds: dict[str, int] = {}  # storage key -> id(container)
        for o in live.objs:
            tp = type(o)
            if tp is list or tp is deque_t:
                items: Any = o
            elif tp is dict and id(o) not in ns_dicts:
                items = o.values()
            else:
                continue
            for x in items:
                k = unlabeled.get(id(x)) if issubclass(type(x), T) else None
                if k is not None and k not in holds:
                    holds[k] = id(o)
                    found.setdefault(id(o), o)
        biggest = sorted(found.values(), key=len, reverse=True)[:NAMED_CONTAINERS]
        names = probe._referrer_names(biggest, {}) if biggest else {}
        for k, cid in holds.items():
            c = found[cid]
            out[k] = (CONTAINER, names.get(cid) or f"an unnamed {type(c).__name__}")
        found.clear()
        del biggest
    for key, root in live.graph_root.items():
        if key in out or key in live.members:
            continue
        root_key = _key(probe, root)
        via = out.get(root_key[0]) if root_key else None
        out[key] = (GRAPH, f"graph of {via[1]}" if via else "a graph with no named root")
    for key in live.bytes:
        out.setdefault(key, (OTHER, "no name or container reaches it"))
    return out


def _totals(live: _Live) -> dict[str, int]:
    return {"bytes": sum(live.bytes.values()), "storages": len(live.bytes), "tensors": live.tensor_count,
            "graph_roots": live.roots}


def _walk(ns: dict[str, Any] | None) -> tuple[_Live, dict[str, tuple[str, str]]]:
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
    for k, n in live.bytes.items():
        b = per.setdefault(keepers[k], [0, 0])
        b[0] += n
        b[1] += 1
    stop = len(_state["stops"])
    if stop:
        old, first = _state["keepers"], _state["first_seen"]
        for k in live.bytes:
            if old.get(k) != keepers[k] and (k, keepers[k]) not in first:
                first[(k, keepers[k])] = stop
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
        raise DiffError("no first stop recorded (begin was not called)")
    totals = _record(ns)
    _state.pop("last", None)
    return totals


def end(ns: dict[str, Any] | None) -> dict[str, Any]:
    if "bytes" not in _state:
        raise DiffError("no first stop recorded (begin was not called)")
    try:
        _record(ns)
        stops: list[dict[str, Any]] = _state["stops"]
        steps = len(stops) - 1
        old: dict[str, int] = _state["bytes"]
        old_keepers: dict[str, tuple[str, str]] = _state["keepers"]
        first: dict[tuple[str, tuple[str, str]], int] = _state["first_seen"]
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
        new = [(k, n) for k, n in live_bytes.items() if old_keepers.get(k) != keepers[k]]
        for k, n in new:
            g = groups[keepers[k]]
            g["new_storages"] += 1
            g["new_bytes"] += n
            g["new_bytes_by_step"][first.get((k, keepers[k]), steps) - 1] += n
        freed = [n for k, n in old.items() if k not in live_bytes]
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
        return json.dumps({"ok": False, "error": f"diff probe failed: {type(e).__name__}: {e}"})


def begin_json(ns: dict[str, Any] | None) -> str:
    return _json(begin, ns)


def sample_json(ns: dict[str, Any] | None) -> str:
    return _json(sample, ns)


def end_json(ns: dict[str, Any] | None) -> str:
    return _json(end, ns)


def reset_json() -> str:
    return _json(reset)
