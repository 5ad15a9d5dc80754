"""IPython's output cache as a holder of tensors: the one finding `%stridelens memory` adds to
the probe's process report (see `notebook_magics`).

IPython keeps every cell result in `Out[N]` (alias `_oh`), `_N`, and `_`/`__`/`___` (and, after
`%reset -f out`, the last three in its hidden namespace), so a big tensor that no variable
names any more stays alive. Like the probe, this reads layouts and references only: no data,
no device work, no version bumps, and it keeps no reference once it returns.
"""

from __future__ import annotations

import gc
import re
import sys
from types import FrameType
from typing import Any

from stridelens.i18n import tr
from stridelens.inspector import probe, probe_parts

_CACHE_NAME = re.compile(r"_{1,3}|_\d+")


def is_cache_name(name: str) -> bool:
    """`_`, `__`, `___`, `_12`: the names IPython's output cache binds."""
    return _CACHE_NAME.fullmatch(name) is not None


def output_cache_findings(shell: Any, min_bytes: int) -> list[dict[str, Any]]:
    """Storages of at least `min_bytes` that only IPython's output cache keeps alive.

    A tensor counts when every reference to it is a cache entry (`Out[N]`, `_N`, `_`, `__`,
    `___`, the display hook's own copies) and every other live tensor on its storage is only
    its `_base`; a storage an autograd graph saved is left out (the graph keeps it too).
    Reads layouts and references only, like the probe.
    """
    user_ns: dict[str, Any] = shell.user_ns
    out_cache = user_ns.get("_oh")
    if not isinstance(out_cache, dict):
        out_cache = {}
    torch = sys.modules["torch"]
    T = torch.Tensor
    held: dict[int, list[str]] = {}  # id(tensor) -> the cache names that hold it
    interest: list[Any] = []
    containers: list[Any] = []  # cell results that are tuples/lists/dicts of tensors

    def add(t: Any, name: str) -> None:
        if id(t) not in held:
            held[id(t)] = []
            interest.append(t)
        if name not in held[id(t)]:
            held[id(t)].append(name)

    for n, v in list(out_cache.items()):
        if issubclass(type(v), T):
            add(v, f"Out[{n}]")
        elif type(v) in (tuple, list):
            containers.append(v)
            for i, x in enumerate(v[: probe.CONTAINER_ITEMS]):
                if issubclass(type(x), T):
                    add(x, f"Out[{n}][{i}]")
        elif type(v) is dict:
            containers.append(v)
            for k, x in list(v.items())[: probe.CONTAINER_ITEMS]:
                if issubclass(type(x), T):
                    add(x, f"Out[{n}][{k!r}]")
    for k, v in list(user_ns.items()):
        if is_cache_name(k) and issubclass(type(v), T):
            add(v, k)
    # `%reset -f out` clears `_` & co in the namespace but not their copies in the hidden one
    # (IPython 8/9), which then keep the last three results alive.
    hidden = getattr(shell, "user_ns_hidden", None) or {}
    for k in ("_", "__", "___"):
        v = hidden.get(k)
        if issubclass(type(v), T) and v is not user_ns.get(k):
            add(v, f"user_ns_hidden[{k!r}]")
    if not interest:
        return []
    big = [t for t in interest if (probe._safe(lambda t=t: probe._storage(t)) or (None, 0))[1] >= min_bytes]
    if not big:
        return []

    # Who else refers to these tensor objects?
    hook = getattr(shell, "displayhook", None)
    cache_objs = {id(out_cache), id(hook), *(id(c) for c in containers)}
    if hook is not None and hasattr(hook, "__dict__"):
        cache_objs.add(id(vars(hook)))
    named_spaces = {id(user_ns), id(getattr(shell, "user_ns_hidden", None))}
    mine = {id(interest), id(big), id(held), id(containers)}
    big_ids = {id(t) for t in big}
    elsewhere: set[int] = set()
    refs = gc.get_referrers(*big)
    try:
        for r in refs:
            if id(r) in mine or id(r) in cache_objs:
                continue
            if id(r) in named_spaces:
                elsewhere.update(id(v) for k, v in list(r.items()) if id(v) in big_ids and not is_cache_name(k))
            elif _own_frame(r):
                continue
            else:
                elsewhere.update(id(x) for x in gc.get_referents(r) if id(x) in big_ids)
    finally:
        del refs
    only_cache = [t for t in big if id(t) not in elsewhere]
    if not only_cache:
        return []

    # Every live tensor on those storages must be one of them or one of their bases.
    storages = {id(t): st for t in only_cache if (st := probe._storage(t)) is not None}
    keys = {i: st[0] for i, st in storages.items()}
    wanted = set(keys.values())
    bases = {id(t._base) for t in only_cache if t._base is not None}
    cache_ids = set(keys)
    others: dict[str, list[Any]] = {}
    roots: list[Any] = []
    objs = gc.get_objects()
    try:
        for o in objs:
            if not (type(o) is T or issubclass(type(o), T)):
                continue
            if o.requires_grad and o.grad_fn is not None:
                roots.append(o)
            if id(o) in cache_ids:
                continue
            st = probe._safe(lambda o=o: probe._storage(o))
            if st is not None and st[0] in wanted:
                others.setdefault(st[0], []).append(o)
    finally:
        del objs
    spoiled: set[str] = set()
    for key, ts in others.items():
        if any(id(o) not in bases for o in ts):
            spoiled.add(key)
        else:  # a base kept only by our views: anyone else referring to it keeps the storage
            base_refs = gc.get_referrers(*ts)
            mine.update({id(others), id(ts), id(base_refs)})
            if any(id(r) not in mine and not _own_frame(r) for r in base_refs):
                spoiled.add(key)
            del base_refs
    others.clear()
    # Storages saved by a live autograd graph stay alive without the cache.
    if roots:
        seen: dict[int, Any] = {}

        def on_saved(_node: Any, s: Any) -> None:
            st = probe._safe(lambda: probe._storage(s))
            if st is not None and st[0] in wanted:
                spoiled.add(st[0])

        for root in roots:
            fn = root.grad_fn
            probe._walk_graph(fn, seen, T, on_saved)
            del fn
        seen.clear()
        roots.clear()

    by_key: dict[str, dict[str, Any]] = {}
    for t in only_cache:
        storage_key = keys.get(id(t))
        if storage_key is None or storage_key in spoiled:
            continue
        f = by_key.get(storage_key)
        if f is None:
            st = storages[id(t)]
            f = by_key[storage_key] = {"kind": "output_cache", "storage_key": storage_key, "device": st[2],
                                       "bytes": st[1], "names": []}
        f["names"].extend(n for n in held[id(t)] if n not in f["names"])
    findings = []
    for f in by_key.values():
        names = sorted(f["names"], key=lambda n: (not n.startswith("Out["), n))
        f["names"] = names
        also = tr(" (also {names})").format(names=", ".join(names[1:])) if len(names) > 1 else ""
        if all(n.startswith("user_ns_hidden") for n in names):
            fix = tr("`%reset -f out` left it behind; `get_ipython().user_ns_hidden.pop({key})` frees it").format(
                key=names[0][15:-1])
        else:
            fix = tr("`%reset -f out` frees it, and a cell ending in `;` stays out of the cache")
        f["message"] = tr("{name}{also} keeps {bytes} of {device} storage alive that no variable refers to: "
                          "IPython's output cache holds every cell result; {fix}").format(
            name=names[0], also=also, bytes=probe._human(f["bytes"]), device=f["device"], fix=fix)
        findings.append(f)
    interest.clear()
    big.clear()
    only_cache.clear()
    return findings


def _own_frame(r: Any) -> bool:
    return type(r) is FrameType and r.f_code.co_filename in (__file__, *probe_parts.FILES)
