"""nn modules: building them from literal (or symbolic) arguments, their methods (`eval`,
`train`, `to`), and calling them: replayed on meta when sizes are known, else their output
from the layer type and the symbolic sizes (`symbolic_modules.ModuleOutputs.module`).

A mixin of `interpreter.Interpreter`; methods take `self: Interpreter`.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from stridelens.server.analysis import replay as rp
from stridelens.server.analysis import symbolic_einops as sym_einops
from stridelens.server.analysis import torch_api as api
from stridelens.server.analysis.facts import TensorFact, with_fields
from stridelens.server.analysis.interp_support import (
    _FRESH_OUTPUT,
    _MAY_CHANGE_LAYOUT,
    _MAY_RETURN_INPUT,
    _PARAMETERLESS,
    Scope,
    _access_path,
    _first_line,
    _is_torch_constant,
    _maybe_anything,
    under_a_condition,
)
from stridelens.server.analysis.values import (
    UNKNOWN,
    Const,
    DictValue,
    InstanceValue,
    ListOf,
    ModuleValue,
    Opaque,
    SeqValue,
    TorchRef,
    Value,
    join_values,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interpreter import Interpreter


class ModulesMixin:
    _current_node: ast.AST | None  # see TorchCallsMixin
    _current_scope: Scope | None

    def make_module(
        self: Interpreter, path: str, leaf: str, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call
    ) -> Value:
        canonical = f"torch.nn.{leaf}"
        if leaf == "ModuleList" and exact and not kwargs:
            # Stands for its items: iterated, indexed and called like the list it was given.
            items = args[0] if args else SeqValue((), "list")
            if isinstance(items, Const) and items.value in ([], ()):
                items = SeqValue((), "list")  # `nn.ModuleList([])`, appended to later
            if isinstance(items, ListOf):
                return items
            if isinstance(items, SeqValue):
                return SeqValue(items.items, "list")
            return UNKNOWN
        if leaf == "ModuleDict" and exact and len(args) == 1 and isinstance(args[0], DictValue):
            return args[0]
        spread = self.spread_lists.get(node)
        if leaf == "Sequential" and spread is not None and not kwargs and isinstance(spread.item, (InstanceValue, ModuleValue)):
            # Some number (maybe none) of the same layer, applied in turn.
            return ModuleValue(canonical, (spread.item,), {}, line=node.lineno, built=False, repeated=True)
        literal = exact and all(
            isinstance(a, (Const, ModuleValue)) or (isinstance(a, TorchRef) and _is_torch_constant(a.path))
            for a in [*args, *kwargs.values()]
        )
        self.symops.mark_int([*args, *kwargs.values()])
        if not literal:
            # Not built on meta; the arguments still give sizes (`nn.Linear(C, 3 * C)`).
            return ModuleValue(canonical, tuple(args) if exact else (), dict(kwargs) if exact else {}, line=node.lineno, built=False)
        return ModuleValue(canonical, tuple(args), dict(kwargs), line=node.lineno)

    def module_method(self: Interpreter, module: ModuleValue, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name in ("eval", "train", "to", "cuda", "cpu", "float", "half", "double", "requires_grad_"):
            if name in ("eval", "train"):
                training = name == "train"
                if args and isinstance(args[0], Const):
                    training = bool(args[0].value) if name == "train" else training
                module.training = training
                if module.built not in (None, False):
                    module.built.train(training)
            return module
        return UNKNOWN

    def call_module(
        self: Interpreter, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        result = self.layer_output(module, args, kwargs, exact, node, scope)
        self._inputs_have_weight_dtype(module, node, scope)
        return result

    def layer_output(
        self: Interpreter, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        """The layer's output only: nothing of what the call proves about its input."""
        result = self._module_output(module, args, kwargs, exact, node, scope)
        tensors = [a for a in args if isinstance(a, TensorFact)]
        return self._with_layer_dtype(module, tensors[0] if tensors else None, result)

    def _inputs_have_weight_dtype(self: Interpreter, module: ModuleValue, node: ast.Call, scope: Scope) -> None:
        """Past `self.proj(x)`, x has the weight's dtype: Linear, Conv and attention raise on an
        input of another dtype (outside autocast, which a file that never changes dtypes does
        not enter). The name is rebound with it, so `x + self.proj(x)` knows both sides."""
        first = _first_dtype_checking_layer(module)
        dtype = _output_dtype(first, None) if first is not None and self.default_dtypes else None
        if dtype is None or (self.statement is not None and under_a_condition(self.statement, node)):
            return  # (`self.proj(x) if use else x`: the other branch reads x unproven)
        inputs = [*node.args[: 3 if module.name == "MultiheadAttention" else 1], *(k.value for k in node.keywords if k.arg in ("query", "key", "value", "input"))]
        for expr in inputs:
            expr = self._through_dtype_keepers(expr)
            if not isinstance(expr, ast.Name):
                continue
            value = scope.lookup(expr.id)
            if isinstance(value, Opaque) and len(value.path) == 1:
                value = self.opaque_tensor(value)
            elif value is not None and _maybe_anything(value):
                value = TensorFact(storage_key=self.fresh_storage())  # (`q = x + pos` of parameters)
            if isinstance(value, TensorFact) and value.dtype is None and value.meta is None:
                self.prove_dtype(expr.id, value, dtype, node, scope)

    def _through_dtype_keepers(self: Interpreter, expr: ast.expr) -> ast.expr:
        """The tensor under calls that return their input's dtype or raise (`F.relu(self.bn1(x))`
        -> `x`): what reaches a Linear/Conv as float32 was float32 before them too."""
        while isinstance(expr, ast.Call) and expr.args:
            layer = self.facts.get(expr.func)
            keeps = (isinstance(layer, ModuleValue) and layer.name in _DTYPE_KEEPING_LAYERS and len(expr.args) == 1) or (
                isinstance(layer, TorchRef) and layer.path.rsplit(".", 1)[-1] in _DTYPE_KEEPING_FUNCTIONS
            )
            if not keeps:
                break
            expr = expr.args[0]
        while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args and expr.func.attr in _DTYPE_KEEPING_FUNCTIONS:
            expr = expr.func.value  # `x.relu()`
        return expr

    def _with_layer_dtype(self: Interpreter, module: ModuleValue, x: TensorFact | None, result: Value) -> Value:
        """A layer's output with the dtype its parameters give (`_output_dtype`)."""
        if module.name == "MultiheadAttention" and isinstance(result, SeqValue) and self.default_dtypes:
            # (output, weights): both of the in-projection's dtype (weights may be None).
            dtype = _output_dtype(module, None)
            items = tuple(with_fields(i, dtype=dtype) if isinstance(i, TensorFact) and i.dtype is None else i for i in result.items)
            return SeqValue(items, result.kind)
        if isinstance(result, TensorFact) and result.dtype is None and self.default_dtypes:
            dtype = _output_dtype(module, x)
            if dtype is not None:
                return with_fields(result, dtype=dtype)
        if isinstance(result, TensorFact) and result.dtype is None and x is not None and x.dtype == "float32" and module.name in FLOAT32_KEEPING_NORMS:
            return with_fields(result, dtype="float32")
        return result

    def _module_output(
        self: Interpreter, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        if args and isinstance(args[0], Opaque) and len(args[0].path) == 1:
            args = [self.opaque_tensor(args[0]), *args[1:]]  # `self.conv(x)`: x is a tensor
        elif args and _maybe_anything(args[0]) and not module.path.startswith("einops."):
            # A torch layer raises on anything but a tensor: whatever reached it is one.
            args = [TensorFact(storage_key=self.fresh_storage()), *args[1:]]
        tensors = [a for a in args if isinstance(a, TensorFact)]
        if not tensors:
            return UNKNOWN
        if module.path.startswith("einops."):  # `Rearrange(pattern)`: symbolic_einops
            return sym_einops.module_call(self, module, args, kwargs, node, scope) if exact else UNKNOWN
        has_params = module.name not in _PARAMETERLESS
        # Dropout in eval mode and Identity return their input, Linear on a >2-d input a view
        # of a 2-d result: without replay, storage identity and view-ness stay unknown.
        passes_through = module.name in _MAY_RETURN_INPUT
        dense = all(t.contiguous is True for t in tensors) and module.name not in _MAY_CHANGE_LAYOUT
        symbolic = TensorFact(
            device=tensors[0].device,
            contiguous=True if dense else None,
            assumes=frozenset().union(*(t.assumes for t in tensors)) if dense else frozenset(),
            storage_key=None if passes_through else self.fresh_storage(),
            # (A conv given an unbatched input returns a view of its batched result: torch 2.13.)
            is_view=False if _fresh_output(module) and not module.name.startswith("Conv") else None,
            carries_graph=(True if has_params else tensors[0].carries_graph) if scope.grad_enabled else False,
            requires_grad=(True if has_params else tensors[0].requires_grad) if scope.grad_enabled else False,
        )
        if module.built is False or not exact or not self.replay or any(t.meta is None for t in tensors):
            if exact:
                self._current_node, self._current_scope = node, scope
                sym = self._symbolic_module(module, args, kwargs, node, scope)
                if sym is not None:
                    return sym
            if module.built is not False and all(t.storage_key in self.sized_storages for t in tensors):
                self.sized_storages.add(symbolic.storage_key)  # type: ignore[arg-type]
            if module.name in _RETURNS_PAIR:
                # (output, attention weights / hidden state): a tuple, never one tensor.
                return SeqValue((with_fields(symbolic, is_view=None), UNKNOWN))
            return symbolic
        try:
            torch = self._torch()
            built = rp.build_module(module)
            call_args = [rp.to_torch(a) for a in args]
            call_kwargs = {k: rp.to_torch(v) for k, v in kwargs.items()}
            with torch.set_grad_enabled(scope.grad_enabled):
                if module.name in api.CONV_MODULES and not call_args[0].is_contiguous() and built.padding_mode == "zeros":
                    fn = getattr(torch.nn.functional, module.name.lower())
                    out = rp.conv_with_device_layout(
                        lambda x, w, b: fn(x, w, b, built.stride, built.padding, built.dilation, built.groups),
                        [call_args[0], built.weight, built.bias],
                        {},
                    )
                else:
                    key = ("module", module.path, repr(module.args), repr(module.kwargs), module.training)
                    out = rp.cached_call(key, call_args, call_kwargs, lambda: built(*call_args, **call_kwargs))
        except rp.CannotReplay:
            return symbolic
        except Exception as err:  # noqa: BLE001
            module.built = None if module.built is None else module.built
            self._event("replay-error", node, f"{module.name}: {_first_line(err)}")
            return symbolic
        result = self._from_output(out, tensors[0], node, module.name)
        if isinstance(result, TensorFact):
            result = result.with_note("new tensor", f"{module.name} forward", node.lineno)
        return result

    def _symbolic_module(
        self: Interpreter, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], node: ast.Call, scope: Scope
    ) -> Value | None:
        if module.name == "Sequential" and module.repeated:
            return self._repeated_layer(module.args[0], args[0] if args else UNKNOWN, node, scope)
        if module.name == "Sequential":
            if module.built is False and not module.args:
                return None  # `nn.Sequential(*layers)` of layers not known: not the identity
            value: Value = args[0] if args else UNKNOWN
            for position, child in enumerate(module.args):
                if not isinstance(value, TensorFact):
                    return None
                if isinstance(child, InstanceValue):
                    value = self.call_value(child, [value], {}, True, node, scope)
                    continue
                if not isinstance(child, ModuleValue):
                    return None
                if child.path.startswith("einops."):
                    # `Rearrange(pattern)` (ViT's patch embedding): a pattern of unknown input
                    # shape gives the call's argument its rank, so only as the first layer.
                    if position and value.known_shape is None:
                        return None
                    value = sym_einops.module_call(self, child, [value], {}, node, scope)
                    continue
                out = self.symops.module(child, [value], {}, scope, None)
                if out is None:
                    # Sizes not followed (an input of unknown rank): the layer's output as a
                    # call of it alone gives it, so the file's own layers after it are followed.
                    out = self._module_output(child, [value], {}, True, node, scope)
                value = self._with_layer_dtype(child, value, out)  # type: ignore[arg-type]
            return value
        return self.symops.module(module, args, kwargs, scope, _access_path(node.func))

    def _repeated_layer(self: Interpreter, layer: Value, x: Value, node: ast.Call, scope: Scope) -> Value | None:
        """`nn.Sequential(*[Block() for _ in range(n)])(x)`: what holds after any number of
        blocks, none included (a loop's two passes, as `for blk in blocks: x = blk(x)`)."""
        if not isinstance(x, TensorFact):
            return None
        once = self._apply_layer(layer, x, node, scope)
        if once is None:
            return None
        entry = join_values(x, once, self.symops.canon_layout)
        twice = self._apply_layer(layer, entry, node, scope) if isinstance(entry, TensorFact) else None
        return None if twice is None else join_values(x, twice, self.symops.canon_layout)

    def _apply_layer(self: Interpreter, layer: Value, x: TensorFact, node: ast.Call, scope: Scope) -> Value | None:
        if isinstance(layer, InstanceValue):
            return self.call_value(layer, [x], {}, True, node, scope)
        if isinstance(layer, ModuleValue):
            out = self.symops.module(layer, [x], {}, scope, None)
            return None if out is None else self._with_layer_dtype(layer, x, out)
        return None


def _first_dtype_checking_layer(module: ModuleValue) -> ModuleValue | None:
    """The layer that checks the input's dtype against its weight's: the module itself, or a
    `Sequential`'s first layer past those that keep the dtype (`Sequential(Dropout, Linear)`)."""
    while module.name == "Sequential" and not module.repeated and module.args:
        layers = list(module.args)
        while layers and isinstance(layers[0], ModuleValue) and layers[0].name in _DTYPE_KEEPING_LAYERS:
            layers.pop(0)
        if not layers or not isinstance(layers[0], ModuleValue):
            return None
        module = layers[0]
    return module if module.name in _SAME_DTYPE_INPUT else None


def _fresh_output(module: ModuleValue) -> bool:
    inplace = module.kwargs.get("inplace")
    return module.name in _FRESH_OUTPUT and not (isinstance(inplace, Const) and inplace.value is True)


# Layers whose output has their weight's dtype: torch requires the input's to match (no
# autocast here), so in every run that gets past the call it is the weight's.
_WEIGHT_DTYPE = frozenset(
    {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Embedding", "EmbeddingBag"}
)
# Layers that return a pair: MultiheadAttention (output, weights), the RNNs (output, state).
_RETURNS_PAIR = frozenset({"MultiheadAttention", "LSTM", "GRU", "RNN"})
# Layers whose input must have their weight's dtype (F.linear, the convolutions, attention's
# in-projection); not Embedding (integer indices).
_SAME_DTYPE_INPUT = frozenset({"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "MultiheadAttention"})
# Layers and functions whose output has their input's dtype for every input they accept (they
# raise on the others; checked on torch 2.13: int64/bool/float16/float64 in). Not sigmoid/tanh:
# they turn an integer input into float32.
_DTYPE_KEEPING_LAYERS = frozenset(
    {"ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Hardtanh", "Mish", "Hardswish", "SELU", "CELU",
     "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "Identity", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
     "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"}
)  # fmt: skip
_DTYPE_KEEPING_FUNCTIONS = frozenset(
    {"relu", "relu6", "leaky_relu", "elu", "gelu", "silu", "hardtanh", "mish", "hardswish", "selu", "celu", "dropout"}
)
# Layers whose output has their input's dtype (norms run mixed float32 weights on a half input).
_INPUT_DTYPE = _FRESH_OUTPUT - _WEIGHT_DTYPE | _MAY_RETURN_INPUT | {"Flatten", "Unflatten", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"}


# Norms whose output is float32 for a float32 input whatever their parameters' dtype (torch
# 2.13 on CPU raises for half, bfloat16 or float64 ones) and under autocast (CUDA's runs them in
# float32, CPU's in the input's dtype): CLIP's fp16-safe `LayerNorm`, in a file that calls
# `.half()`.
FLOAT32_KEEPING_NORMS = frozenset({"LayerNorm", "GroupNorm"})


def _output_dtype(module: ModuleValue, x: TensorFact | None) -> str | None:
    """The dtype of a layer's output where the file never changes dtypes (its parameters are
    float32, torch's default): the weight's for Linear/Conv/Embedding, the input's otherwise."""
    if module.name in _WEIGHT_DTYPE or (module.name == "MultiheadAttention" and x is None):
        asked = module.kwargs.get("dtype")
        if asked is not None:
            return api.DTYPES.get(asked.path.removeprefix("torch.")) if isinstance(asked, TorchRef) else None
        return "float32"
    if module.name in _INPUT_DTYPE and x is not None:
        return x.dtype
    if module.name == "Sequential" and not module.repeated and module.args and all(isinstance(c, ModuleValue) for c in module.args):
        # Layer by layer (a `Sequential` of the file's own modules is followed instead).
        dtype = x.dtype if x is not None else None
        for child in module.args:
            assert isinstance(child, ModuleValue)
            dtype = _output_dtype(child, TensorFact(dtype=dtype))
        return dtype
    return None
