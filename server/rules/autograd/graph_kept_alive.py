"""SL201 graph-kept-alive: a graph-carrying tensor kept across loop iterations.

`losses.append(loss)`, `total += loss`, a running average of the loss: each iteration's
graph (and, without a backward through it, the activations it saved) outlives the step.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared import grad_mode
from stridelens.server.rules.shared.ast_index import (
    BLOCK_STATEMENTS,
    LOOP_NODES,
    SCOPE_NODES,
    Index,
    enclosing,
    enclosing_scope,
    index_of,
    stores_name,
    walk,
    walk_body,
    walk_scope,
    walk_statements,
)
from stridelens.server.rules.shared.edits import (
    append_edit,
    make_finding,
    node_range,
    segment,
    short,
)
from stridelens.server.rules.shared.graph_names import ALIAS_METHODS, graph_names
from stridelens.server.rules.shared.training_loops import is_backward_call, is_optimizer_step


def _backwarded_names(index: Index, loop: ast.AST) -> set[str]:
    """Names `n` with `n.backward()` in the loop body: they certainly carry a graph."""
    names: set[str] = set()
    for call in index.backward_calls_in(loop):
        assert isinstance(call.func, ast.Attribute)
        if isinstance(call.func.value, ast.Name):
            names.add(call.func.value.id)
    return names


def _carries_graph(analysis: Analysis, expr: ast.expr, backwarded: set[str]) -> bool:
    fact = analysis.fact_of(expr)
    if fact is not None and fact.carries_graph is True:
        return True
    if fact is not None and (fact.carries_graph is False or fact.requires_grad is False):
        return False
    return isinstance(expr, ast.Name) and expr.id in backwarded


def _bound_before(name: str, loop: ast.AST, stmt: ast.stmt, index_parents: dict[ast.AST, ast.AST]) -> bool:
    """`name` is not rebound inside the loop before `stmt` (so it lives across iterations)."""
    for node in walk_scope(loop):
        if node is stmt:
            return True
        if isinstance(node, ast.stmt) and node is not loop and stores_name_shallow(node, name):
            return False
    return True


def stores_name_shallow(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(isinstance(t, ast.Name) and t.id == name for t in targets)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return stores_name(stmt.target, name)
    return False


def _backward_after_loop(analysis: Analysis, loop: ast.AST, names: set[str]) -> bool:
    """A backward later in the same function (outside this loop), or on the accumulator:
    accumulating graphs on purpose (one backward over the sum)."""
    index = index_of(analysis)
    scope = enclosing_scope(index, loop)
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    loop_end = getattr(loop, "end_lineno", 0) or 0
    for node in walk_body(body if isinstance(body, list) else []):
        if not is_backward_call(node):
            continue
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if node.lineno > loop_end:
            return True
        mentioned = {n.id for n in walk(node) if isinstance(n, ast.Name)}
        if mentioned & names:
            return True
    # `torch.autograd.backward(total)` / `sum(losses).backward()` forms are covered above.
    return False


def _in_training_code(analysis: Analysis, loop: ast.AST) -> bool:
    """The loop, or the function holding it, runs backward or an optimizer step."""
    index = index_of(analysis)
    if not index.training_scopes:
        # From the calls up to their scope, once per file: not a walk of every function body.
        index.training_scopes[analysis.tree] = False
        for call in index.calls:
            if is_backward_call(call) or is_optimizer_step(call):
                scope = enclosing(index, call, SCOPE_NODES)
                if not isinstance(scope, ast.ClassDef):  # a class body is nobody's code path
                    index.training_scopes[scope if scope is not None else analysis.tree] = True
    scope = enclosing_scope(index, loop)
    return index.training_scopes.get(scope if scope is not None else analysis.tree, False)


def _evaluation_with_grad(analysis: Analysis, loop: ast.AST) -> bool:
    """A loop outside any forward whose grad mode is known to be on: every call of its
    function in the file runs with grad (a validation loop without `no_grad`)."""
    fn = enclosing_scope(index_of(analysis), loop)
    if isinstance(fn, ast.Lambda) or (fn is not None and "forward" in getattr(fn, "name", "")):
        return False
    return grad_mode.mode_at(analysis, loop) is grad_mode.GradMode.ON and fn is not None


def _losses_computed_in(loop: ast.AST) -> set[str]:
    """`loss` names a call computes in the loop (`loss = criterion(model(x), y)`): with grad
    on, they carry a graph unless the facts say otherwise."""
    return {
        t.id
        for node in walk_scope(loop)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for t in node.targets
        if isinstance(t, ast.Name) and "loss" in t.id.lower()
    }


def _is_loss(analysis: Analysis, value: ast.expr) -> bool:
    """A 0-d value computed for logging: a graph-carrying fact of shape `()`, or a `loss` name."""
    fact = analysis.fact_of(value)
    if fact is not None and fact.shape == () and fact.carries_graph is True:
        return True
    return isinstance(value, ast.Name) and "loss" in value.id.lower()


def _retains(call: ast.Call) -> bool:
    """A backward call that keeps the graph's saved tensors (`retain_graph=` anything but a
    literal False/None, or `create_graph=True`)."""
    for kw in call.keywords:
        if kw.arg in ("retain_graph", "create_graph"):
            if not (isinstance(kw.value, ast.Constant) and kw.value.value in (False, None)):
                return True
    return False


def _alias_root(expr: ast.expr) -> ast.Name | None:
    """`logits` of `logits[:1]`, `h.view(b, -1)`, `out.detach`-free chains of views and
    copies that save no tensor for backward; None for anything computed further."""
    node = expr
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ALIAS_METHODS:
            node = node.func.value
        else:
            break
    return node if isinstance(node, ast.Name) else None


Binding = tuple[str, int]  # a name and the statement that bound it (0: before the loop)


class _IterationFlow:
    """What one pass of a loop body computes from what, in statement order: for each name,
    the statement that last bound it and the bindings its value was computed from; for each
    backward, the bindings its graph runs through."""

    def __init__(self, analysis: Analysis, loop: ast.AST, watch: ast.stmt | None = None) -> None:
        self.analysis = analysis
        self.binding: dict[str, int] = {}
        self.deps: dict[Binding, frozenset[Binding]] = {}
        self.backwards: list[tuple[ast.Call, frozenset[Binding]]] = []
        self.at_watch: dict[str, int] = {}
        self._watch = watch
        for stmt in walk_statements(getattr(loop, "body", [])):
            self._statement(stmt)

    def sources(self, expr: ast.AST) -> frozenset[Binding]:
        out: set[Binding] = set()
        for name in graph_names(self.analysis, expr):
            key = (name.id, self.binding.get(name.id, 0))
            out.add(key)
            out |= self.deps.get(key, frozenset())
        return frozenset(out)

    def _bind(self, target: ast.AST, stmt: ast.AST, sources: frozenset[Binding]) -> None:
        for node in walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.binding[node.id] = id(stmt)
                self.deps[(node.id, id(stmt))] = sources

    def _statement(self, stmt: ast.stmt) -> None:
        if stmt is self._watch:
            self.at_watch = dict(self.binding)
        headers: list[ast.AST]
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            headers = [stmt.iter]
        elif isinstance(stmt, (ast.If, ast.While)):
            headers = [stmt.test]
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            headers = [item.context_expr for item in stmt.items]
        elif isinstance(stmt, (*BLOCK_STATEMENTS, *SCOPE_NODES)):
            headers = []
        else:
            headers = [stmt]
        for header in headers:
            for node in [header, *walk_scope(header)]:
                if is_backward_call(node) and not _retains(node):  # type: ignore[arg-type]
                    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    self.backwards.append((node, self.sources(node.func.value)))
        if isinstance(stmt, ast.Assign):
            sources = self.sources(stmt.value)
            for target in stmt.targets:
                self._bind(target, stmt, sources)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._bind(stmt.target, stmt, self.sources(stmt.value))
        elif isinstance(stmt, ast.AugAssign):
            self._bind(stmt.target, stmt, self.sources(stmt.value) | self.sources(stmt.target))
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self._bind(stmt.target, stmt, self.sources(stmt.iter))

    def reaching(self, root: ast.Name) -> ast.Call | None:
        """The first backward of the pass whose graph runs through `root` as it was bound
        at the watched statement."""
        key = (root.id, self.at_watch.get(root.id, 0))
        for call, sources in self.backwards:
            if key in sources:
                return call
        return None


def check_graph_kept_alive(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    seen: set[ast.AST] = set()
    for loop in index.loops:
        backwarded = _backwarded_names(index, loop)
        training = _in_training_code(analysis, loop)
        if not training and not _evaluation_with_grad(analysis, loop):
            continue  # e.g. a forward collecting per-level outputs: the graph is wanted
        for node in walk_scope(loop):
            if not isinstance(node, ast.stmt) or node in seen:
                continue
            if analysis.grad_enabled_at(node) is False:
                continue
            if enclosing(index, node, LOOP_NODES) is not loop:
                continue  # inner loops are checked on their own
            hit = _storing(analysis, node, loop, backwarded if training else backwarded | _losses_computed_in(loop))
            if hit is None:
                continue
            container, value, how = hit
            if not training and not _is_loss(analysis, value):
                continue
            if _backward_after_loop(analysis, loop, {container}):
                continue
            if _reset_in_loop(loop, container, node):
                continue  # `running_loss = 0` every logging interval: nothing outlives the reset
            seen.add(node)
            freed = _backwarded_here(value, backwarded)
            backward_lines = sorted(c.lineno for c in index.backward_calls_in(loop))
            fix_text, fix_title = ".detach()", tr("Store `.detach()` (no graph)")
            fact = analysis.fact_of(value)
            if (how == "accumulates" and fact is not None and fact.shape == ()) or (how == "accumulates" and isinstance(value, ast.Name) and "loss" in value.id.lower()):
                fix_text, fix_title = ".item()", tr("Accumulate `.item()` (a Python number)")
            fix = Fix(fix_title, tuple(append_edit(analysis, value, fix_text)))
            subject = (
                tr("`{value}` carries an autograd graph and `{container}` keeps it across loop iterations")
                if how == "keeps"
                else tr("`{value}` carries an autograd graph and `{container}` accumulates it across loop iterations")
            ).format(value=short(segment(analysis, value)), container=container)
            value_text = short(segment(analysis, value))
            if freed:
                message = tr(
                    "{subject}: backward already freed each graph's saved tensors, but every "
                    "iteration's grad_fn nodes and 0-d loss stay alive, a slow host-memory leak; "
                    "store `{fix}` instead"
                ).format(subject=subject, fix=fix_text)
            elif not backward_lines:
                message = tr(
                    "{subject}, and no backward runs on it: every iteration's whole graph, with the "
                    "activations it saved, stays alive, so memory grows by a forward's activations "
                    "per step; store `{fix}` instead"
                ).format(subject=subject, fix=fix_text)
            else:
                flow = _IterationFlow(analysis, loop, node)
                root = _alias_root(value)
                reached = flow.reaching(root) if root is not None else None
                if reached is not None:
                    freed = True
                    message = tr(
                        "{subject}: the backward at line {line} runs through its graph and frees the "
                        "tensors that graph saved, but every iteration's `{value}` (with all of its "
                        "storage) and the graph's grad_fn nodes stay alive: a slow host-memory leak; "
                        "store `{fix}` instead"
                    ).format(subject=subject, line=reached.lineno, value=value_text, fix=fix_text)
                else:
                    message = tr(
                        "{subject}: the backward at line {line} frees the saved tensors only of the "
                        "graph it runs through, so whatever of this graph it does not reach keeps its "
                        "saved tensors, and every iteration's grad_fn nodes stay alive; store `{fix}` "
                        "instead"
                    ).format(subject=subject, line=backward_lines[0], fix=fix_text)
            finding = make_finding(analysis, SL201, node_range(analysis, node), message, fix)
            out.append(replace(finding, severity=Severity.INFORMATION) if freed else finding)
    return out


def _reset_in_loop(loop: ast.AST, name: str, stmt: ast.stmt) -> bool:
    """`name` is rebound or cleared somewhere in the loop body (other than by `stmt`): each
    reset drops what was kept before it."""
    for node in walk_scope(loop):
        if node is stmt:
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and stores_name_shallow(node, name):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "clear"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
        ):
            return True
        if isinstance(node, ast.Delete) and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name for t in node.targets):
            return True
    return False


def _backwarded_here(value: ast.expr, backwarded: set[str]) -> bool:
    """Backward runs, in this iteration, on the stored tensor (or on what it was computed from)."""
    return any(isinstance(n, ast.Name) and n.id in backwarded for n in walk(value))


def _storing(
    analysis: Analysis, stmt: ast.stmt, loop: ast.AST, backwarded: set[str]
) -> tuple[str, ast.expr, str] | None:
    index = index_of(analysis)
    # losses.append(loss)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "append"
            and isinstance(call.func.value, ast.Name)
            and len(call.args) == 1
            and not call.keywords
        ):
            container = call.func.value.id
            if _carries_graph(analysis, call.args[0], backwarded) and _bound_before(container, loop, stmt, index.parents):
                return container, call.args[0], "keeps"
        return None
    # total += loss
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.op, (ast.Add, ast.Sub)):
        container = stmt.target.id
        if container in backwarded:
            return None
        if _carries_graph(analysis, stmt.value, backwarded) and _bound_before(container, loop, stmt, index.parents):
            return container, stmt.value, "accumulates"
        return None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        # history[epoch] = loss
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            container = target.value.id
            if _carries_graph(analysis, stmt.value, backwarded) and _bound_before(container, loop, stmt, index.parents):
                if isinstance(stmt.value, ast.Name):
                    return container, stmt.value, "keeps"
            return None
        # avg = 0.9 * avg + 0.1 * loss (not `total = total + loss.detach()`: no graph)
        if isinstance(target, ast.Name) and isinstance(stmt.value, ast.BinOp) and target.id not in backwarded:
            mentions = [n for n in walk(stmt.value) if isinstance(n, ast.Name)]
            if any(n.id == target.id for n in mentions) and _bound_before(target.id, loop, stmt, index.parents):
                for operand in _operands(stmt.value):
                    if isinstance(operand, ast.Name) and operand.id == target.id:
                        continue
                    if _carries_graph(analysis, operand, backwarded):
                        return target.id, operand, "accumulates"
                    fact = analysis.fact_of(operand)
                    if fact is not None and (fact.carries_graph is False or fact.requires_grad is False):
                        continue
                    for n in graph_names(analysis, operand):
                        if n.id != target.id and _carries_graph(analysis, n, backwarded):
                            return target.id, n, "accumulates"
    return None


def _operands(expr: ast.expr) -> list[ast.expr]:
    """The terms and factors of a `+ - * /` expression (`0.9 * avg + 0.1 * loss`: 0.9, avg,
    0.1, loss)."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return [*_operands(expr.left), *_operands(expr.right)]
    return [expr]


SL201 = register(
    Rule(
        code="SL201",
        name="graph-kept-alive",
        severity=Severity.WARNING,
        summary="a graph-carrying tensor kept across loop iterations (`losses.append(loss)`, `total += loss`)",
        doc=RuleDoc(
            what="Flags a loop that stores a tensor carrying an autograd graph into something "
            "that outlives the iteration: `losses.append(loss)`, `total += loss`, a running "
            "average `avg = 0.9 * avg + 0.1 * loss`, `history[i] = loss`. The loop must train "
            "(its function calls `backward()` or an optimizer step), or be a loop of losses "
            "in a function whose every caller in the file runs it with grad on (validation "
            "without `no_grad`). Silent: code under `torch.no_grad()`; an accumulator or list "
            "reset anywhere in the loop (`running_loss = 0` every logging interval, "
            "`window.clear()`), since nothing outlives the reset; loops that later call "
            "`backward()` on the accumulated value (accumulation on purpose); values with no "
            "graph: `.detach()`, `.item()`, `.tolist()` or `float(...)` of the loss (`total = "
            "total + loss.detach()`, `avg = 0.9 * avg + 0.1 * loss.item()`). The message says "
            "what stays alive, and the severity follows it: information when backward runs, in "
            "the same iteration (before or after the store), on the stored tensor or through the "
            "tensor it is a view or copy of (`history.append(logits[:1])` where the iteration's "
            "`loss` was computed from `logits`): that backward freed the tensors the graph saved, "
            "and what stays is the stored tensor with its storage and the graph's grad_fn nodes, "
            "a slow host-memory leak; a warning when a backward runs in the iteration but is not "
            "shown to reach the stored tensor (the part of its graph it does not reach keeps its "
            "saved tensors), and when no backward runs on it at all (the whole graph and the "
            "activations it saved stay).",
            why="A tensor with a `grad_fn` keeps its whole graph alive, and the graph keeps the "
            "activations it saved. Storing one per iteration grows memory every step until the "
            "process runs out: the classic slow OOM of a training loop.",
            example="for x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
            "    total += loss  # SL201",
            fix="Store a number with `.item()` or a graph-free tensor with `.detach()` (the quick fix).",
        ),
        check=check_graph_kept_alive,
    )
)
