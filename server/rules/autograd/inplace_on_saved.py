"""SL213 inplace-on-saved: an in-place write to a tensor autograd saved for backward.

Backward then raises "one of the variables needed for gradient computation has been modified
by an inplace operation", naming an op torch can see ("output 0 of SigmoidBackward0") but no
line. This rule names both lines.

What each op saves is a table, `SAVES`, and the table is torch's word, not ours:
tests/rules/test_inplace_saved_truth.py runs every entry through real autograd on CPU
(mutate the op's output, then its input, then backward) and checks which write raises.
The rule walks a function (or the module body) in order, giving each binding an identity;
views (`y[0]`, `y.view(...)`, `y.detach()`) share their base's identity, as they share its
version counter.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import Const, ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    BLOCK_STATEMENTS,
    Index,
    call_name,
    enclosing_scope,
    index_of,
    is_inplace_method,
    walk,
    walk_statements,
)
from stridelens.server.rules.shared.edits import make_finding, node_range, segment, short
from stridelens.server.rules.shared.grad_mode import GradMode, callers, local_mode, mode_at
from stridelens.server.rules.shared.parameters import PARAM_ATTRS

# op name -> what it saves for backward: "output" or "input".
SAVES: dict[str, str] = {
    "relu": "output", "sigmoid": "output", "tanh": "output", "exp": "output", "sqrt": "output",
    "softmax": "output", "log_softmax": "output", "rsqrt": "output",
    "gelu": "input", "silu": "input", "elu": "input", "leaky_relu": "input", "mish": "input",
    "hardswish": "input", "log": "input", "sin": "input", "cos": "input", "abs": "input",
}
# nn modules and the functional op they run.
MODULE_OPS: dict[str, str] = {
    "ReLU": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "GELU": "gelu", "SiLU": "silu", "ELU": "elu", "LeakyReLU": "leaky_relu", "Mish": "mish", "Hardswish": "hardswish",
}
_VIEW_METHODS = frozenset(
    {"view", "view_as", "transpose", "permute", "t", "narrow", "select", "unsqueeze", "squeeze", "expand",
     "expand_as", "detach", "unflatten", "as_strided", "diagonal", "unbind", "split", "chunk", "T", "mT"}
)


@dataclass
class _Saved:
    op: str  # the op as written: "torch.sigmoid(h)"
    line: int


class _Walk:
    """One body in source order: which identity each name holds and which are saved."""

    def __init__(self, analysis: Analysis, params: list[str]) -> None:
        self.analysis = analysis
        self.ids: dict[str, int] = {}
        self.next_id = 0
        for name in params:
            self.ids[name] = self.fresh()
        # A write into what the caller passed in (`state.copy_(new)`: a decode cache, an
        # out-buffer) is the function's contract, not an accident: left alone.
        self.param_ids = set(self.ids.values())
        self.saved: dict[int, _Saved] = {}
        self.out: list[Finding] = []
        # An output-saving op that is the statement's value: saved once the target is bound.
        self._pending_output: _Saved | None = None
        self._pending_call: ast.Call | None = None

    # ------------------------------------------------------------------ identities
    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def id_of(self, node: ast.expr) -> int | None:
        """The identity `node` aliases: a name, or a view of one. An item of a value not
        known to be a tensor (`h[key]` of a dict of tensors) aliases nothing."""
        while True:
            if isinstance(node, ast.Name):
                if node.id not in self.ids:
                    self.ids[node.id] = self.fresh()
                return self.ids[node.id]
            if isinstance(node, ast.Subscript):
                if not self.is_tensor(node.value):
                    return None
                node = node.value
            elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEW_METHODS:
                node = node.func.value
            else:
                return None

    # ------------------------------------------------------------------ grad
    def requires_grad(self, node: ast.expr) -> bool | None:
        """True when the facts say `node` requires grad (or carries a graph), False when they
        say not, None when unknown."""
        fact = self.analysis.fact_of(node)
        if fact is not None:
            if fact.requires_grad is True or fact.carries_graph is True:
                return True
            if fact.requires_grad is False:
                return False
        if isinstance(node, ast.Attribute) and node.attr in PARAM_ATTRS - {"grad"}:
            return True
        return None

    def saving_matters(self, node: ast.expr, stmt: ast.stmt) -> bool | None:
        """Whether a save of `node` here is proven real (True: grad on and the facts say `node`
        requires grad), proven not (False: grad off, or it requires none), or unknown (None)."""
        if not _grad_on(self.analysis, stmt):
            return False
        return self.requires_grad(node)

    # ------------------------------------------------------------------ ops
    def op_of(self, call: ast.Call) -> tuple[str, ast.expr, bool] | None:
        """(op name, its tensor argument, in place) for a call the table knows."""
        value = self.analysis.values.get(call.func)
        last = _last_layer(value)
        if last is not None and call.args:
            # `nn.Sequential(nn.Linear(8, 8), nn.Sigmoid())(x)`: its output is the last layer's,
            # saved when that layer saves its output. Whether the save matters is the
            # output's own grad fact (the layers before may have parameters).
            op = MODULE_OPS.get(last.path.rsplit(".", 1)[-1])
            return (op, call, False) if op is not None and SAVES[op] == "output" else None
        if isinstance(value, ModuleValue):
            op = MODULE_OPS.get(value.path.rsplit(".", 1)[-1])
            if op is None or not call.args:
                return None
            inplace = value.kwargs.get("inplace")
            flag = isinstance(inplace, Const) and inplace.value is True
            if not flag and value.args and isinstance(value.args[-1], Const) and value.args[-1].value is True and op == "relu":
                flag = True  # nn.ReLU(True)
            return op, call.args[0], flag
        if isinstance(value, TorchRef):
            name = value.path.rsplit(".", 1)[-1]
            if name in SAVES and call.args:
                inplace = any(k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)
                return name, call.args[0], inplace
            if name.endswith("_") and name[:-1] in SAVES and call.args:
                return name[:-1], call.args[0], True
        func = call.func
        if isinstance(func, ast.Attribute) and not isinstance(value, TorchRef):
            if func.attr in SAVES and self.analysis.fact_of(func.value) is not None:
                return func.attr, func.value, False
        return None

    def visit(self, stmt: ast.stmt) -> None:
        saves: list[tuple[int, _Saved]] = []
        # Saves made while evaluating the right-hand side (inner calls first).
        value = getattr(stmt, "value", None)
        if isinstance(value, ast.expr):
            for node in walk(value):
                if isinstance(node, ast.Call):
                    self.call(node, stmt, saves)
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                    self.mult(node, stmt, saves)
        for ident, saved in saves:
            self.saved.setdefault(ident, saved)
        self.writes(stmt)
        self.bind(stmt)

    def call(self, call: ast.Call, stmt: ast.stmt, saves: list[tuple[int, _Saved]]) -> None:
        found = self.op_of(call)
        if found is None:
            return
        op, arg, inplace = found
        matters = self.saving_matters(arg, stmt)
        text = short(segment(self.analysis, call))
        if inplace and matters is not False:
            self.check_write(arg, call, tr("`{call}` (in place)").format(call=text))
        # Only a proven save: "requires grad" assumed of a forward's unknown input is not one
        # (point coordinates, an FFT of raw data: fresh audits found no true positive there).
        if matters is not True:
            return
        ident = self.id_of(arg)
        if (SAVES[op] == "input" and ident is not None) or (SAVES[op] == "output" and inplace and ident is not None):
            saves.append((ident, _Saved(text, call.lineno)))
        elif SAVES[op] == "output":
            self._pending_output = _Saved(text, call.lineno)
            self._pending_call = call

    def mult(self, node: ast.BinOp, stmt: ast.stmt, saves: list[tuple[int, _Saved]]) -> None:
        """`a * b` saves `a` when `b` requires grad (and `b` when `a` does)."""
        if not _grad_on(self.analysis, stmt):
            return
        text = short(segment(self.analysis, node))
        for kept, other in ((node.left, node.right), (node.right, node.left)):
            if self.requires_grad(other) is True:
                ident = self.id_of(kept)
                if ident is not None:
                    saves.append((ident, _Saved(text, node.lineno)))

    def writes(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if (
                isinstance(func, ast.Attribute)
                and is_inplace_method(func.attr)
                and func.attr[:-1] not in SAVES  # `y.sigmoid_()` is handled as an op
            ):
                self.check_write(func.value, stmt.value, f"`.{func.attr}(...)`")
        elif isinstance(stmt, ast.AugAssign) and self.is_tensor(stmt.target):
            self.check_write(stmt.target, stmt, f"`{short(segment(self.analysis, stmt))}`")
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            target = stmt.targets[0]
            if self.is_tensor(target.value):
                self.check_write(target, stmt, tr("the index assignment"))

    def copies_by_index(self, value: ast.expr) -> bool:
        """`t[mask]`, `t[idx]`, `t[[0, 2]]`: advanced indexing by a bool tensor, a tensor of
        rank ≥ 1 or a list makes a copy, whose writes touch nothing `t`'s ops saved (a 0-d
        integer tensor index still gives a view, as an int does)."""
        if not isinstance(value, ast.Subscript):
            return False
        index = value.slice
        for item in index.elts if isinstance(index, ast.Tuple) else [index]:
            if isinstance(item, (ast.List, ast.ListComp)):
                return True
            fact = self.analysis.fact_of(item)
            if fact is not None and (fact.dtype == "bool" or (fact.shape is not None and len(fact.shape) >= 1)):
                return True
        return False

    def is_tensor(self, node: ast.expr) -> bool:
        ident_node = node.value if isinstance(node, ast.Subscript) else node
        return self.analysis.fact_of(ident_node) is not None or (
            isinstance(ident_node, ast.Name) and ident_node.id in self.ids and self.ids[ident_node.id] in self.saved
        )

    def check_write(self, target: ast.expr, report: ast.AST, how: str) -> None:
        ident = self.id_of(target)
        saved = self.saved.get(ident) if ident is not None else None
        if saved is None or ident is None or ident in self.param_ids:
            return
        name = short(segment(self.analysis, target.value if isinstance(target, ast.Subscript) else target))
        message = tr(
            "{write} modifies `{name}`, which `{op}` (line {line}) saved for backward: "
            "backward raises 'one of the variables needed for gradient computation has been "
            "modified by an inplace operation'; compute out of place (`x = x + y`, `x = f(x)`) "
            "or `.clone()` before writing"
        ).format(write=how, name=name, op=saved.op, line=saved.line)
        finding = make_finding(self.analysis, SL213, node_range(self.analysis, report), message)
        self.out.append(finding)
        del self.saved[ident]  # one report per save

    def bind(self, stmt: ast.stmt) -> None:
        pending, pending_call = self._pending_output, self._pending_call
        self._pending_output = None
        self._pending_call = None
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            for target in targets:
                if not isinstance(target, ast.Name) or value is None:
                    for name in _stored_names(target):  # `a, b = torch.topk(a, k)`: new tensors
                        self.ids[name] = self.fresh()
                    continue
                alias = self.id_of(value) if not isinstance(value, ast.Name) or value.id in self.ids else None
                if (
                    isinstance(value, (ast.Subscript, ast.Call, ast.Attribute))
                    and alias is not None
                    and _is_view(value)
                    and not self.copies_by_index(value)
                ):
                    self.ids[target.id] = alias
                    continue
                ident = self.ids[target.id] = self.fresh()
                if pending is not None and pending_call is value:
                    self.saved[ident] = pending
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            for name in _stored_names(stmt.target):
                self.ids[name] = self.fresh()


def _last_layer(value: object) -> ModuleValue | None:
    """The last layer of an `nn.Sequential` of known layers (not one repeated n times)."""
    if not (isinstance(value, ModuleValue) and value.path.rsplit(".", 1)[-1] == "Sequential") or value.repeated:
        return None
    layers = value.children or tuple(a for a in value.args if isinstance(a, ModuleValue))
    last = layers[-1] if layers else None
    return last if isinstance(last, ModuleValue) and _last_layer(last) is None else None


def _stored_names(target: ast.expr) -> list[str]:
    return [n.id for n in walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _is_view(value: ast.expr) -> bool:
    if isinstance(value, ast.Subscript):
        return True
    if isinstance(value, ast.Attribute):
        return value.attr in ("T", "mT")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _VIEW_METHODS


def _grad_on(analysis: Analysis, stmt: ast.stmt) -> bool:
    """Whether `stmt` runs with grad on, or may be taken to: on by its context or every
    caller's, or, where the file does not decide (no caller, or callers that disagree), in
    code on the training path (`_training_path`). A `generate`/`predict` method nobody in the
    file calls runs in its callers' mode elsewhere, often under no_grad: no proof, no finding."""
    mode = mode_at(analysis, stmt)
    if mode is not GradMode.UNKNOWN:
        return mode is GradMode.ON
    _, fn = local_mode(analysis, stmt)
    return fn is None or _training_path(analysis, fn, set())


_BACKWARD_CALLS = frozenset({"backward", "grad"})


def _training_path(analysis: Analysis, fn: ast.FunctionDef | ast.AsyncFunctionDef, seen: set[ast.AST]) -> bool:
    """A module's `forward`, a function that calls `backward()`/`autograd.grad` (which raise
    without a graph), or one that only such functions call."""
    if fn in seen:
        return False
    seen.add(fn)
    if _forward_of_module(analysis, fn):
        return True
    if fn in _functions_calling_backward(analysis):
        return True
    sites = callers(analysis, fn)
    outers = [local_mode(analysis, call)[1] for call in sites]
    return bool(sites) and all(outer is not None and _training_path(analysis, outer, seen) for outer in outers)


def _functions_calling_backward(analysis: Analysis) -> set[ast.AST]:
    """The functions (each enclosing one, nested defs included) holding a `backward()` or
    `autograd.grad(...)` call: from the calls up, once per file, not per statement asked."""
    index = index_of(analysis)
    found = getattr(index, "_sl213_backward_functions", None)
    if isinstance(found, set):
        return found
    found = set()
    for name in _BACKWARD_CALLS:
        for call in index.by_name.get(name, ()):
            if not isinstance(call.func, ast.Attribute):
                continue
            node = index.parents.get(call)
            while node is not None:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.add(node)
                node = index.parents.get(node)
    index._sl213_backward_functions = found  # type: ignore[attr-defined]
    return found


def _forward_of_module(analysis: Analysis, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    parent = index_of(analysis).parents.get(fn)
    if not isinstance(parent, ast.ClassDef) or not fn.name.startswith(("forward", "_forward")):
        return False
    return any("Module" in (segment(analysis, base) or "") for base in parent.bases)


def _inplace_module(value: object) -> bool:
    """`nn.ReLU(inplace=True)`, `nn.ReLU(True)`: a call of it writes its input."""
    if not isinstance(value, ModuleValue):
        return False
    flag = value.kwargs.get("inplace")
    positional = value.args[-1] if value.args else None
    return any(isinstance(v, Const) and v.value is True for v in (flag, positional))


def _scope_of_body(analysis: Analysis, body: list[ast.stmt]) -> ast.AST | None:
    parent = index_of(analysis).parents.get(body[0])
    return parent if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _scopes_with_writes(analysis: Analysis) -> set[ast.AST | None]:
    """The functions (None: the module body) holding an in-place write, found from the
    index's writes up to their function: most functions have none."""
    index = index_of(analysis)
    writes: list[ast.AST] = [*index.aug_assigns, *index.subscript_stores]
    for name, calls in index.by_name.items():
        if is_inplace_method(name):
            writes.extend(calls)
    # ... and something that saves: an op of the table, or a product (`a * w` saves `a`),
    # which can only matter for an index write or an in-place op.
    savers: list[ast.AST] = [*index.subscript_stores]
    values = analysis.values
    for call in index.calls:
        value = values.get(call.func)
        inplace_flag = bool(call.keywords) and any(k.arg == "inplace" for k in call.keywords)
        if inplace_flag or _inplace_module(value):
            writes.append(call)
        name = call_name(call)
        if (
            name in SAVES
            or name.removesuffix("_") in SAVES
            or (isinstance(value, ModuleValue) and value.path.rsplit(".", 1)[-1] in MODULE_OPS)
            or _last_layer(value) is not None
        ):
            savers.append(call)
    return {_scope_of(index, n) for n in writes} & {_scope_of(index, n) for n in savers}


def _scope_of(index: Index, node: ast.AST) -> ast.AST | None:
    """The function whose body holds `node`; None for the module body (and lambdas)."""
    scope = enclosing_scope(index, node)
    return scope if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def check_inplace_on_saved(analysis: Analysis) -> list[Finding]:
    index = index_of(analysis)
    out: list[Finding] = []
    bodies: list[tuple[list[ast.stmt], list[str]]] = [(analysis.tree.body, [])]
    bodies += [(fn.body, [a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]) for fn in index.functions]
    candidates = _scopes_with_writes(analysis)
    for body, params in bodies:
        if not body or _scope_of_body(analysis, body) not in candidates:
            continue  # nothing written in place here: nothing to check
        walk = _Walk(analysis, params)
        for node in walk_statements(body):
            if not isinstance(node, (*BLOCK_STATEMENTS, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk.visit(node)  # (a block's own statements come next in the walk)
        out.extend(walk.out)
    return out


SL213 = register(
    Rule(
        code="SL213",
        name="inplace-on-saved",
        severity=Severity.ERROR,
        summary="in-place write to a tensor autograd saved for backward (backward raises)",
        doc=RuleDoc(
            what="Flags an in-place write (`y.mul_(2)`, `h += res`, `x[:, 0] = ...`, "
            "`nn.ReLU(inplace=True)`, `F.relu(x, inplace=True)`) to a tensor, or a view of it, "
            "that an earlier op of the same function saved for backward, with grad on. Ops "
            "that save their output: relu, sigmoid, tanh, exp, sqrt, rsqrt, softmax, "
            "log_softmax (and their nn modules), so `h = act(h); h += res` is flagged. Ops "
            "that save their input: gelu, silu, elu, leaky_relu, mish, hardswish, log, sin, "
            "cos, abs, so the same line after GELU is not. `a * b` saves `a` when `b` requires "
            "grad: `out[..., 0] = out[..., 0] * self.gain` is flagged. Only where the facts say "
            "the tensor requires grad (a layer's output, a parameter): not on a `forward`'s "
            "unknown input, which may be raw data (point coordinates, an FFT of a signal). "
            "Silent under no_grad and where the facts say no grad is required; where the file does not decide the grad mode (a method nobody "
            "here calls, callers in both modes) only code on the training path is checked: a "
            "module's `forward`, a function that calls `backward()`/`autograd.grad`, and what "
            "only they call (a `generate` called under no_grad from another file is not); "
            "and for writes into the function's own parameters (what the "
            "caller passed in: `state.copy_(new)` into a decode cache is the function's "
            "contract).",
            why="Autograd checks at backward that every saved tensor still has the version it "
            "had when saved. An in-place write bumps the version, and backward raises far "
            "from the write, naming an internal op (`output 0 of SigmoidBackward0`, sometimes "
            "`AsStrided`), never a line.",
            example="h = torch.sigmoid(self.fc(x))\nh += residual  # SL213: sigmoid saved h",
            fix="Compute out of place (`h = h + residual`), or `.clone()` the tensor before the "
            "in-place write.",
        ),
        check=check_inplace_on_saved,
    )
)
