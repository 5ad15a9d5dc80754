"""`describe`'s graph fields (grad_fn_chain, graph) against a plain reading of their definitions.

The probe reads a graph in one breadth-first walk with per-node-type caches; the reference
here walks it twice, the simplest way: the chain breadth-first (depth < CHAIN_DEPTH, at most
CHAIN_NODES entries), the saved tensors depth-first over every `_saved_*` attribute (in-place
problems listed in that order). Each graph is described twice: cold caches, then warm ones.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from stridelens.inspector import probe_describe


def reference_chain(fn: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    queue = [(fn, 0)]
    listed: list[Any] = []  # holds the wrappers: ids stay unique
    while queue and len(out) < probe_describe.CHAIN_NODES:
        node, depth = queue.pop(0)
        if any(node is n for n in listed):
            continue
        listed.append(node)
        nxt = [n for n, _ in node.next_functions if n is not None]
        out.append({"name": type(node).__name__, "depth": depth, "next": [type(n).__name__ for n in nxt]})
        if depth + 1 < probe_describe.CHAIN_DEPTH:
            queue.extend((n, depth + 1) for n in nxt)
    return out


def reference_saved(node: Any, problems: list[str]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for attr in sorted(a for a in dir(node) if a.startswith("_saved_")):
        try:
            v = getattr(node, attr)
        except RuntimeError as e:
            if "inplace operation" in str(e):
                problems.append(f"{type(node).__name__}.{attr[7:]} was modified in place after being saved: "
                                "backward through this graph will fail")
            continue
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, torch.Tensor))
    if not out and hasattr(node, "saved_tensors"):
        with contextlib.suppress(RuntimeError):
            out.extend(node.saved_tensors)
    return out


def reference_graph(fn: Any) -> dict[str, Any]:
    seen: list[Any] = []
    stack = [fn]
    nodes = 0
    saved: list[torch.Tensor] = []
    problems: list[str] = []
    while stack:
        node = stack.pop()
        if any(node is n for n in seen):
            continue
        seen.append(node)
        if type(node).__name__ == "AccumulateGrad":
            continue
        nodes += 1
        saved += reference_saved(node, problems)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    storages = {}
    for t in saved:
        s = t.untyped_storage()
        storages[s.data_ptr() or -s._cdata] = s.nbytes()
    return {"nodes": nodes, "saved_tensors": len(saved), "saved_storages": len(storages),
            "saved_bytes": sum(storages.values()), "problems": problems}


def three_ops() -> torch.Tensor:
    base = torch.randn(64, 128)
    w = torch.randn(128, 32, requires_grad=True)
    return ((base @ w).relu() * 2).sum()


def diamond() -> torch.Tensor:
    a = torch.randn(5, requires_grad=True)
    y = a.exp()
    return (y * y.sin() + y.tanh()).sum()


def deep() -> torch.Tensor:
    x = torch.randn(4, requires_grad=True)
    for _ in range(12):
        x = x.sin() * 1.5
    return x.sum()


def wide() -> torch.Tensor:
    leaves = [torch.randn(3, requires_grad=True) for _ in range(30)]
    return torch.stack([(p * p).sigmoid() for p in leaves]).sum()


def lists_and_optionals() -> torch.Tensor:
    x = torch.randn(6, 4, requires_grad=True)
    idx = torch.tensor([0, 2, 2])
    picked = x[idx]  # IndexBackward0 saves a tuple of index tensors
    m, _ = x.max(dim=1)  # saves indices
    ln = torch.nn.functional.layer_norm(x, (4,))  # optional weight/bias absent
    return picked.sum() + m.sum() + ln.sum() + torch.cat([x, x * 3]).sum()


def meta() -> torch.Tensor:
    a = torch.empty(3, 4, device="meta", requires_grad=True)
    return (a * a).tanh().sum()


def modified_in_place() -> torch.Tensor:
    a = torch.randn(4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    s = a.sigmoid()
    e = b.exp()
    out = s.sum() + e.sum() + (a * 2).sigmoid().sum()
    with torch.no_grad():
        s.mul_(2)
        e.add_(1)
    return out


def after_backward() -> torch.Tensor:
    a = torch.randn(4, requires_grad=True)
    out = (a.sigmoid() * a).sum()
    out.backward()  # saved tensors freed
    return out


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = ctx.saved_tensors
        return g * y, g * x


def custom_function() -> torch.Tensor:
    x = torch.randn(3, requires_grad=True)
    return _Twice.apply(x.exp(), x).sum()


GRAPHS: dict[str, Callable[[], torch.Tensor]] = {
    f.__name__: f for f in (three_ops, diamond, deep, wide, lists_and_optionals, meta, modified_in_place,
                            after_backward, custom_function)}


@pytest.mark.parametrize("make", list(GRAPHS.values()), ids=list(GRAPHS))
def test_graph_fields_match_their_definitions(make: Callable[[], torch.Tensor]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = make()
    chain, graph = reference_chain(t.grad_fn), reference_graph(t.grad_fn)
    for _ in range(2):  # cold per-type caches (for these node types), then warm ones
        d = probe_describe.describe(t)
        assert d["grad_fn"] == type(t.grad_fn).__name__
        assert d["grad_fn_chain"] == chain
        assert d["graph"] == graph
        assert d["notes"][-len(graph["problems"]):] == graph["problems"] or not graph["problems"]


def test_graph_fields_cover_what_they_should() -> None:
    # The cases above reach the limits and paths they are meant to.
    deep_chain = reference_chain(deep().grad_fn)
    assert max(n["depth"] for n in deep_chain) == probe_describe.CHAIN_DEPTH - 1
    assert len(reference_chain(wide().grad_fn)) == probe_describe.CHAIN_NODES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problems = reference_graph(modified_in_place().grad_fn)["problems"]
    assert len(problems) == 2 and "SigmoidBackward0.result" in problems[0] + problems[1]
    assert reference_graph(after_backward().grad_fn)["saved_tensors"] == 0
    assert reference_graph(custom_function().grad_fn)["saved_tensors"] >= 2
    assert reference_graph(lists_and_optionals().grad_fn)["saved_storages"] >= 3
