"""nn module calls on symbolic inputs: the output layout each layer type gives.

`ModuleOutputs` is a part of `symbolic_ops.SymbolicOps` (a mixin: it uses the same size
unification and fact construction): Linear, Conv*, pooling, norms, Embedding, Dropout,
activations, LSTM/GRU (both outputs, `batch_first`), MultiheadAttention, losses. A module
whose constructor arguments are unknown still gets the rank its type fixes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.conditions import shape_conditions
from stridelens.server.analysis.facts import TensorFact, with_fields
from stridelens.server.analysis.layouts import Layout, Undecided
from stridelens.server.analysis.sizes import Size
from stridelens.server.analysis.values import (
    Const,
    ModuleValue,
    Opaque,
    SeqValue,
    SizeValue,
    Value,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.symbolic_ops import SymbolicOps

NORM_MODULES = frozenset(
    {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm"}
)
ACTIVATION_MODULES = frozenset(
    {"ReLU", "ReLU6", "GELU", "SiLU", "ELU", "SELU", "LeakyReLU", "PReLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Softplus", "Mish", "Hardswish", "Hardsigmoid", "GLU"}
)
DROPOUT_MODULES = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"})
LOSS_MODULES = frozenset(
    {"MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss"}
)

# Constructor signatures of the modules whose sizes matter (positional order).
MODULE_PARAMS: dict[str, tuple[str, ...]] = {
    "Linear": ("in_features", "out_features", "bias"),
    "Conv1d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias", "padding_mode"),
    "Conv2d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias", "padding_mode"),
    "Conv3d": ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias", "padding_mode"),
    "Embedding": ("num_embeddings", "embedding_dim"),
    "MaxPool1d": ("kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode"),
    "MaxPool2d": ("kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode"),
    "AvgPool1d": ("kernel_size", "stride", "padding", "ceil_mode"),
    "AvgPool2d": ("kernel_size", "stride", "padding", "ceil_mode"),
    "AdaptiveAvgPool1d": ("output_size",),
    "AdaptiveAvgPool2d": ("output_size",),
    "AdaptiveMaxPool2d": ("output_size",),
    "LSTM": ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional"),
    "GRU": ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional"),
    "RNN": ("input_size", "hidden_size", "num_layers", "nonlinearity", "bias", "batch_first", "dropout", "bidirectional"),
    "MultiheadAttention": ("embed_dim", "num_heads", "dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first"),
    "Flatten": ("start_dim", "end_dim"),
}  # fmt: skip

MODULE_DEFAULTS: dict[str, dict[str, Any]] = {
    "conv": {"stride": 1, "padding": 0, "dilation": 1, "groups": 1},
    "rnn": {"num_layers": 1, "batch_first": False, "bidirectional": False},
    "Flatten": {"start_dim": 1, "end_dim": -1},
    "pool": {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False},
}


def module_arg(module: ModuleValue, name: str) -> Value | None:
    """The value a module was built with for parameter `name` (None when not given)."""
    params = MODULE_PARAMS.get(module.name, ())
    if name in module.kwargs:
        return module.kwargs[name]
    if name in params:
        i = params.index(name)
        if i < len(module.args):
            return module.args[i]
    return None


def layout_of(fact: TensorFact) -> Layout | None:
    """The symbolic layout of a fact, or its exact one as a `Layout` (ints)."""
    if fact.sym is not None:
        return fact.sym  # type: ignore[no-any-return]
    if fact.shape is not None:
        return Layout(tuple(fact.shape), tuple(fact.strides) if fact.strides is not None else None, fact.storage_offset)
    return None


def int_pair(value: Value | None, default: Any) -> tuple[int, ...] | None:
    if value is None:
        return default
    if isinstance(value, Const):
        v = value.value
        if isinstance(v, int) and not isinstance(v, bool):
            return (v,)
        if isinstance(v, (tuple, list)) and all(isinstance(i, int) for i in v):
            return tuple(v)
    return None


class ModuleOutputs:
    """The nn-module part of `SymbolicOps` (see the module docstring)."""

    def module_size(self: SymbolicOps, module: ModuleValue, name: str, path: tuple[str, ...] | None) -> Size | None:
        """A constructor size of `module` (`out_features`), an atom named after the module's
        attribute (`self.c_attn.out_features`) when the file does not spell it out."""
        value = module_arg(module, name)
        size = self.size_of(value) if value is not None else None
        if size is not None:
            if path:
                self.names.add_path(size, (*path, name))  # `self.lin.out_features`
            return size
        if value is None and name not in MODULE_PARAMS.get(module.name, ()):
            return None
        return self.canon(self.names.atom_for(("module", id(module), name), (*path, name) if path else None))

    def module_weight(self: SymbolicOps, module: ModuleValue, path: tuple[str, ...] | None) -> TensorFact | None:
        """`self.fc.weight`: a row-major parameter of the module's sizes."""
        name = module.name
        shape: tuple[Size | None, ...]
        if name == "Linear":
            shape = (self.module_size(module, "out_features", path), self.module_size(module, "in_features", path))
        elif name == "Embedding":
            shape = (self.module_size(module, "num_embeddings", path), self.module_size(module, "embedding_dim", path))
        else:
            return None
        if any(s is None for s in shape):
            return None
        key = self._weights.get(id(module))
        if key is None:
            key = self._weights[id(module)] = self.interp.fresh_storage()
        layout = lay.contiguous(shape)  # type: ignore[arg-type]
        return TensorFact(
            shape=tuple(shape) if all(isinstance(s, int) for s in shape) else None,  # type: ignore[arg-type]
            contiguous=True,
            is_view=False,
            storage_key=key,
            requires_grad=True,
            carries_graph=False,
            sym=layout,
        )

    # ------------------------------------------------------------------ module calls

    def module(self: SymbolicOps, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], scope: Any, path: tuple[str, ...] | None) -> Value | None:
        try:
            return self._module(module, args, kwargs, scope, path)
        except (Undecided, IndexError, ValueError, TypeError):
            return None

    def _module(self: SymbolicOps, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], scope: Any, path: tuple[str, ...] | None) -> Value | None:
        x = args[0] if args else None
        if not isinstance(x, TensorFact):
            return None
        layout = layout_of(x)
        if layout is None:
            return None
        layout = self.canon_layout(layout)
        x = with_fields(x, sym=layout)
        name = module.name
        grad: bool | None = scope.grad_enabled
        tensors = [a for a in args if isinstance(a, TensorFact)]
        if name == "Linear":
            out_features = self.module_size(module, "out_features", path)
            if out_features is None:
                return None
            out = self.linear(x, out_features, tensors, scope, self.module_size(module, "in_features", path))
            return None if out is None else with_fields(out, requires_grad=grad, carries_graph=grad)
        if name in ("Conv1d", "Conv2d", "Conv3d"):
            return self._conv(module, x, layout, scope, path, grad)
        if name == "Embedding":
            dim = self.module_size(module, "embedding_dim", path)
            if dim is None:
                return None
            out = self.fresh((*layout.shape, dim), x, [x], scope, dtype=None)
            return with_fields(out, requires_grad=grad, carries_graph=grad)
        if name in ACTIVATION_MODULES or name in NORM_MODULES or name == "Identity":
            if name == "Identity":
                return x
            if name == "GLU":
                return None
            inplace = module.kwargs.get("inplace")
            if isinstance(inplace, Const) and inplace.value is True:
                return x
            out = self.fresh(layout.shape, x, [x], scope, contiguous="inherit")
            if name in NORM_MODULES or name == "PReLU":
                out = with_fields(out, requires_grad=grad if grad is not True else True, carries_graph=grad)
            return out
        if name in DROPOUT_MODULES:
            # Training: a new tensor; eval (or p == 0): the input itself. Which one is unknown.
            same = Layout(layout.shape, layout.strides if x.contiguous is True else None, layout.offset if x.contiguous is True else None)
            return self.tensor(same, x, view_of_input=None, assumes=x.assumes, scope=scope)
        if name == "Flatten":
            start = module_arg(module, "start_dim")
            end = module_arg(module, "end_dim")
            s0 = start.value if isinstance(start, Const) else (1 if start is None else None)
            e0 = end.value if isinstance(end, Const) else (-1 if end is None else None)
            if not isinstance(s0, int) or not isinstance(e0, int):
                return None
            return self._view_or_reshape(x, layout, "flatten", lay.flatten_shape(layout.shape, s0, e0), scope, flatten=(s0, e0))
        if name in ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d"):
            return self._pool(module, x, layout, scope)
        if name in ("AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"):
            spatial = 1 if name.endswith("1d") else 2
            arg = module_arg(module, "output_size")
            one = self.module_size(module, "output_size", path) if isinstance(arg, (Opaque, SizeValue)) else None
            pair = (one,) if one is not None else int_pair(arg, None)
            if pair is None or len(layout.shape) < spatial + 1 or any(s is None for s in pair):
                return None
            sizes: tuple[Size, ...] = tuple(pair) * spatial if len(pair) == 1 else tuple(pair)
            return self.fresh((*layout.shape[:-spatial], *sizes), x, [x], scope, contiguous="inherit")
        if name in ("LSTM", "GRU", "RNN"):
            return self._rnn(module, x, layout, scope, path, grad)
        if name in LOSS_MODULES:
            reduction = module.kwargs.get("reduction")
            if reduction is not None and not (isinstance(reduction, Const) and reduction.value == "mean"):
                return None
            return self.fresh((), x, tensors, scope)
        if name == "MultiheadAttention":
            if layout.ndim != 3:
                return None
            embed = self.module_size(module, "embed_dim", path)
            if embed is None:
                return None
            # (attn_output, attn_weights); the output's strides depend on the fast path taken.
            out = self.fresh((*layout.shape[:-1], embed), x, tensors, scope, contiguous=False)
            return SeqValue((with_fields(out, is_view=None), TensorFact(device=x.device)))
        return None

    def _conv(self: SymbolicOps, module: ModuleValue, x: TensorFact, layout: Layout, scope: Any, path: tuple[str, ...] | None, grad: bool | None) -> Value | None:
        spatial = int(module.name[4])
        if layout.ndim not in (spatial + 1, spatial + 2):
            return None
        out_channels = self.module_size(module, "out_channels", path)
        self.unify(layout.shape[-spatial - 1], self.module_size(module, "in_channels", path))
        layout = self.canon_layout(layout)
        kernel = int_pair(module_arg(module, "kernel_size"), None)
        stride = int_pair(module_arg(module, "stride"), (1,))
        padding = int_pair(module_arg(module, "padding"), (0,))
        dilation = int_pair(module_arg(module, "dilation"), (1,))
        if out_channels is None:
            return None

        def each(t: tuple[int, ...]) -> tuple[int, ...]:
            return t * spatial if len(t) == 1 else t

        if kernel is None or stride is None or padding is None or dilation is None:
            # (`stride=stride` of a block's parameter): the sizes out are nobody's to name.
            dims: list[Any] = [sz.anonymous() for _ in range(spatial)]
        else:
            k, st, p, d = each(kernel), each(stride), each(padding), each(dilation)
            if not all(len(t) == spatial for t in (k, st, p, d)):
                return None
            dims = [lay.conv_out(layout.shape[-spatial + i], k[i], st[i], p[i], d[i]) for i in range(spatial)]
        shape = (*layout.shape[: -spatial - 1], out_channels, *dims)
        # A channels_last input gives a channels_last output: only a row-major input is sure.
        out = self.fresh(shape, x, [x], scope, contiguous="inherit")
        # An unbatched input comes back as a view of the batched result (torch 2.13).
        return with_fields(out, requires_grad=grad, carries_graph=grad, is_view=None if layout.ndim == spatial + 1 else out.is_view)

    def _pool(self: SymbolicOps, module: ModuleValue, x: TensorFact, layout: Layout, scope: Any) -> Value | None:
        spatial = int(module.name[-2])
        kernel = int_pair(module_arg(module, "kernel_size"), None)
        stride_v = module_arg(module, "stride")
        stride = kernel if stride_v is None or (isinstance(stride_v, Const) and stride_v.value is None) else int_pair(stride_v, None)
        padding = int_pair(module_arg(module, "padding"), (0,))
        dilation = int_pair(module_arg(module, "dilation"), (1,)) if module.name.startswith("Max") else (1,)
        ceil = module_arg(module, "ceil_mode")
        if layout.ndim < spatial + 1:
            return None
        if kernel is None or stride is None or padding is None or dilation is None or (
            ceil is not None and not (isinstance(ceil, Const) and ceil.value is False)
        ):
            # `nn.AvgPool2d(stride)` of a size nobody states: the pooled sizes have no name,
            # the rank and the other sizes stay.
            pooled = tuple(sz.anonymous() for _ in range(spatial))
            return self.fresh((*layout.shape[:-spatial], *pooled), x, [x], scope, contiguous="inherit")

        def each(t: tuple[int, ...]) -> tuple[int, ...]:
            return t * spatial if len(t) == 1 else t

        k, st, p, d = each(kernel), each(stride), each(padding), each(dilation)
        dims = [lay.conv_out(layout.shape[-spatial + i], k[i], st[i], p[i], d[i]) for i in range(spatial)]
        return self.fresh((*layout.shape[:-spatial], *dims), x, [x], scope, contiguous="inherit")

    def _rnn(self: SymbolicOps, module: ModuleValue, x: TensorFact, layout: Layout, scope: Any, path: tuple[str, ...] | None, grad: bool | None) -> Value | None:
        if layout.ndim != 3:
            return None
        hidden = self.module_size(module, "hidden_size", path)
        layers_v = module_arg(module, "num_layers")
        batch_first_v = module_arg(module, "batch_first")
        bidir_v = module_arg(module, "bidirectional")
        flags = []
        for value, default in ((batch_first_v, False), (bidir_v, False)):
            if value is None:
                flags.append(default)
            elif isinstance(value, Const) and isinstance(value.value, bool):
                flags.append(value.value)
            else:
                return None
        batch_first, bidirectional = flags
        layers = 1 if layers_v is None else self.module_size(module, "num_layers", path)
        if hidden is None or layers is None:
            return None
        directions = 2 if bidirectional else 1
        width = sz.mul(hidden, directions)
        stacked = sz.mul(layers, directions)
        if width is None or stacked is None:
            return None
        if batch_first:
            batch, steps = layout.shape[0], layout.shape[1]
            row = sz.mul(batch, width)
            if row is None:
                return None
            # The kernels run time-major: a batch-first output is a transposed (T, B, H) tensor.
            out_layout = Layout((batch, steps, width), (width, row, 1), 0)
        else:
            steps, batch = layout.shape[0], layout.shape[1]
            out_layout = lay.contiguous((steps, batch, width))
        out = self.tensor(out_layout, x, view_of_input=False, assumes=shape_conditions(x.assumes), scope=scope, grad=grad)
        # A new storage, but the output is often a view of the kernels' own result.
        out = with_fields(out, is_view=None)
        state = self.tensor(lay.contiguous((stacked, batch, hidden)), x, view_of_input=False, assumes=shape_conditions(x.assumes), scope=scope, grad=grad)
        if module.name == "LSTM":
            cell = with_fields(state, storage_key=self.interp.fresh_storage())
            return SeqValue((out, SeqValue((state, cell))))
        return SeqValue((out, state))
