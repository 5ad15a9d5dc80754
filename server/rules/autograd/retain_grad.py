"""SL208 retain-grad: `.retain_grad()` keeps a non-leaf gradient alive."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.torch_api import FACTORIES
from stridelens.server.analysis.values import InstanceValue, ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    enclosing_scope,
    index_of,
    stores_name,
    walk_statements,
)
from stridelens.server.rules.shared.edits import call_from_attr_range, make_finding, segment, short

# Methods whose result may be a leaf: `detach()`, `requires_grad_()`, and those that return
# the tensor itself when nothing changes (`x.float()` of a float tensor, `x.contiguous()`).
_MAY_BE_A_LEAF = frozenset(
    {"detach", "detach_", "requires_grad_", "to", "float", "double", "half", "bfloat16", "contiguous", "cuda",
     "cpu", "type", "type_as", "pin_memory", "share_memory_", "coalesce"}
)  # fmt: skip


def _made_by_an_op(analysis: Analysis, value: ast.expr) -> bool:
    """`a * b`, `a.exp()`, `torch.tanh(a)`, `self.encoder(x)`: a tensor an op computed. Where
    `retain_grad()` does not raise, the tensor requires grad, so such a result has a grad_fn:
    a non-leaf."""
    if isinstance(value, (ast.BinOp, ast.UnaryOp)):
        return True
    if not isinstance(value, ast.Call):
        return False
    func = analysis.values.get(value.func)
    if isinstance(func, TorchRef):
        return func.path.rsplit(".", 1)[-1] not in FACTORIES and func.path not in ("torch.nn.Parameter", "torch.nn.parameter.Parameter")
    if isinstance(func, ModuleValue):
        return func.name != "Identity"  # returns its input
    if isinstance(func, InstanceValue) and func.cls.is_module:
        return True
    if isinstance(value.func, ast.Attribute) and value.func.attr not in _MAY_BE_A_LEAF:
        return analysis.fact_of(value.func.value) is not None  # a method of a tensor: `a.exp()`
    return False


def _non_leaf(analysis: Analysis, call: ast.Call, receiver: ast.expr) -> bool:
    """Whether the facts, or the line that last bound the receiver in this function, prove it
    a non-leaf; a parameter, a loop's item (`for p in model.parameters()`), a factory's
    result or anything unknown is not."""
    if not isinstance(receiver, ast.Name):
        fact = analysis.fact_of(receiver)
        return bool(fact is not None and fact.carries_graph)
    index = index_of(analysis)
    scope = enclosing_scope(index, call)
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    binding: ast.AST | None = None
    for stmt in walk_statements(body):
        if stmt.lineno >= call.lineno:
            break
        # A block's own statements come next in the walk: the last binding wins.
        bound_by = stmt.target if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt
        if stores_name(bound_by, receiver.id) or _sets_requires_grad(stmt, receiver.id):
            binding = stmt
    if isinstance(binding, ast.stmt) and _sets_requires_grad(binding, receiver.id):
        # `t.requires_grad = True`: torch allows it on a leaf only, so past it (in every run
        # that gets there) `t` is one.
        return False
    fact = analysis.fact_of(receiver)
    if fact is not None and fact.carries_graph is not None:
        return fact.carries_graph
    if isinstance(binding, ast.Assign) and len(binding.targets) == 1 and isinstance(binding.targets[0], ast.Name):
        return _made_by_an_op(analysis, binding.value)
    return False


def _sets_requires_grad(stmt: ast.stmt, name: str) -> bool:
    """`name.requires_grad = ...`: torch raises on it for a non-leaf. (Not `requires_grad_()`,
    which a non-leaf that already requires grad takes silently.)"""
    return isinstance(stmt, ast.Assign) and any(
        isinstance(t, ast.Attribute) and t.attr == "requires_grad" and isinstance(t.value, ast.Name) and t.value.id == name
        for t in stmt.targets
    )


def check_retain_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("retain_grad", ()):
        if not isinstance(call.func, ast.Attribute) or call.args or call.keywords:
            continue
        if not _non_leaf(analysis, call, call.func.value):
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
            what="Flags `.retain_grad()` on a non-leaf: a tensor the facts say has a graph, or "
            "one the function computed (`h = x * 2`, `h = a.exp()`, `h = self.encoder(x)`). Silent on "
            "leaves (parameters, `for p in model.parameters()` items, factories, `.detach()`, a "
            "tensor given `t.requires_grad = True`, which torch allows on a leaf only), where "
            "it does nothing, and on tensors whose origin is not known.",
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

