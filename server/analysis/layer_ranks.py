"""Ranks a forward's layers prove for its input: `out = F.relu(self.bn1(self.conv1(x)))` with
`bn1` an `nn.BatchNorm2d` runs only where `x` has 4 dims (BatchNorm2d raises on any other
rank; the conv and the relu keep it).

Asked for a method's own pass, beside the size unpacking (`B, T, C = x.size()`) of
`interp_sizes.infer_parameter_ranks`: the evidence must be in a top-level statement before the
parameter is rebound. Only layers that accept exactly one rank prove anything; the ones in
between must keep the rank (a conv, a norm, an activation, dropout, padding, Linear).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from stridelens.server.analysis.symbolic_einops import PatternError, parse_side
from stridelens.server.analysis.values import ModuleValue, Value

# Layers that raise on any input rank but this one (torch 2.13's `_check_input_dim`).
EXACT_RANK = {"BatchNorm2d": 4, "BatchNorm3d": 5}

# Layers whose output has their input's rank.
KEEPS_RANK = frozenset(
    {
        "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
        "InstanceNorm3d", "GroupNorm", "LayerNorm", "RMSNorm", "Linear", "Identity", "Dropout",
        "Dropout1d", "Dropout2d", "Dropout3d", "ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU",
        "Mish", "Hardswish", "Hardsigmoid", "Sigmoid", "Tanh", "ELU", "PReLU", "Softplus",
        "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d",
        "ReplicationPad2d", "ReplicationPad3d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d",
        "ConstantPad3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d",
        "AvgPool3d", "Upsample",
    }
)  # fmt: skip

# `F.relu(x)`, `torch.sigmoid(x)`: functions whose output has their input's rank.
_KEEPS_RANK_FUNCTIONS = frozenset(
    {"relu", "relu6", "gelu", "silu", "leaky_relu", "elu", "sigmoid", "tanh", "dropout", "hardswish", "mish", "softplus"}
)


def einops_input_rank(pattern: str) -> int | None:
    """The rank an einops pattern's input must have (`'b c (h p1) (w p2) -> ...'`: 4), as
    `symbolic_einops.parse_side` reads it; None with an ellipsis or a pattern it refuses."""
    try:
        side = parse_side(pattern.partition("->")[0])
    except PatternError:
        return None
    return None if side.has_ellipsis or not side.composition else len(side.composition)


def _layer_rank(layer: Value) -> tuple[bool, int | None]:
    """(keeps its input's rank, the one rank it accepts or None)."""
    if not isinstance(layer, ModuleValue):
        return False, None
    leaf = layer.name.rpartition(".")[2]
    if leaf in ("Rearrange", "Reduce") and layer.path.startswith("einops.") and layer.args:
        # einops.layers.torch: the pattern fixes the input's rank.
        pattern = getattr(layer.args[0], "value", None)
        return False, einops_input_rank(pattern) if isinstance(pattern, str) else None
    if leaf == "Sequential":
        # Applied in turn: the first layer that accepts one rank decides, if every layer
        # before it keeps the rank.
        keeps = True
        for item in layer.args:
            item_keeps, exact = _layer_rank(item)
            if exact is not None and keeps:
                return all(_layer_rank(i)[0] for i in layer.args), exact
            keeps = keeps and item_keeps
        return keeps, None
    return leaf in KEEPS_RANK, EXACT_RANK.get(leaf)


def ranks_from_layers(fn: ast.FunctionDef | ast.AsyncFunctionDef, attribute: Callable[[str], Value | None]) -> list[tuple[int, str, int]]:
    """(statement index, parameter, rank) for each parameter a layer of `self` proves the rank
    of; `attribute("bn1")` is what `self.bn1` holds."""
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    out: list[tuple[int, str, int]] = []
    for index, stmt in enumerate(fn.body):
        value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Assign, ast.Return, ast.Expr, ast.AugAssign)) else None
        if not isinstance(value, ast.expr):
            continue
        for call in _calls(value):
            layer = _self_layer(call, attribute)
            if layer is None:
                continue
            _, exact = _layer_rank(layer)
            if exact is None or not call.args:
                continue
            name = _through_rank_keepers(call.args[0], attribute)
            if name is not None and name in params:
                out.append((index, name, exact))
    return out


def _self_layer(call: ast.Call, attribute: Callable[[str], Value | None]) -> Value | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return attribute(func.attr)
    return None


def _through_rank_keepers(expr: ast.expr, attribute: Callable[[str], Value | None]) -> str | None:
    """The parameter name `expr` is, through calls that keep its rank, else None."""
    for _ in range(16):
        if isinstance(expr, ast.Name):
            return expr.id
        if not isinstance(expr, ast.Call) or not expr.args:
            return None
        layer = _self_layer(expr, attribute)
        if layer is not None:
            if not _layer_rank(layer)[0]:
                return None
        elif not (isinstance(expr.func, ast.Attribute) and expr.func.attr in _KEEPS_RANK_FUNCTIONS):
            return None
        expr = expr.args[0]
    return None


def _calls(expr: ast.expr) -> list[ast.Call]:
    """The calls of a statement's value, outermost first (a few dozen nodes at most)."""
    out: list[ast.Call] = []
    stack = [expr]
    while stack and len(out) < 32:
        node = stack.pop()
        if isinstance(node, ast.Call):
            out.append(node)
            stack.extend(a for a in node.args if isinstance(a, (ast.Call, ast.BinOp)))
        elif isinstance(node, ast.BinOp):
            stack.extend((node.left, node.right))
    return out


__all__ = ["EXACT_RANK", "KEEPS_RANK", "einops_input_rank", "ranks_from_layers"]
