"""Which names may carry an autograd graph into an expression's value (SL201, SL202).

`graph_names` follows an expression down to the names its graph may come from, stopping at
what cuts the graph (`.detach()`, `.item()`, `.data`, `float(...)`) and at callees, modules,
classes and torch names; SL201 follows a loop's flow with it, SL202 a function's.
"""

from __future__ import annotations

import ast

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

# Methods whose result carries no autograd graph, and builtins that make a Python number.
_GRAPH_CUTS = frozenset({"detach", "detach_", "item", "tolist", "numpy"})
_NUMBER_BUILTINS = frozenset({"float", "int", "bool", "len", "round"})
# Methods whose result is the receiver's tensor or a view/copy of it with no tensor saved
# for backward (the graph above it is the receiver's).
ALIAS_METHODS = frozenset(
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
                if func.attr in ALIAS_METHODS or func.attr in _SIZE_ARG_METHODS:
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
