"""The gradient probe behind `inspect --grads` and `--graph EXPR`: runs inside the debuggee.

Injected like the in-place recorder (its source evaluated into the private module
`_stridelens_grads`), after the probe (`_stridelens_probe`), whose graph walk it reuses: the
`--graph` tree is built from the nodes and saved tensors of the probe's `_walk_graph` /
`_saved_tensors`, so its saved-bytes total is the probe's by construction.

What it promises, as the probe does (SECURITY.md): no `_version` bump, no change of
`requires_grad`, `.grad` or grad mode (all reading happens under `torch.no_grad()`, which
restores the mode on exit), no warnings (`.grad` is read on leaves only), no references left
behind (results leave as JSON). `--grads` reads gradient and weight values, because the user
asked for them: per device the statistics are gathered into one small tensor and read back
once, so the only device sync is that one read (the temporaries it allocates are freed before
it returns).

Like the probe it imports only the standard library; torch is the target's own.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PRIVATE_NAME = "_stridelens_grads"
FILENAME = "<stridelens-grads-probe>"
PROBE_NAME = "_stridelens_probe"  # stridelens.inspector.probe.PRIVATE_NAME (no stridelens import here)
TREE_NODES = 20_000  # nodes described in a --graph tree (the saved-bytes total covers the whole walk)
ROOT_ITEMS = 64  # tensors looked at inside one list/tuple of the frame (graph roots for --grads)
_SKIP = (PRIVATE_NAME, PROBE_NAME, "_stridelens_inplace")


def N_(message: str) -> str:
    """Marks an English template for the catalogue (no stridelens import here; see probe.N_)."""
    return message


class GradsError(Exception):
    """A problem to report to the user as a message (not a traceback)."""


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor"):
        raise GradsError(N_("the target process has not imported torch"))
    return torch


def _probe() -> Any:
    p = sys.modules.get(PROBE_NAME)
    if p is None:
        raise GradsError(N_("the stridelens probe is not loaded in the target"))
    return p


def _namespace(globs: dict[str, Any], locs: dict[str, Any]) -> list[tuple[str, Any]]:
    """The frame's names, locals first, then the globals they do not shadow."""
    out: list[tuple[str, Any]] = []
    seen: set[str] = set()
    for ns in (locs, globs):
        for name, v in list(ns.items()):
            if name in seen or name.startswith("__") or name in _SKIP:
                continue
            seen.add(name)
            out.append((name, v))
    return out


def _modules(entries: list[tuple[str, Any]], torch: Any) -> list[tuple[str, Any]]:
    """Top-level `nn.Module`s of the frame: one that is a submodule of another found here is
    left out (its parameters are listed under the outer module's name)."""
    found: list[tuple[str, Any]] = []
    ids: set[int] = set()
    for name, v in entries:
        if isinstance(v, torch.nn.Module) and id(v) not in ids:
            ids.add(id(v))
            found.append((name, v))
    inner: set[int] = set()
    for _name, m in found:
        inner.update(id(sub) for sub in m.modules() if sub is not m)
    return [(n, m) for n, m in found if id(m) not in inner]


def _named_parameters(mods: list[tuple[str, Any]]) -> list[tuple[str, str, str, Any]]:
    """(model, layer, name, parameter) in module order; a parameter shared by two models once."""
    out: list[tuple[str, str, str, Any]] = []
    seen: set[int] = set()
    for var, m in mods:
        for pname, p in m.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            layer = pname.rpartition(".")[0]
            out.append((var, f"{var}.{layer}" if layer else var, f"{var}.{pname}", p))
    return out


def _layer_kinds(mods: list[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per layer (a module with parameters of its own), its type and the activation that
    follows it: the first module after it in module order with no parameters and no children
    (a Sigmoid, a ReLU), before the next layer. Module order is taken as forward order."""
    out: dict[str, dict[str, Any]] = {}
    for var, m in mods:
        last: str | None = None
        for name, sub in m.named_modules():
            full = f"{var}.{name}" if name else var
            if next(iter(sub.parameters(recurse=False)), None) is not None:
                last = full
                out.setdefault(full, {"type": type(sub).__name__, "activation": None, "activation_name": None})
            elif last is not None and next(iter(sub.children()), None) is None:
                if out[last]["activation"] is None:
                    out[last].update(activation=type(sub).__name__, activation_name=full)
    return out


def _graph_roots(entries: list[tuple[str, Any]], torch: Any) -> list[tuple[str, Any]]:
    roots: list[tuple[str, Any]] = []
    for name, v in entries:
        if isinstance(v, torch.Tensor):
            if v.grad_fn is not None:
                roots.append((name, v.grad_fn))
        elif type(v) in (list, tuple):
            roots.extend((f"{name}[{i}]", x.grad_fn) for i, x in enumerate(v[:ROOT_ITEMS])
                         if isinstance(x, torch.Tensor) and x.grad_fn is not None)
    return roots


def _leaves_reached(roots: list[tuple[str, Any]], limit: int) -> dict[int, list[str]]:
    """id(leaf tensor) -> names of the frame's graphs whose AccumulateGrad reaches it."""
    reached: dict[int, list[str]] = {}
    seen: dict[int, Any] = {}  # keeps node wrappers alive so ids stay unique
    for name, root in roots:
        stack = [root]
        mine: set[int] = set()
        while stack and len(seen) < limit:
            node = stack.pop()
            if node is None or id(node) in mine:
                continue
            mine.add(id(node))
            seen.setdefault(id(node), node)
            if type(node).__name__ == "AccumulateGrad":
                var = node.variable
                names = reached.setdefault(id(var), [])
                if name not in names:
                    names.append(name)
                del var
                continue
            stack.extend(n for n, _ in getattr(node, "next_functions", ()) if n is not None)
    return reached


# ---------------------------------------------------------------- --grads


def _read(torch: Any, pending: dict[str, list[tuple[int, int, Any]]]) -> dict[int, tuple[int, list[float]]]:
    """Stack each device's small statistics tensors and read them back: one sync per device."""
    out: dict[int, tuple[int, list[float]]] = {}
    for items in pending.values():
        got = torch.stack([s for _, _, s in items]).tolist()
        for (i, n, _), v in zip(items, got, strict=True):
            out[i] = (n, v)
    pending.clear()
    return out


def _finite(v: float) -> float | None:
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def grads(globs: dict[str, Any], locs: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    probe = _probe()
    entries = _namespace(globs, locs)
    mods = _modules(entries, torch)
    params = _named_parameters(mods)
    roots = _graph_roots(entries, torch)
    reached = _leaves_reached(roots, probe.GRAPH_NODE_LIMIT)
    del entries
    rows: list[dict[str, Any]] = []
    pending: dict[str, list[tuple[int, int, Any]]] = {}  # device -> (row index, numel, stats tensor)
    with torch.no_grad():
        for model, layer, name, p in params:
            row: dict[str, Any] = {
                "name": name, "model": model, "layer": layer, "shape": list(p.shape),
                "dtype": str(p.dtype).replace("torch.", ""), "device": str(p.device),
                "numel": int(p.numel()), "requires_grad": bool(p.requires_grad),
                "grad": False, "none_reason": None, "graphs": reached.get(id(p), []),
                "grad_norm": None, "weight_norm": None, "ratio": None,
                "nan": None, "inf": None, "zeros": None, "zero_fraction": None, "sparse": False,
                "dead_units": None, "units": None,
            }
            rows.append(row)
            g = probe._grad_of(p)
            if g is None:
                if not p.requires_grad:
                    row["none_reason"] = "frozen"
                elif row["graphs"]:
                    row["none_reason"] = "in_graph"
                elif roots:
                    row["none_reason"] = "not_in_graph"
                else:
                    row["none_reason"] = "no_graph"
                continue
            row["grad"] = True
            if g.is_meta or p.is_meta or not (g.is_floating_point() or g.is_complex()):
                del g
                continue
            row["sparse"] = bool(g.is_sparse)
            x = g._values() if g.is_sparse else g
            acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else None
            wide = torch.float32 if x.device.type == "mps" else torch.float64
            # Norms and a nonzero count are fast reductions; NaN/Inf are counted only where the
            # norm says there are some (isnan/isfinite cost ~15x a norm on CPU, measured). For a
            # weight (2 dims or more), the output units whose whole gradient row is 0 (dead units).
            if x.dim() >= 2 and not g.is_sparse and x.shape[0] and x.numel():
                dead = (torch.count_nonzero(x.reshape(x.shape[0], -1), dim=1) == 0).sum().to(wide)
            else:
                dead = torch.zeros((), dtype=wide, device=x.device) - 1
            stats = torch.stack([
                torch.linalg.vector_norm(x, dtype=acc).to(wide),
                torch.linalg.vector_norm(p.detach(), dtype=acc).to(wide),
                torch.count_nonzero(x).to(wide),
                dead,
            ])
            pending.setdefault(str(x.device), []).append((len(rows) - 1, int(x.numel()), stats))
            del g, x, stats
        values = _read(torch, pending)
        for i in [i for i, v in values.items() if _finite(v[1][0]) is None]:
            # the second read, only for parameters whose grad norm is NaN/Inf
            g = params[i][3].grad
            x = g._values() if g.is_sparse else g
            wide = torch.float32 if x.device.type == "mps" else torch.float64
            pending.setdefault(str(x.device), []).append((i, int(x.numel()), torch.stack([
                torch.isnan(x).sum().to(wide), (~torch.isfinite(x)).sum().to(wide),
                torch.linalg.vector_norm(x.double() if x.device.type != "mps" else x).to(wide)])))
            del g, x
        counts = _read(torch, pending)
        for i, (n, (gn, wn, nonzero, dead)) in values.items():
            row = rows[i]
            nan = inf = 0
            if i in counts:
                nan_f, nonfinite, wide_norm = counts[i][1]
                nan, inf = int(nan_f), int(nonfinite - nan_f)
                gn = wide_norm if not nonfinite else gn  # finite entries that overflowed the norm
            zeros = n - int(nonzero)
            row.update(nan=nan, inf=inf, zeros=zeros, zero_fraction=(zeros / n) if n else 0.0,
                       dead_units=None if dead < 0 else int(dead), units=None if dead < 0 else int(row["shape"][0]))
            row["grad_norm"] = _finite(gn) if not (nan or inf) else None  # NaN/Inf: no norm
            row["weight_norm"] = _finite(wn)
            row["ratio"] = (_finite(gn / wn) if wn and row["grad_norm"] is not None
                            and row["weight_norm"] is not None else None)
    return {"models": [name for name, _ in mods], "graph_roots": [name for name, _ in roots],
            "params": rows, "layer_kinds": _layer_kinds(mods)}


# ---------------------------------------------------------------- --graph


def _leaf_names(entries: list[tuple[str, Any]], torch: Any) -> dict[int, str]:
    names: dict[int, str] = {}
    for _model, _layer, name, p in _named_parameters(_modules(entries, torch)):
        names.setdefault(id(p), name)
    for name, v in entries:
        if isinstance(v, torch.Tensor) and v.is_leaf and v.requires_grad:
            names.setdefault(id(v), name)
    return names


def _sig(t: Any, probe: Any) -> tuple[Any, ...]:
    st = probe._storage(t)
    return (st[0] if st else id(t), tuple(t.shape), probe._safe(t.stride), probe._safe(t.storage_offset))


def _saved_names(node: Any, probe: Any, tensor_type: type) -> dict[tuple[Any, ...], str]:
    """What each saved tensor is called in the node (`self`, `mat2`, `result`, ...)."""
    out: dict[tuple[Any, ...], str] = {}
    for attr in probe._saved_attrs(node):
        try:
            v = getattr(node, attr)
        except probe._TORCH_ERRORS:
            continue
        if issubclass(type(v), tensor_type):
            out.setdefault(_sig(v, probe), attr[7:])
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                if issubclass(type(x), tensor_type):
                    out.setdefault(_sig(x, probe), f"{attr[7:]}[{i}]")
        del v
    return out


def graph_tree(expr: str, globs: dict[str, Any], locs: dict[str, Any]) -> dict[str, Any]:
    torch = _torch()
    probe = _probe()
    value = probe._evaluate(expr, globs, locs, GradsError)
    try:
        if not isinstance(value, torch.Tensor):
            raise GradsError(N_("not a tensor: the expression is a {type}").format(
                type=f"{type(value).__module__}.{type(value).__qualname__}"))
        root = value.grad_fn
        if root is None:
            why = N_("a leaf") if value.requires_grad else "requires_grad=False"
            raise GradsError(N_("{expr} has no grad_fn ({why}): there is no autograd graph behind it").format(
                expr=expr, why=why))
        shape = list(value.shape)
    finally:
        del value
    leaf_names = _leaf_names(_namespace(globs, locs), torch)

    # The probe's own walk: the same nodes, the same saved tensors, the same storages.
    seen: dict[int, Any] = {}
    saved: dict[int, list[Any]] = {}
    walk_storages: dict[str, int] = {}

    def on_saved(node: Any, t: Any) -> None:
        saved.setdefault(id(node), []).append(t)
        st = probe._storage(t)
        if st is not None:
            walk_storages.setdefault(st[0], st[1])

    problems: list[str] = []
    walked = probe._walk_graph(root, seen, torch.Tensor, on_saved, problems=problems)

    # Number the nodes in depth-first preorder (children in next_functions order).
    index: dict[int, int] = {}
    order: list[Any] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in index or id(node) not in seen:
            continue
        if len(order) >= TREE_NODES:
            break
        index[id(node)] = len(order)
        order.append(node)
        nxt = [n for n, _ in getattr(node, "next_functions", ()) if n is not None]
        if type(node).__name__ != "AccumulateGrad":
            stack.extend(reversed(nxt))
    counted: set[str] = set()
    nodes: list[dict[str, Any]] = []
    for node in order:
        d: dict[str, Any] = {"op": type(node).__name__, "next": [], "saved": [], "leaf": None}
        if type(node).__name__ == "AccumulateGrad":
            var = node.variable
            d["leaf"] = {"name": leaf_names.get(id(var)), "shape": list(var.shape),
                         "dtype": str(var.dtype).replace("torch.", "")}
            del var
        else:
            d["next"] = [index.get(id(n)) for n, _ in getattr(node, "next_functions", ()) if n is not None]
        ts = saved.get(id(node), [])
        names = _saved_names(node, probe, torch.Tensor) if ts else {}
        for t in ts:
            st = probe._storage(t)
            key = st[0] if st else None
            d["saved"].append({
                "name": names.get(_sig(t, probe)), "shape": probe._safe(lambda t=t: list(t.shape)),
                "dtype": str(t.dtype).replace("torch.", ""), "storage": key,
                "storage_bytes": st[1] if st else 0,
                "counted": key is not None and key not in counted,
            })
            if key is not None:
                counted.add(key)
        nodes.append(d)
    out = {
        "expr": expr, "shape": shape, "nodes": nodes, "truncated": len(order) < len(seen),
        "walk": {"nodes": walked, "nodes_with_leaves": len(seen),
                 "saved_tensors": sum(len(v) for v in saved.values()),
                 "saved_storages": len(walk_storages), "saved_bytes": sum(walk_storages.values())},
        "problems": problems,
    }
    seen.clear()
    saved.clear()
    return out


# ---------------------------------------------------------------- entry points (JSON out)


def _json(fn: Any, *args: Any) -> str:
    try:
        return json.dumps({"ok": True, "result": fn(*args)})
    except GradsError as e:
        return json.dumps({"ok": False, "error": str(e)})
    except Exception as e:  # noqa: BLE001 -- report it; never raise into the user's process
        return json.dumps({"ok": False, "error": N_("grads probe failed: {error}").format(error=f"{type(e).__name__}: {e}")})


def grads_json(globs: dict[str, Any], locs: dict[str, Any]) -> str:
    return _json(grads, globs, locs)


def graph_tree_json(expr: str, globs: dict[str, Any], locs: dict[str, Any]) -> str:
    return _json(graph_tree, expr, globs, locs)
