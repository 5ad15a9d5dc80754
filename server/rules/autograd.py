"""Autograd rules: graphs kept alive or freed, detached storage, grad flags (SL201–SL203, SL205, SL207, SL208)."""

from __future__ import annotations

import ast
from dataclasses import replace

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import grad_mode, register
from stridelens.server.rules._helpers import (
    LOOP_NODES,
    PARAM_ATTRS,
    SCOPE_NODES,
    Index,
    append_edit,
    call_from_attr_range,
    dotted,
    enclosing,
    enclosing_scope,
    enclosing_stmt,
    index_of,
    is_backward_call,
    is_inplace_method,
    is_optimizer_step,
    keyword_true,
    line_indent,
    make_finding,
    node_range,
    param_loop_names,
    segment,
    short,
    stores_name,
    torch_path,
    walk,
    walk_body,
    walk_scope,
)
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit

# ----------------------------------------------------------------------------- SL201


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
            if freed:
                message = tr(
                    "{subject}: backward already freed each graph's saved tensors, but every "
                    "iteration's grad_fn nodes and 0-d loss stay alive, a slow host-memory leak; "
                    "store `{fix}` instead"
                ).format(subject=subject, fix=fix_text)
            else:
                message = tr(
                    "{subject}, and no backward runs on it: every iteration's whole graph, with the "
                    "activations it saved, stays alive, so memory grows by a forward's activations "
                    "per step; store `{fix}` instead"
                ).format(subject=subject, fix=fix_text)
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
        # avg = 0.9 * avg + 0.1 * loss
        if isinstance(target, ast.Name) and isinstance(stmt.value, ast.BinOp) and target.id not in backwarded:
            mentions = [n for n in walk(stmt.value) if isinstance(n, ast.Name)]
            if any(n.id == target.id for n in mentions):
                for n in mentions:
                    if n.id != target.id and _carries_graph(analysis, n, backwarded):
                        if _bound_before(target.id, loop, stmt, index.parents):
                            return target.id, n, "accumulates"
    return None


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
            "`backward()` on the accumulated value (accumulation on purpose). A warning when no "
            "backward runs on the stored tensor (the whole graph and its activations stay); "
            "information when backward ran on it in the same iteration (its saved tensors are "
            "freed, and only the grad_fn nodes and 0-d losses stay: a slow host-memory leak).",
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


# ----------------------------------------------------------------------------- SL202
def _is_autograd_grad(analysis: Analysis, call: ast.Call) -> bool:
    path = torch_path(analysis, call.func)
    return path in ("torch.autograd.grad", "torch.autograd.backward")


def _in_custom_backward(analysis: Analysis, call: ast.Call) -> bool:
    """Inside a hand-written backward (`def backward_pass(...)` of reversible layers, an
    `autograd.Function.backward`): several backwards through one graph are its design."""
    scope = enclosing_scope(index_of(analysis), call)
    return isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and "backward" in scope.name


def check_retain_graph(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for call in [*index.by_name.get("backward", ()), *index.by_name.get("grad", ())]:
        if call.func is not None and not (is_backward_call(call) or _is_autograd_grad(analysis, call)):
            continue
        kw = keyword_true(call, "retain_graph")
        if kw is None or _in_custom_backward(analysis, call):
            continue
        message = tr(
            "`retain_graph=True` keeps every tensor the graph saved alive after backward; it is "
            "rarely needed (a second backward through the same graph) and often hides a bug"
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
            "`torch.autograd.grad`, except inside a hand-written backward (a function whose name "
            "contains `backward`, such as the `backward_pass` of reversible layers), where "
            "several backwards through one graph are the design.",
            why="Backward normally frees the tensors the graph saved as soon as it has used them. "
            "`retain_graph=True` keeps them all alive until the graph itself dies; it is often "
            "added to silence the 'backward through the graph a second time' error, which hides "
            "the real bug (a graph reused across iterations) and grows memory.",
            example="loss.backward(retain_graph=True)  # SL202",
            fix="Recompute the forward for each backward, or sum the losses and call backward "
            "once. Keep it only for a genuine double backward, with `# noqa: SL202`.",
        ),
        check=check_retain_graph,
    )
)


# ----------------------------------------------------------------------------- SL203
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


# ----------------------------------------------------------------------------- SL205
def _is_detach_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "detach"
        and not node.args
    )


def _mutated(analysis: Analysis, index_parents: dict[ast.AST, ast.AST], stmt: ast.stmt) -> tuple[ast.expr, ast.AST] | None:
    """The expression mutated in place by `stmt` and the node to report."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and is_inplace_method(func.attr):
            return func.value, stmt.value
    if isinstance(stmt, ast.AugAssign):
        target = stmt.target.value if isinstance(stmt.target, ast.Subscript) else stmt.target
        return target, stmt
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        return stmt.targets[0].value, stmt
    return None


def check_detach_shares_storage(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    if not index.by_name.get("detach"):
        return out
    bodies = [analysis.tree.body, *[fn.body for fn in index.functions]]
    for body in bodies:
        for stmt in walk_body(body):
            if not isinstance(stmt, ast.stmt):
                continue
            hit = _mutated(analysis, index.parents, stmt)
            if hit is None:
                continue
            target, report = hit
            if _is_detach_call(target):
                assert isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute)
                if not _activation(analysis, target.func.value):
                    continue
                source = segment(analysis, target.func.value)
                fix = Fix(tr("Use `.detach().clone()`"), tuple(append_edit(analysis, target, ".clone()")))
                out.append(_sl205(analysis, report, source, fix))
                continue
            if not isinstance(target, ast.Name):
                continue
            fact = analysis.fact_of(target)
            if not isinstance(stmt, ast.AugAssign) and (fact is None or not fact.detached_from):
                continue
            definition = _detach_definition(analysis, body, target.id, stmt)
            if definition is None:
                continue  # e.g. bound from `.data`: SL204's business
            if isinstance(definition.func, ast.Attribute) and not _activation(analysis, definition.func.value):
                continue
            fix = Fix(tr("Use `.detach().clone()`"), tuple(append_edit(analysis, definition, ".clone()")))
            source = segment(analysis, definition.func.value) if isinstance(definition.func, ast.Attribute) else "?"
            out.append(_sl205(analysis, report, source, fix))
    return out


def _activation(analysis: Analysis, source: ast.expr) -> bool:
    """Whether the detached tensor may be an activation. Writes into a `.grad`, a parameter
    or buffer (`.weight`, `self.<attr>`, a loop over `parameters()`) are deliberate updates
    of state nobody saved for backward: timm's `p.grad.detach().copy_(...)`, Lightning's
    `dst_param.detach().copy_(src)`."""
    node = source
    while isinstance(node, ast.Subscript):
        node = node.value
    chain = dotted(node) or ""
    parts = chain.split(".")
    if any(part in PARAM_ATTRS for part in parts[1:]):
        return False
    if len(parts) > 1 and parts[0] == "self":
        return False
    return not (isinstance(node, ast.Name) and node.id in param_loop_names(analysis))


def _detach_definition(analysis: Analysis, body: list[ast.stmt], name: str, before: ast.stmt) -> ast.Call | None:
    found: ast.Call | None = None
    for node in walk_body(body):
        if node is before:
            break
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value if _is_detach_call(node.value) else None  # type: ignore[assignment]
    return found


def _sl205(analysis: Analysis, report: ast.AST, source: str, fix: Fix | None) -> Finding:
    message = tr(
        "in-place change of a `.detach()` of `{source}`: it shares `{source}`'s storage, "
        "so the original changes too (and backward raises if autograd saved it); use "
        "`.detach().clone()` for an independent copy"
    ).format(source=short(source))
    return make_finding(analysis, SL205, node_range(analysis, report), message, fix)


SL205 = register(
    Rule(
        code="SL205",
        name="detach-shares-storage",
        severity=Severity.WARNING,
        summary="in-place mutation of a `.detach()` result (it shares storage)",
        doc=RuleDoc(
            what="Flags an in-place mutation (`add_()`, `zero_()`, `copy_()`, `+=`, `t[i] = ...`) "
            "of a `.detach()` result, inline (`x.detach().zero_()`) or through a name bound to "
            "it, when the detached tensor may be an activation: a local name or expression. "
            "Silent when it is a `.grad` (`p.grad.detach().copy_(g)`), a parameter or buffer "
            "(`.weight`, `.bias`, `self.<attr>`, a loop over `parameters()`/`buffers()`/"
            "`state_dict()` or a `zip` of those): writing into those is a deliberate update of "
            "state no graph saved.",
            why="`.detach()` does not copy: it is a new tensor over the same storage, without "
            "the graph. Mutating it changes the original; if autograd saved the original for "
            "backward, backward later raises a version-counter error far from this line.",
            example="y = x.detach()\ny.add_(1)  # SL205: x changes too",
            fix="`.detach().clone()` (the quick fix) when you want an independent copy.",
        ),
        check=check_detach_shares_storage,
    )
)


# ----------------------------------------------------------------------------- SL207
_ANOMALY_SET = ("torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly")
_ANOMALY_CTX = ("torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly")


def check_anomaly_detection(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for call in [*index.by_name.get("set_detect_anomaly", ()), *index.by_name.get("detect_anomaly", ())]:
        path = torch_path(analysis, call.func)
        if path in _ANOMALY_SET:
            flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                continue
        elif path not in _ANOMALY_CTX:
            continue
        stmt = enclosing_stmt(index, call)
        fix = None
        if isinstance(stmt, ast.Expr) and stmt.value is call:
            fix = _remove_statement(analysis, index, stmt)
        message = tr(
            "autograd anomaly detection left on: every op records a traceback and backward "
            "checks for NaN, a large slowdown (about 2x); remove it once debugging is done"
        )
        out.append(make_finding(analysis, SL207, node_range(analysis, call), message, fix))
    return out


def _remove_statement(analysis: Analysis, index: object, stmt: ast.stmt) -> Fix | None:
    line, end_line = stmt.lineno, stmt.end_lineno or stmt.lineno
    indent = line_indent(analysis, line)
    if analysis.char_col(line, stmt.col_offset) != len(indent):
        return None
    tail = analysis.lines[end_line - 1][analysis.char_col(end_line, stmt.end_col_offset or 0) :].strip()
    if tail and not tail.startswith("#"):
        return None
    parent_body = _body_holding(analysis, stmt)
    if parent_body is not None and len(parent_body) == 1:
        edit = TextEdit(line, 1, end_line, len(analysis.lines[end_line - 1]) + 1, f"{indent}pass")
    elif end_line < len(analysis.lines):
        edit = TextEdit(line, 1, end_line + 1, 1, "")
    else:
        edit = TextEdit(line, 1, end_line, len(analysis.lines[end_line - 1]) + 1, "")
    return Fix(tr("Remove the anomaly-detection call"), (edit,))


def _body_holding(analysis: Analysis, stmt: ast.stmt) -> list[ast.stmt] | None:
    parent = index_of(analysis).parents.get(stmt)
    if parent is None:
        return None
    for name in ("body", "orelse", "finalbody"):
        body = getattr(parent, name, None)
        if isinstance(body, list) and stmt in body:
            return body
    return None


SL207 = register(
    Rule(
        code="SL207",
        name="anomaly-detection-on",
        severity=Severity.WARNING,
        summary="`set_detect_anomaly(True)` / `detect_anomaly()` left in code",
        doc=RuleDoc(
            what="Flags `torch.autograd.set_detect_anomaly(True)` and `torch.autograd.detect_anomaly()` "
            "(as a call, context manager or decorator), whatever the import alias.",
            why="Anomaly mode records a Python traceback for every op in the forward and checks "
            "every backward result for NaN: useful to find where a NaN came from, a large "
            "slowdown (2.2x measured on a small CPU loop) when left on.",
            example="torch.autograd.set_detect_anomaly(True)  # SL207",
            fix="Remove it (the quick fix removes a standalone call), or guard it behind a debug flag.",
        ),
        check=check_anomaly_detection,
    )
)


# ----------------------------------------------------------------------------- SL208
def check_retain_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("retain_grad", ()):
        if not isinstance(call.func, ast.Attribute) or call.args or call.keywords:
            continue
        fact = analysis.fact_of(call.func.value)
        if fact is None and not index_of(analysis).imports_torch:
            continue
        message = tr(
            "`.retain_grad()` keeps the gradient of the non-leaf `{tensor}` "
            "alive after backward (one more tensor of its size per step); drop it when done inspecting"
        ).format(tensor=short(segment(analysis, call.func.value)))
        out.append(make_finding(analysis, SL208, call_from_attr_range(analysis, call), message))
    return out


SL208 = register(
    Rule(
        code="SL208",
        name="retain-grad",
        severity=Severity.INFORMATION,
        summary="`.retain_grad()` keeps a non-leaf gradient alive",
        doc=RuleDoc(
            what="Flags `.retain_grad()` calls.",
            why="Non-leaf gradients are normally freed as soon as backward has passed them on. "
            "`retain_grad()` stores one in `.grad`, a tensor the size of the activation, kept "
            "until the tensor dies: fine while debugging, a memory cost when left in.",
            example="h = model.encoder(x)\nh.retain_grad()  # SL208",
            fix="Remove it once inspection is done, or use a backward hook that reads the "
            "gradient without keeping it.",
        ),
        check=check_retain_grad,
    )
)

