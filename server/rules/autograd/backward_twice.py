"""SL203 backward-twice: backward through a graph an earlier backward already freed."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    LOOP_NODES,
    enclosing,
    enclosing_scope,
    index_of,
    keyword_true,
    stores_name,
    walk_body,
    walk_scope,
)
from stridelens.server.rules.shared.edits import call_from_attr_range, make_finding
from stridelens.server.rules.shared.training_loops import is_backward_call


def _backward_of(node: ast.AST) -> str | None:
    """`name` for a plain `name.backward(...)` call."""
    if is_backward_call(node):
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if isinstance(node.func.value, ast.Name):
            return node.func.value.id
    return None


def check_backward_twice(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    if len(index.by_name.get("backward", ())) == 0:
        return out
    flagged: set[ast.AST] = set()
    bodies: list[list[ast.stmt]] = [analysis.tree.body, *[fn.body for fn in index.functions]]
    for loop in index.loops:
        bodies.append(loop.body)
    for node in list(walk_body(analysis.tree.body)):
        if isinstance(node, (ast.If, ast.With, ast.AsyncWith, ast.Try)):
            bodies.append(node.body)
    for fn in index.functions:
        for node in walk_body(fn.body):
            if isinstance(node, (ast.If, ast.With, ast.AsyncWith, ast.Try)):
                bodies.append(node.body)

    def report(second: ast.Call, name: str, first_line: int, why: str) -> None:
        if second in flagged:
            return
        flagged.add(second)
        message = tr(
            "`{name}.backward()` runs through a graph already freed by the backward at line "
            "{line} ({why}): it raises 'Trying to backward through the graph a second time'"
        ).format(name=name, line=first_line, why=why)
        out.append(make_finding(analysis, SL203, call_from_attr_range(analysis, second), message))

    # Straight line: `loss.backward()` twice with no new forward in between.
    for body in bodies:
        for i, stmt in enumerate(body):
            if not isinstance(stmt, ast.Expr):
                continue
            name = _backward_of(stmt.value)
            if name is None or not isinstance(stmt.value, ast.Call) or not _graph_root(analysis, stmt.value):
                continue
            if keyword_true(stmt.value, "retain_graph") is not None or stmt.value.keywords or stmt.value.args:
                continue
            second = _next_backward(body[i + 1 :], name)
            if second is not None:
                report(second, name, stmt.lineno, tr("no new forward in between"))
    # Loop: the graph is built before the loop, backward runs every iteration.
    for loop in index.loops:
        for stmt in loop.body:
            if not isinstance(stmt, ast.Expr):
                continue
            name = _backward_of(stmt.value)
            if name is None or not isinstance(stmt.value, ast.Call) or stmt.value.keywords or stmt.value.args:
                continue
            if not _graph_root(analysis, stmt.value):
                continue
            if stores_name(loop, name) or _exits(loop.body):
                continue
            if isinstance(loop, ast.For) and _single_iteration(loop):
                continue
            if not _assigned_before(analysis, loop, name):
                continue
            report(
                stmt.value,
                name,
                stmt.lineno,
                tr("its graph was built before the loop, and each iteration calls backward again"),
            )
    return out


def _graph_root(analysis: Analysis, call: ast.Call) -> bool:
    """The receiver of backward is not known to be a graph-less leaf."""
    assert isinstance(call.func, ast.Attribute)
    fact = analysis.fact_of(call.func.value)
    return not (fact is not None and fact.carries_graph is False)


def _next_backward(statements: list[ast.stmt], name: str) -> ast.Call | None:
    for stmt in statements:
        for node in [stmt, *walk_scope(stmt)]:
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
                return None
            if _backward_of(node) == name:
                assert isinstance(node, ast.Call)
                return node
    return None


def _exits(body: list[ast.stmt]) -> bool:
    for stmt in body:
        for node in [stmt, *walk_scope(stmt)]:
            if isinstance(node, (ast.Break, ast.Return, ast.Raise)):
                return True
    return False


def _single_iteration(loop: ast.For) -> bool:
    it = loop.iter
    return (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id == "range"
        and len(it.args) == 1
        and isinstance(it.args[0], ast.Constant)
        and it.args[0].value in (0, 1)
    )


def _assigned_before(analysis: Analysis, loop: ast.AST, name: str) -> bool:
    """`name` is assigned from a computation earlier in the same body (not a parameter)."""
    index = index_of(analysis)
    scope = enclosing_scope(index, loop)
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    if not isinstance(body, list):
        return False
    for node in walk_body(body):
        if node is loop:
            return False
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, (ast.Call, ast.BinOp)) and enclosing(index, node, LOOP_NODES) is None:
                fact = analysis.fact_of(node.targets[0])
                return fact is None or fact.carries_graph is not False
    return False


SL203 = register(
    Rule(
        code="SL203",
        name="backward-twice",
        severity=Severity.ERROR,
        summary="backward through a graph already freed by an earlier backward",
        doc=RuleDoc(
            what="Flags a second `x.backward()` on the same graph with no new forward in "
            "between and no `retain_graph=True` on the first: twice in a row, or once per "
            "iteration of a loop on a loss computed before the loop.",
            why="Backward frees the tensors the graph saved. The second call raises "
            "`RuntimeError: Trying to backward through the graph a second time`, usually "
            "after a long run reached that line.",
            example="loss = model(x).pow(2).sum()\nfor _ in range(3):\n    loss.backward()  # SL203",
            fix="Recompute the loss (the forward) before each backward. `retain_graph=True` on "
            "the first call also works, at the cost of keeping the saved tensors alive.",
        ),
        check=check_backward_twice,
    )
)
