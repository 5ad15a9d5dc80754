"""SL216 requires-grad-on-non-leaf: `requires_grad` set on a view, copy or `.data` of a parameter, or on a non-leaf."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import InstanceValue, ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared import grad_mode
from stridelens.server.rules.shared.ast_index import (
    enclosing_scope,
    enclosing_stmt,
    index_of,
    walk_body,
)
from stridelens.server.rules.shared.edits import (
    dot_attr_range,
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
)
from stridelens.server.rules.shared.grad_mode import GradMode
from stridelens.server.rules.shared.parameters import is_param_loop_name

# Ops whose result is a view of their input (a non-leaf when the input requires grad).
_VIEW_METHODS = frozenset(
    {"t", "transpose", "permute", "view", "view_as", "narrow", "select", "unsqueeze", "squeeze",
     "expand", "expand_as", "diagonal", "unfold", "movedim", "moveaxis", "swapaxes", "swapdims",
     "unflatten", "as_strided", "reshape", "reshape_as", "flatten"}
)  # fmt: skip
_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Casts that copy a float32 parameter (`.float()` of one returns it unchanged: not here).
_CAST_DTYPES = {"half": "float16", "bfloat16": "bfloat16", "double": "float64"}
_DTYPE_PATHS = {
    "torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
    "torch.float64": "float64", "torch.double": "float64", "torch.float32": "float32", "torch.float": "float32",
}  # fmt: skip
# Ops that may return their input itself (`p.float()` of fp32, `p.contiguous()`, `p.to(device)`
# where it already lives, `p.cuda()` after `model.cuda()`): transparent for the verdict.
_MAYBE_SELF = frozenset({"float", "contiguous", "cpu", "cuda", "to", "type", "type_as"})
_PARAM_ATTRS = frozenset({"weight", "bias"})


@dataclass(frozen=True)
class Subject:
    kind: str  # "view" | "copy" | "detached" | "nonleaf"
    root: str  # the parameter's text, or the non-leaf's
    how: str  # the op that made it: "[...]", ".T", ".half()", ".data"


def _dtype_of_to(analysis: Analysis, call: ast.Call) -> str | None:
    candidates = [*call.args[:1], *[k.value for k in call.keywords if k.arg == "dtype"]]
    for arg in candidates:
        value = analysis.values.get(arg)
        if isinstance(value, TorchRef) and value.path in _DTYPE_PATHS:
            return _DTYPE_PATHS[value.path]
    return None


def _param_root(analysis: Analysis, node: ast.expr) -> bool:
    """A parameter (or another leaf that requires grad): the engine says so, or `m.weight`,
    `m.bias`, a `for p in m.parameters()` name."""
    value = analysis.values.get(node)
    fact = analysis.fact_of(node)
    if fact is not None and fact.requires_grad is True and fact.carries_graph is False and not fact.grad_unknown:
        return fact.detached_from is None and fact.is_view is not True
    if isinstance(value, (InstanceValue, ModuleValue, TorchRef)) or (fact is not None and fact.requires_grad is False):
        return False
    if isinstance(node, ast.Attribute) and node.attr in _PARAM_ATTRS:
        return isinstance(node.value, (ast.Name, ast.Attribute, ast.Subscript))
    return isinstance(node, ast.Name) and is_param_loop_name(analysis, node)


def classify_chain(analysis: Analysis, node: ast.expr) -> Subject | None:
    """What `node` is when it is a chain of view/copy/detach ops on a parameter:
    `self.weight[0]`, `emb.weight.data[:, :2]`, `p.t()`, `w.half()`. None otherwise (and for a
    chain whose every op may return the parameter itself: `p.float()`, `p.to(device)`)."""
    ops: list[tuple[str, str]] = []  # outermost first
    current = node
    while True:
        if isinstance(current, ast.Subscript):
            ops.append(("view", "[...]"))
            current = current.value
        elif isinstance(current, ast.Attribute) and current.attr in _VIEW_ATTRS:
            ops.append(("view", f".{current.attr}"))
            current = current.value
        elif isinstance(current, ast.Attribute) and current.attr == "data":
            ops.append(("detached", ".data"))
            current = current.value
        elif isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute):
            method = current.func.attr
            receiver = current.func.value
            if method in _VIEW_METHODS:
                ops.append(("view", f".{method}()"))
            elif method == "detach":
                ops.append(("detached", ".detach()"))
            elif method == "detach_":
                ops.append(("self", ".detach_()"))  # detaches the tensor itself and returns it
            elif method == "clone":
                ops.append(("copy", ".clone()"))
            elif method in _CAST_DTYPES or method == "to":
                target = _CAST_DTYPES.get(method) or _dtype_of_to(analysis, current)
                known = analysis.fact_of(receiver)
                if target is None or target == "float32" or (known is not None and known.dtype == target):
                    ops.append(("self", f".{method}()"))
                else:
                    ops.append(("copy", f".{method}({'...' if current.args or current.keywords else ''})"))
            elif method in _MAYBE_SELF:
                ops.append(("self", f".{method}()"))
            else:
                return None
            current = receiver
        else:
            break
    significant = [op for op in ops if op[0] != "self"]
    if not significant or not _param_root(analysis, current):
        return None
    root = segment(analysis, current)
    if any(kind == "detached" for kind, _ in significant):
        how = next(how for kind, how in significant if kind == "detached")
        return Subject("detached", root, how)
    kind, how = significant[0]
    return Subject(kind, root, how)


def _binding(analysis: Analysis, name: ast.Name, stmt: ast.stmt) -> ast.expr | None:
    """The value last assigned to `name` before `stmt` in the same function (plain `=`)."""
    index = index_of(analysis)
    scope = enclosing_scope(index, stmt)
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    found: ast.expr | None = None
    for node in walk_body(body if isinstance(body, list) else []):
        if getattr(node, "lineno", 0) >= stmt.lineno:
            break
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets):
            found = node.value
    return found


def _nonleaf(analysis: Analysis, node: ast.expr, stmt: ast.stmt) -> Subject | None:
    """A tensor the engine knows is part of a graph (`carries_graph`), except one bound to an
    op that may return a parameter itself (`w = p.float()`)."""
    fact = analysis.fact_of(node)
    if fact is None or fact.carries_graph is not True or _maybe_self_of_param(analysis, node):
        return None
    if isinstance(node, ast.Name):
        bound = _binding(analysis, node, stmt)
        if bound is not None:
            chain = classify_chain(analysis, bound)
            if chain is not None:
                return Subject(chain.kind, chain.root, chain.how) if chain.kind != "detached" else None
            if _maybe_self_of_param(analysis, bound):
                return None
    return Subject("nonleaf", segment(analysis, node), "")


def _maybe_self_of_param(analysis: Analysis, node: ast.expr) -> bool:
    current = node
    while isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute) and current.func.attr in _MAYBE_SELF:
        current = current.func.value
    return current is not node and _param_root(analysis, current)


@dataclass(frozen=True)
class Target:
    node: ast.AST  # the statement/call to report
    subject: ast.expr
    value: bool | None  # the flag set; None when not a literal
    form: str  # "attr" (`x.requires_grad = v`) | "method" (`x.requires_grad_(v)`)
    discarded: bool  # the changed tensor is not kept (a temporary)


def literal_flag(node: ast.expr | None) -> bool | None:
    if node is None:
        return True
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, bool) else None


def _targets(analysis: Analysis) -> list[Target]:
    index = index_of(analysis)
    out: list[Target] = []
    for attr in index.attributes:
        if attr.attr != "requires_grad" or not isinstance(attr.ctx, ast.Store):
            continue
        stmt = index.parents.get(attr)
        if isinstance(stmt, ast.Assign) and attr in stmt.targets:
            value = stmt.value.value if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, bool) else None
            out.append(Target(stmt, attr.value, value, "attr", not isinstance(attr.value, ast.Name)))
    for call in index.by_name.get("requires_grad_", ()):
        if not isinstance(call.func, ast.Attribute):
            continue
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
        stmt = enclosing_stmt(index, call)
        kept = not (isinstance(stmt, ast.Expr) and stmt.value is call)
        out.append(Target(call, call.func.value, literal_flag(arg), "method", not kept and not isinstance(call.func.value, ast.Name)))
    for call in index.by_name.get("setattr", ()):
        if isinstance(call.func, ast.Name) and len(call.args) == 3:
            key = call.args[1]
            if isinstance(key, ast.Constant) and key.value == "requires_grad":
                out.append(Target(call, call.args[0], literal_flag(call.args[2]), "attr", not isinstance(call.args[0], ast.Name)))
    return out


def _raises() -> str:
    return tr("raises `RuntimeError: you can only change requires_grad flags of leaf variables`")


def _alternative(p: str, sentence: bool = False) -> str:
    """What to do instead; `sentence` when it starts a sentence of its own."""
    if sentence:
        return tr(
            "Freeze all of `{p}` (`{p}.requires_grad_(False)`) or mask part of its gradient with a "
            "hook (`{p}.register_hook(lambda g: g * mask)`)"
        ).format(p=p)
    return tr(
        "freeze all of `{p}` (`{p}.requires_grad_(False)`) or mask part of its gradient with a "
        "hook (`{p}.register_hook(lambda g: g * mask)`)"
    ).format(p=p)


def _message(subject: Subject, expr: str, target: Target, mode: GradMode) -> str | None:
    p = subject.root
    method_true = target.form == "method" and target.value is True
    setting = tr("`.requires_grad_(True)`") if method_true else tr("setting `requires_grad`")
    no_op_true = target.form == "method" and target.value is True  # never raises
    if subject.kind == "detached":
        return tr(
            "`{expr}` is a detached alias of `{p}` (`{how}` is a new tensor object on the "
            "same storage): {setting} on it changes only that throwaway object, never `{p}` "
            "(no error, no effect; torch 2.13); {alternative}"
        ).format(expr=expr, p=p, how=subject.how, setting=setting, alternative=_alternative(p))
    if subject.kind in ("view", "copy"):
        what = tr("a view") if subject.kind == "view" else tr("a copy (`{how}`)").format(how=subject.how)
        if no_op_true:
            return tr(
                "`{expr}` is {what} of `{p}`, not `{p}` itself: `.requires_grad_(True)` on it is a "
                "silent no-op (or, if `{p}` is frozen, flags only the temporary); `{p}` is "
                "unchanged. Set the flag on `{p}` itself"
            ).format(expr=expr, what=what, p=p)
        if mode is GradMode.OFF:
            fate = tr("silently ignored") if subject.kind == "view" else tr("set on a throwaway copy")
            return tr(
                "`{expr}` is {what} of `{p}`, not `{p}` itself: under `no_grad` the flag is {fate} "
                "and `{p}` stays as it was (torch 2.13); {alternative}"
            ).format(expr=expr, what=what, p=p, fate=fate, alternative=_alternative(p))
        return tr(
            "`{expr}` is {what} of `{p}`, not a leaf: {setting} on it {raises} with grad on and "
            "is silently ignored under `no_grad` (torch 2.13); `{p}` never changes. {alternative}"
        ).format(expr=expr, what=what, p=p, setting=setting, raises=_raises(), alternative=_alternative(p, sentence=True))
    # an engine-known non-leaf
    if no_op_true or mode is GradMode.OFF:
        return None  # a no-op (it already requires grad), or a leaf under no_grad
    name = expr if len(expr) <= 30 else "x"
    return tr(
        "`{expr}` is not a leaf (it is computed from tensors that require grad): {setting} on it "
        "{raises} with grad on (torch 2.13). To cut the graph use `{name}.detach()`; for a new "
        "leaf to optimise, `{name}.detach().requires_grad_()`"
    ).format(expr=expr, setting=setting, raises=_raises(), name=name)


def _fix(analysis: Analysis, target: Target, subject: Subject) -> Fix | None:
    """`p.data.requires_grad = False` -> `p.requires_grad = False`: the flag lands on the
    parameter, as written. Only for `.data` / `.detach()` directly on the parameter."""
    node = target.subject
    if subject.kind != "detached":
        return None
    if isinstance(node, ast.Attribute) and node.attr == "data" and _param_root(analysis, node.value):
        where = dot_attr_range(analysis, node)
        title = tr("Set the flag on `{p}` itself").format(p=subject.root)
        return Fix(title, (replace_range(where, ""),)) if where[0] == where[2] else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" and not node.args and _param_root(analysis, node.func.value):
        start = dot_attr_range(analysis, node.func)
        _, _, end_line, end_col = node_range(analysis, node)
        if start[0] == end_line:
            title = tr("Set the flag on `{p}` itself").format(p=subject.root)
            return Fix(title, (replace_range((start[0], start[1], end_line, end_col), ""),))
    return None


def check_requires_grad_on_non_leaf(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for target in _targets(analysis):
        stmt = enclosing_stmt(index, target.node)
        if stmt is None:
            continue
        subject = classify_chain(analysis, target.subject) if target.discarded else None
        if subject is None:
            subject = _nonleaf(analysis, target.subject, stmt)
        if subject is None:
            continue
        mode = grad_mode.mode_at(analysis, stmt)
        expr = short(segment(analysis, target.subject))
        message = _message(subject, expr, target, mode)
        if message is None:
            continue
        fix = _fix(analysis, target, subject) if target.value is not None and target.discarded else None
        out.append(make_finding(analysis, SL216, node_range(analysis, target.node), message, fix))
    return out


SL216 = register(
    Rule(
        code="SL216",
        name="requires-grad-on-non-leaf",
        severity=Severity.WARNING,
        summary="`requires_grad` set on a view, copy or `.data` of a parameter, or on a non-leaf",
        doc=RuleDoc(
            what="Flags `x.requires_grad = ...`, `x.requires_grad_(...)` (also "
            "`requires_grad_(requires_grad=...)`) and `setattr(x, 'requires_grad', ...)` where "
            "`x` is a temporary view, copy or detached alias of a parameter (`self.weight[0]`, "
            "`emb.weight[:, :2]`, `layer.weight.T`, `p.t()`, `w.half()` / `.double()` / "
            "`.bfloat16()` / `.to(torch.float16)`, `.clone()`, `p.data[...]`, `p.detach()`), whose "
            "result the statement does not keep; and a tensor the analysis knows is part of a "
            "graph (a non-leaf) when the flag is set, not merely re-asserted. Parameters are "
            "`m.weight` / `m.bias`, names from `for p in m.parameters()`, and leaves the "
            "analysis knows require grad. Silent: for ops that may return the parameter itself "
            "(`p.float()` of an fp32 parameter, `.contiguous()`, `.to(device)`, `.cuda()`), for "
            "`y = p.detach().requires_grad_()` (a new leaf that is kept), for "
            "`nonleaf.requires_grad_(True)` (a no-op), and under `no_grad` for non-leaves.",
            why="Measured on torch 2.13: with grad on, setting the flag on a view or copy of a "
            "parameter that requires grad raises `RuntimeError: you can only change requires_grad "
            "flags of leaf variables` (`= False`, `= True` and `requires_grad_(False)` alike; "
            "`requires_grad_(True)` is a silent no-op). Under `no_grad` the same line is silently "
            "ignored and the parameter stays trainable. Through `.data` / `.detach()` it never "
            "raises and never reaches the parameter: transformers' DAB-DETR writes "
            "`self.query_refpoint_embeddings.weight.data[:, :2].requires_grad = False` to freeze "
            "two columns, which does nothing. `requires_grad` is a property of a whole leaf "
            "tensor; part of a parameter cannot be frozen. On other non-leaves, `= True/False` "
            "and `requires_grad_(False)` raise the same error; `requires_grad_(True)` is a no-op. "
            "`p.float()` on an fp32 parameter returns `p` itself, so setting the flag there is "
            "legal and not flagged.",
            example="emb.weight[:, :2].requires_grad = False  # SL216\n"
            "model.fc.weight.data.requires_grad = False  # SL216",
            fix="Freeze the whole parameter (`p.requires_grad_(False)`), or keep it trainable and "
            "zero the frozen part of its gradient with a hook: `p.register_hook(lambda g: g * mask)`. "
            "For `p.data.requires_grad = ...` / `p.detach().requires_grad_(...)` the quick fix sets "
            "the flag on `p` itself, which is what the line says it wants. To stop gradients "
            "through a non-leaf, use `x.detach()`.",
        ),
        check=check_requires_grad_on_non_leaf,
    )
)


