"""SL202 retain-graph: `retain_graph=True` where nothing runs through the graph again."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    LOOP_NODES,
    enclosing_scope,
    index_of,
    inside,
    keyword_true,
    torch_path,
    walk,
    walk_body,
    walk_scope,
    walk_statements,
)
from stridelens.server.rules.shared.edits import make_finding, node_range
from stridelens.server.rules.shared.graph_names import graph_names
from stridelens.server.rules.shared.training_loops import is_backward_call


def _is_autograd_grad(analysis: Analysis, call: ast.Call) -> bool:
    path = torch_path(analysis, call.func)
    return path in ("torch.autograd.grad", "torch.autograd.backward")


def _in_custom_backward(analysis: Analysis, call: ast.Call) -> bool:
    """Inside a hand-written backward (`def backward_pass(...)` of reversible layers, an
    `autograd.Function.backward`): several backwards through one graph are its design."""
    scope = enclosing_scope(index_of(analysis), call)
    return isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and "backward" in scope.name


def _graph_roots(analysis: Analysis, call: ast.Call) -> ast.expr | None:
    """What the retaining call runs backward from: the receiver of `.backward()`, the
    `outputs` / `tensors` of `torch.autograd.grad` / `torch.autograd.backward`."""
    if is_backward_call(call):
        assert isinstance(call.func, ast.Attribute)
        return call.func.value
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in ("outputs", "tensors")), None)


def _scope_ancestry(analysis: Analysis, body: list[ast.stmt]) -> dict[str, set[str]]:
    """For each name assigned in `body` (outside nested functions), every name its values
    were computed from, transitively (flow-insensitive: any assignment counts). A loop's
    target is a fresh value each iteration (`for x, y in loader`), computed from nothing."""
    direct: dict[str, set[str]] = {}
    for stmt in walk_statements(body):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            sources = {n.id for n in graph_names(analysis, stmt.value)}
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in walk(target):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        direct.setdefault(node.id, set()).update(sources)
    closed: dict[str, set[str]] = {}
    for name in direct:
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            for source in direct.get(current, ()):
                if source not in seen:
                    seen.add(source)
                    todo.append(source)
        closed[name] = seen
    return closed


def _graph_of(names: set[str], ancestry: dict[str, set[str]]) -> set[str]:
    out = set(names)
    for name in names:
        out |= ancestry.get(name, set())
    return out


def _graph_used_again(analysis: Analysis, call: ast.Call) -> bool:
    """Whether the graph `call` retains may be run through again: another backward or
    `autograd.grad` later in the function (or anywhere in a loop around the call) shares a
    value with it (the same loss or outputs, a value computed from them, or the forward both
    came from); the call sits in a loop and its graph was built before the loop; the graph
    came from the caller (the function's parameters); or a value of it is returned."""
    index = index_of(analysis)
    root = _graph_roots(analysis, call)
    if root is None:
        return True  # nothing to follow: unknown
    scope = enclosing_scope(index, call)
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    if not isinstance(body, list):
        return True  # a lambda
    roots = {n.id for n in graph_names(analysis, root)}
    if not roots:
        return not isinstance(root, (ast.Call, ast.BinOp, ast.Subscript))  # `self.loss`: unknown
    params: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = scope.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None}
    ancestry = _scope_ancestry(analysis, body)
    if roots & params and not any(name in ancestry for name in roots & params):
        return True  # `calculate_adaptive_weight(self, nll_loss, ...)`: the caller's graph
    graph = _graph_of(roots, ancestry)
    loops = []
    parent = index.parents.get(call)
    while parent is not None and parent is not scope:
        if isinstance(parent, LOOP_NODES):
            loops.append(parent)
        parent = index.parents.get(parent)
    for loop in loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)) and roots & {n.id for n in walk(loop.target) if isinstance(n, ast.Name)}:
            return True  # `for loss in losses`: items of one collection, maybe of one graph
        bound_in_loop = {n.id for n in [loop, *walk_scope(loop)] if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if graph - bound_in_loop:
            return True  # built before the loop: each iteration runs through it again
    end = (call.end_lineno or call.lineno, call.end_col_offset or 0)
    for other in [*index.by_name.get("backward", ()), *index.by_name.get("grad", ())]:
        if other is call or enclosing_scope(index, other) is not scope:
            continue
        if not (is_backward_call(other) or _is_autograd_grad(analysis, other)):
            continue
        later = (other.lineno, other.col_offset) >= end or any(inside(index, other, loop) for loop in loops)
        if not later:
            continue
        other_root = _graph_roots(analysis, other)
        if other_root is None:
            return True
        other_names = {n.id for n in graph_names(analysis, other_root)}
        if _graph_of(other_names, ancestry) & graph:
            return True
    derived = {name for name, sources in ancestry.items() if sources & roots} | roots
    for node in walk_body(body):
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and node.value is not None:
            if (node.lineno, node.col_offset) >= end and {n.id for n in graph_names(analysis, node.value)} & derived:
                return True  # the caller may run backward through it
    return False



def check_retain_graph(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for call in [*index.by_name.get("backward", ()), *index.by_name.get("grad", ())]:
        if call.func is not None and not (is_backward_call(call) or _is_autograd_grad(analysis, call)):
            continue
        kw = keyword_true(call, "retain_graph")
        if kw is None or _in_custom_backward(analysis, call):
            continue
        if keyword_true(call, "create_graph") is not None:
            continue  # a double backward (gradient penalty): the graph of the gradient is wanted
        if _graph_used_again(analysis, call):
            continue
        message = tr(
            "`retain_graph=True` keeps every tensor the graph saved alive after backward, and "
            "nothing after it runs through that graph again; drop it (a second backward through "
            "the same graph is the only reason for it)"
        )
        out.append(make_finding(analysis, SL202, node_range(analysis, kw), message))
    return out


SL202 = register(
    Rule(
        code="SL202",
        name="retain-graph",
        severity=Severity.WARNING,
        summary="`retain_graph=True` in `backward` / `autograd.grad`",
        doc=RuleDoc(
            what="Flags `retain_graph=True` passed to `.backward()`, `torch.autograd.backward` or "
            "`torch.autograd.grad` when nothing after it runs through that graph again. Silent "
            "when the graph may be used again: another `backward()` / `autograd.grad` later in "
            "the function (or anywhere in a loop around the call) starts from the same loss or "
            "outputs, from a value computed from them, or from a value of the same forward (the "
            "adaptive loss weight of VQGAN-style training: `autograd.grad(nll_loss, last_layer, "
            "retain_graph=True)` then `(nll_loss + w * g_loss).backward()`; two losses of one "
            "output); the call is in a loop and its graph was built before the loop (heads on a "
            "shared trunk) or is an item of the loop's collection (`for loss in losses`); the "
            "losses are the function's own parameters (the caller's graph: "
            "`calculate_adaptive_weight(nll_loss, g_loss, last_layer)`); a value of the graph is "
            "returned or yielded afterwards; `create_graph=True` is given (a double backward, "
            "such as a gradient penalty); and inside a hand-written backward (a function whose "
            "name contains `backward`, such as the `backward_pass` of reversible layers), where "
            "several backwards through one graph are the design.",
            why="Backward normally frees the tensors the graph saved as soon as it has used them. "
            "`retain_graph=True` keeps them all alive until the graph itself dies; it is often "
            "added to silence the 'backward through the graph a second time' error, which hides "
            "the real bug (a graph reused across iterations) and grows memory.",
            example="for x, y in loader:\n    loss = criterion(model(x), y)\n"
            "    loss.backward(retain_graph=True)  # SL202\n    optimizer.step()",
            fix="Drop it: nothing runs through the graph again. Where a second backward the rule "
            "cannot see needs it (the caller backwards through a returned graph), keep it with "
            "`# noqa: SL202`.",
        ),
        check=check_retain_graph,
    )
)
