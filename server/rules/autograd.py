"""Autograd rules: graphs kept alive or freed, detached storage, grad flags (SL201–SL203, SL205, SL207, SL208)."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import (
    ClassInfo,
    Const,
    FunctionValue,
    InstanceValue,
    ModuleValue,
    Number,
    SizeValue,
    TorchRef,
)
from stridelens.server.rules import grad_mode, register
from stridelens.server.rules._helpers import (
    BLOCK_STATEMENTS,
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
    guarding_tests,
    index_of,
    inside,
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
    walk_statements,
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


# Methods whose result carries no autograd graph, and builtins that make a Python number.
_GRAPH_CUTS = frozenset({"detach", "detach_", "item", "tolist", "numpy"})
_NUMBER_BUILTINS = frozenset({"float", "int", "bool", "len", "round"})
# Methods whose result is the receiver's tensor or a view/copy of it with no tensor saved
# for backward (the graph above it is the receiver's).
_ALIAS_METHODS = frozenset(
    {"view", "view_as", "reshape", "reshape_as", "squeeze", "unsqueeze", "flatten", "transpose", "permute", "t",
     "expand", "expand_as", "narrow", "select", "contiguous", "clone", "to", "float", "half", "double", "bfloat16",
     "cpu", "cuda", "unflatten", "movedim"}
)  # fmt: skip
# Methods whose arguments are sizes, dims, devices or dtypes (or a tensor read for its shape).
_SIZE_ARG_METHODS = frozenset(
    {"repeat", "expand_as", "view_as", "reshape_as", "type", "type_as", "new_zeros", "new_ones", "new_empty",
     "new_full", "size", "chunk", "split", "sum", "mean", "amax", "amin", "max", "min", "softmax", "log_softmax",
     "argmax", "argmin", "norm", "std", "var", "roll", "flip", "repeat_interleave"}
)  # fmt: skip
_NOT_DATA = (TorchRef, ModuleValue, InstanceValue, ClassInfo, FunctionValue, Const, SizeValue, Number)


def graph_names(analysis: Analysis, expr: ast.AST) -> list[ast.Name]:
    """The names whose autograd graph may flow into `expr`'s value: not under `.detach()`,
    `.item()`, `.tolist()`, `.data` or `float(...)`, not a callee (`model` of `model(x)`,
    `self.fc` of `self.fc(x)`), not a module, class or torch name."""
    found: list[ast.Name] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            if not isinstance(analysis.values.get(node), _NOT_DATA):
                found.append(node)
            return
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            return
        if isinstance(node, ast.Attribute):
            if node.attr != "data":
                visit(node.value)
            return
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _GRAPH_CUTS:
                return
            if isinstance(func, ast.Name) and func.id in _NUMBER_BUILTINS:
                return
            if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Subscript, ast.Call)):
                visit(func.value)  # `out.sum()`, `outs[0].mean()`: a method of a value
                if func.attr in _ALIAS_METHODS or func.attr in _SIZE_ARG_METHODS:
                    return  # `x.to(device)`, `x.view(b, -1)`, `x.expand_as(y)`: no graph in the arguments
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                visit(arg)
            return
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(expr)
    return found


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
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ALIAS_METHODS:
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


# ----------------------------------------------------------------------------- SL202
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


# Words of a debug switch, and the roots of configuration objects (`args.debug`,
# `config.detect_anomaly`, `cfg.TRAIN.CHECK_NAN`, `os.environ.get("DEBUG")`).
_FLAG_WORDS = re.compile(r"debug|anomal|detect|sanity|check|verbose|flag|strict|profil|diagnos", re.IGNORECASE)
_CONFIG_ROOTS = frozenset(
    {"args", "arguments", "opt", "opts", "options", "config", "cfg", "conf", "configs", "hparams", "hp", "flags",
     "FLAGS", "settings", "params", "environ", "getenv", "cli", "parsed"}
)  # fmt: skip


def _flag_condition(test: ast.expr) -> bool:
    """`test` reads a configuration value or a debug switch: a name or attribute path with a
    word like debug / anomaly / check in it, rooted at args / config / cfg / opt / flags /
    os.environ, or any part of it so rooted."""
    for node in walk(test):
        path = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if path is None:
            continue
        parts = path.split(".")
        if any(part in _CONFIG_ROOTS or part.lower() in _CONFIG_ROOTS for part in parts):
            return True
        if _FLAG_WORDS.search(path):
            return True
    return False


def _flag_guarded(analysis: Analysis, call: ast.Call) -> bool:
    """Under a condition on a configuration value or debug flag (`if args.debug:`, `with
    detect_anomaly() if cfg.anomaly else nullcontext():`), or after an early exit on one."""
    return any(_flag_condition(test) for test, _ in guarding_tests(index_of(analysis), call))


def check_anomaly_detection(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for call in [*index.by_name.get("set_detect_anomaly", ()), *index.by_name.get("detect_anomaly", ())]:
        path = torch_path(analysis, call.func)
        if path in _ANOMALY_SET:
            flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                continue  # `set_detect_anomaly(args.detect_anomaly)`: the flag decides
        elif path not in _ANOMALY_CTX:
            continue
        if _flag_guarded(analysis, call):
            continue  # the rule's own advice: behind a debug flag
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
            "(as a call, context manager or decorator), whatever the import alias. Silent when "
            "the flag is not the literal True (`set_detect_anomaly(args.detect_anomaly)`), and "
            "when the call runs under a condition on a configuration value or debug flag, which "
            "is this rule's own advice: an `if` or conditional expression (or an earlier `if` "
            "that returns early) testing a name or attribute rooted at `args`, `config`, `cfg`, "
            "`opt`, `flags`, `hparams`, `settings` or `os.environ`, or one whose name says debug, "
            "anomaly, detect, check, verbose, strict or flag (`if config.detect_anomaly:`, `if "
            "args.debug:`, `if os.environ.get('ANOMALY'):`). A module-level call, or one under "
            "`if __name__ == '__main__':` or another condition, is still flagged.",
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

