"""Which names and expressions are parameters or buffers: `m.weight`, names bound by
`for p in m.parameters()` (where that loop binds them), `state_dict()` entries, and
expressions certainly a tensor."""

from __future__ import annotations

import ast

from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis.values import InstanceValue, ModuleValue, TorchRef
from stridelens.server.rules.shared.ast_index import (
    dotted,
    enclosing_scope,
    enclosing_stmt,
    index_of,
    stores_name,
)

PARAM_ATTRS = frozenset({"weight", "bias", "grad"})


_PARAM_METHODS = frozenset({"parameters", "buffers"})
_NAMED_PARAM_METHODS = frozenset({"named_parameters", "named_buffers"})


def _param_source(node: ast.expr, dicts: set[str]) -> str | None:
    """What iterating `node` gives: "tensor" (`m.parameters()`, `group["params"]`), "named"
    ((name, tensor) pairs: `m.named_parameters()`, `m.state_dict().items()`), or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in _PARAM_METHODS:
            return "tensor"
        if method in _NAMED_PARAM_METHODS:
            return "named"
        if method == "items" and _is_param_dict(node.func.value, dicts):
            return "named"
        if method == "values" and _is_param_dict(node.func.value, dicts):
            return "tensor"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "params":
        return "tensor"  # an optimizer's `for p in group["params"]`
    return None


def _is_param_dict(node: ast.expr, dicts: set[str]) -> bool:
    """`m.state_dict()`, `dict(m.named_parameters())`, or a name/attribute bound to one."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict":
            return True
        if isinstance(node.func, ast.Name) and node.func.id == "dict" and len(node.args) == 1:
            return _param_source(node.args[0], dicts) == "named"
        return False
    if isinstance(node, ast.IfExp):
        return _is_param_dict(node.body, dicts) and _is_param_dict(node.orelse, dicts)
    name = dotted(node)
    return name is not None and name in dicts


def _bind_param_target(target: ast.expr, source: str | None, names: set[str]) -> None:
    if source == "tensor" and isinstance(target, ast.Name):
        names.add(target.id)
    elif source == "named" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
        if isinstance(target.elts[1], ast.Name):
            names.add(target.elts[1].id)


def _loop_param_names(loop: ast.For | ast.AsyncFor, dicts: set[str]) -> set[str]:
    """The names this one loop binds to parameters or buffers (see `param_loop_names`)."""
    names: set[str] = set()
    it, target = loop.iter, loop.target
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            it, target = it.args[0], target.elts[1]
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip":
        if isinstance(target, ast.Tuple) and len(target.elts) == len(it.args):
            for arg, sub in zip(it.args, target.elts, strict=True):
                _bind_param_target(sub, _param_source(arg, dicts), names)
        return names
    _bind_param_target(target, _param_source(it, dicts), names)
    return names


def param_loop_names(analysis: Analysis) -> set[str]:
    """Names bound to parameters or buffers by a loop: `for p in m.parameters()`, `for n, p in
    m.named_parameters()`, `for k, v in m.state_dict().items()`, `for p in group["params"]`,
    and `zip(...)` of those (`for a, b in zip(m.parameters(), ema.parameters())`)."""
    index = index_of(analysis)
    cached = getattr(index, "_param_names", None)
    if isinstance(cached, set):
        return cached
    dicts = param_dict_names(analysis)
    names: set[str] = set()
    for loop in index.loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            names |= _loop_param_names(loop, dicts)
    index._param_names = names  # type: ignore[attr-defined]
    return names


def is_param_loop_name(analysis: Analysis, node: ast.expr) -> bool:
    """`node` is a name a parameter loop binds *here*: the innermost enclosing `for` that binds
    the name is a parameter loop, or (no enclosing loop binds it) one in the same function
    does. A name is not one file-wide: `for param in m.parameters()` in one method says
    nothing of `for param in m.named_parameters()` (a `(name, param)` tuple) in another."""
    if not isinstance(node, ast.Name) or node.id not in param_loop_names(analysis):
        return False
    index = index_of(analysis)
    dicts = param_dict_names(analysis)
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(parent, (ast.For, ast.AsyncFor)) and stores_name(parent.target, node.id):
            return node.id in _loop_param_names(parent, dicts)
        parent = index.parents.get(parent)
    scope = enclosing_scope(index, node)
    return any(
        isinstance(loop, (ast.For, ast.AsyncFor)) and node.id in _loop_param_names(loop, dicts) and enclosing_scope(index, loop) is scope
        for loop in index.loops
    )


def param_dict_names(analysis: Analysis) -> set[str]:
    """Names and `self.` attributes bound to a dict of parameters (`sd = m.state_dict()`)."""
    index = index_of(analysis)
    cached = getattr(index, "_param_dicts", None)
    if isinstance(cached, set):
        return cached
    dicts: set[str] = set()
    # From the (few) calls that build one up to their statement: no walk of the tree.
    for call in [*index.by_name.get("state_dict", ()), *index.by_name.get("dict", ())]:
        stmt = enclosing_stmt(index, call)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            name = dotted(stmt.targets[0])
            if name is not None and _is_param_dict(stmt.value, dicts):
                dicts.add(name)
    index._param_dicts = dicts  # type: ignore[attr-defined]
    return dicts


def is_tensor_expr(analysis: Analysis, node: ast.expr) -> bool:
    """Certainly a tensor: the engine says so, or it is a parameter-like attribute."""
    value = analysis.values.get(node)
    if isinstance(value, TensorFact):
        return True
    if isinstance(value, (InstanceValue, ModuleValue, TorchRef)):
        return False
    if isinstance(node, ast.Attribute) and node.attr in PARAM_ATTRS:
        return True
    if isinstance(node, ast.Subscript) and _is_param_dict(node.value, param_dict_names(analysis)):
        return True  # `state_dict[k]`, `src_parameters[k]`
    return is_param_loop_name(analysis, node)


