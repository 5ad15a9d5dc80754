"""Shared pieces of the interpreter: scopes, limits, and small helpers of its mixins."""

from __future__ import annotations

import ast
from typing import Any

from stridelens.server.analysis import torch_api as api
from stridelens.server.analysis.facts import TensorFact
from stridelens.server.analysis.values import (
    UNKNOWN,
    ClassInfo,
    Const,
    GradContext,
    InstanceValue,
    ListOf,
    ModuleValue,
    Number,
    Opaque,
    SeqValue,
    SizeValue,
    TorchRef,
    Value,
)
from stridelens.server.units import human_bytes

MAX_PROVENANCE = 4
MAX_CALL_DEPTH = 4
MAX_LITERAL_ELEMENTS = 4096

# Ops whose result may be a strided view even when every input is contiguous.
_STRIDED_RESULTS = frozenset(
    {"einsum", "broadcast_to", "broadcast_tensors", "meshgrid", "scaled_dot_product_attention", "as_strided", "expand"}
)

_ROW_MAJOR_RESULTS = frozenset({"matmul", "mm", "bmm", "linear"})

_LIST_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"})

# Values worth remembering per node: what rules and hover ask about.
_RECORDED = (TensorFact, SeqValue, ListOf, TorchRef, ModuleValue, GradContext, InstanceValue, ClassInfo)


CALLS_DIFFER = "shape differs between calls"


class BudgetExceeded(Exception):
    pass


class Scope:
    """Names of one function or module body, with the module's names as fallback."""

    __slots__ = ("env", "grad_assumed", "grad_enabled", "parent")

    def __init__(self, parent: Scope | None, grad_enabled: bool = True, grad_assumed: bool = False) -> None:
        self.env: dict[str, Value] = {}
        self.parent = parent
        self.grad_enabled = grad_enabled
        # True in a function body whose grad mode is its callers' (taken as on for the rules,
        # never stated as a fact: a caller may run it under `no_grad`).
        self.grad_assumed = grad_assumed

    def lookup(self, name: str) -> Value | None:
        scope: Scope | None = self
        while scope is not None:
            value = scope.env.get(name)
            if value is not None:
                return value
            scope = scope.parent
        return None

def _is_tensorish(value: Value) -> bool:
    return isinstance(value, TensorFact)

def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""

def _format_args(node: ast.Call) -> str:
    try:
        return ", ".join(_arg_text(a) for a in [*node.args, *node.keywords])
    except Exception:  # noqa: BLE001
        return "..."


def _arg_text(node: ast.AST) -> str:
    """`ast.unparse` of one argument, without its visitor for the common simple cases (names,
    ints, `-1`, `a.b`, `dim=1`): the unparser was a sixth of the symbolic pass on big files."""
    kind = type(node)
    if kind is ast.Name:
        return node.id  # type: ignore[attr-defined]
    if kind is ast.Constant and (type(node.value) in (int, bool) or node.value is None):  # type: ignore[attr-defined]
        return repr(node.value)  # type: ignore[attr-defined]
    if kind is ast.keyword and node.arg is not None:  # type: ignore[attr-defined]
        return f"{node.arg}={_arg_text(node.value)}"  # type: ignore[attr-defined]
    if kind is ast.Attribute and type(node.value) is ast.Name:  # type: ignore[attr-defined]
        return f"{node.value.id}.{node.attr}"  # type: ignore[attr-defined]
    if (
        kind is ast.UnaryOp
        and type(node.op) is ast.USub  # type: ignore[attr-defined]
        and type(node.operand) is ast.Constant  # type: ignore[attr-defined]
        and type(node.operand.value) is int  # type: ignore[attr-defined]
    ):
        return f"-{node.operand.value!r}"  # type: ignore[attr-defined]
    return ast.unparse(node)


_PARAMETERLESS = frozenset(
    {
        "ReLU", "ReLU6", "GELU", "SiLU", "ELU", "SELU", "LeakyReLU", "Tanh", "Sigmoid", "Softmax",
        "LogSoftmax", "Softplus", "Mish", "Hardswish", "Hardsigmoid", "Dropout", "Dropout1d",
        "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten", "Unflatten", "MaxPool1d",
        "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "ZeroPad2d", "ConstantPad1d",
        "ConstantPad2d", "ReflectionPad2d", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
        "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss",
        "CosineSimilarity", "GLU",
    }
)  # fmt: skip

def _dtype_of(value: Value) -> str | None:
    if isinstance(value, TorchRef) and value.path.startswith("torch."):
        return api.DTYPES.get(value.path[6:])
    return None

def _is_number(value: Value) -> bool:
    if isinstance(value, (Number, SizeValue)):
        return True
    return isinstance(value, Const) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool)

def _covers_its_storage(fact: TensorFact) -> bool:
    """A view that reads every element of its storage (a `.t()` of a whole tensor)."""
    return fact.storage_offset == 0 and fact.numel is not None and fact.numel == fact.storage_numel

def _access_path(node: ast.expr) -> tuple[str, ...] | None:
    """`self.c_attn` -> ("self", "c_attn"): how the code reaches a module, to name its sizes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))

# Modules whose output is a new tensor (`_base` None) whatever the input's layout, in training
# and eval, with grad or not: checked against torch 2.13 (InstanceNorm returns a view, Linear
# of a >2-d input too; an `inplace=True` activation returns its input).
_FRESH_OUTPUT = frozenset(
    {
        "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LayerNorm", "RMSNorm",
        "ReLU", "ReLU6", "GELU", "SiLU", "ELU", "SELU", "LeakyReLU", "PReLU", "Tanh", "Sigmoid",
        "Softmax", "LogSoftmax", "Softplus", "Mish", "Hardswish", "Hardsigmoid", "MaxPool1d",
        "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "Upsample", "PixelShuffle", "ZeroPad2d",
        "ReflectionPad2d", "Embedding",
    }
)
# Modules whose forward may return its input itself.
_MAY_RETURN_INPUT = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity"})
# Modules whose output layout may differ from their input's (a channels_last conv, an RNN).
# (A conv keeps a row-major input row-major; only a channels_last input, not contiguous
# itself, gives a channels_last output.)
_MAY_CHANGE_LAYOUT = frozenset({"LSTM", "GRU", "RNN", "MultiheadAttention", "Flatten", "Unflatten"})

def _is_torch_constant(path: str) -> bool:
    leaf = path.rpartition(".")[2]
    return leaf in api.DTYPES or leaf in api.MEMORY_FORMATS

def _literal_size(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        total = 0
        for v in value:
            total += _literal_size(v)
            if total > MAX_LITERAL_ELEMENTS:
                break
        return total
    return 1

def to_value(value: Value) -> Any:
    return value.value if isinstance(value, Const) else None

def _source_text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"
    return text if len(text) <= 60 else text[:57] + "..."

def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]

def format_bytes(n: int | None) -> str:
    return "an unknown number of bytes" if n is None else human_bytes(n)


_CONDITIONAL_EXPRESSIONS = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def under_a_condition(statement: ast.stmt, node: ast.AST) -> bool:
    """Whether `node` may not run when `statement` does (`a if c else self.proj(x)`)."""
    for sub in ast.walk(statement):
        if isinstance(sub, _CONDITIONAL_EXPRESSIONS) and any(n is node for n in ast.walk(sub)):
            return True
    return False


def _maybe_anything(value: Value) -> bool:
    """A value the analysis cannot tell from a tensor: unknown, opaque, or arithmetic on
    parameters that might be sizes (`x + pos`)."""
    return value is UNKNOWN or isinstance(value, Opaque) or (isinstance(value, SizeValue) and not value.certain)
