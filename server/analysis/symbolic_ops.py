"""Tensor ops on symbolic sizes: where `view` is decided when the file does not spell out
its sizes.

The interpreter replays ops on meta tensors when every size is known. When a tensor's sizes
are symbolic (`TensorFact.sym`, a `layouts.Layout`), the ops here compute the result's shape,
strides and offset with the stride algebra, decide `view`-raises / view-or-copy /
contiguity for every size at once, and attach the conditions those verdicts need
(`conditions.py`). Anything not modelled returns None, and the interpreter falls back to
the size-free facts (view of `x`, carries a graph, ...).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.conditions import (
    Condition,
    shape_conditions,
)
from stridelens.server.analysis.facts import TensorFact, new_fact, with_fields
from stridelens.server.analysis.layouts import Layout, Undecided
from stridelens.server.analysis.sizes import Size, SymExpr
from stridelens.server.analysis.symbolic_einops import einsum_result
from stridelens.server.analysis.symbolic_modules import (
    ModuleOutputs,
    layout_of,
    module_arg,
)
from stridelens.server.analysis.torch_api import RETURNS_VALUES_INDICES, VALUES_INDICES
from stridelens.server.analysis.values import (
    Const,
    ListOf,
    Opaque,
    SeqValue,
    SizeValue,
    TorchRef,
    Value,
)
from stridelens.server.analysis.view_verdict import contiguity_verdict, reshape_verdict

# Ops whose result has the input's shape, computed elementwise.
UNARY_SAME_SHAPE = frozenset(
    {
        "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "gelu", "silu",
        "elu", "selu", "celu", "leaky_relu", "relu6", "hardtanh", "hardswish", "hardsigmoid",
        "mish", "softplus", "softsign", "sign", "floor", "ceil", "round", "trunc", "square",
        "reciprocal", "erf", "sin", "cos", "log1p", "expm1", "isnan", "isinf", "logsigmoid",
        "tanhshrink", "nan_to_num", "clamp", "clip", "dropout", "dropout1d", "dropout2d",
        "dropout3d", "alpha_dropout", "float", "half", "double", "long", "int", "short", "bool",
        "bfloat16", "byte", "char", "type_as", "masked_fill", "pow", "mul", "div", "add", "sub",
        "tril", "triu", "lerp", "softmax", "log_softmax", "softmin", "normalize", "layer_norm",
        "rms_norm", "group_norm", "batch_norm", "instance_norm", "cumsum", "cumprod", "flip",
        "roll", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "where", "tan", "asin",
        "acos", "atan", "sinh", "cosh", "log2", "log10", "exp2", "frac", "erfc", "erfinv", "sgn",
        "isfinite", "signbit",
    }
)  # fmt: skip

REDUCTIONS = frozenset({"sum", "mean", "prod", "amax", "amin", "std", "var", "norm", "logsumexp", "all", "any", "argmax", "argmin"})

# Functions whose output has the shape and dtype of their first argument, whatever the others
# (weights, biases, `normalized_shape`) are.
SHAPE_OF_FIRST = frozenset({"layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "normalize", "softmax", "log_softmax", "softmin"})

# Ops whose output is laid out afresh (row-major) whatever the inputs' strides.
FRESH_CONTIGUOUS = frozenset({"linear", "matmul", "mm", "bmm", "layer_norm"})

class SymbolicOps(ModuleOutputs):
    def __init__(self, interp: Any) -> None:
        # Weak: the interpreter owns these ops, and a cycle would keep each file's whole
        # analysis (AST included) alive until the cyclic GC, which then dominates `check` time.
        self._interp = weakref.ref(interp)
        self.names = interp.names
        # Sizes an op proved equal (`nn.Linear(C, ...)` applied to x: x.shape[-1] == C):
        # atom -> the expression it equals. Every size is read through `canon`.
        self.equal: dict[int, Size] = {}
        # Atoms of opaque values the code used where only an int goes (a module size, a
        # `view` argument): arithmetic on them gives numbers, not tensors.
        self.int_atoms: set[int] = set()
        self._weights: dict[int, int] = {}

    @property
    def interp(self) -> Any:
        return self._interp()

    def mark_int(self, values: list[Value]) -> None:
        for value in values:
            size = self.size_of(value) if isinstance(value, (Opaque, SizeValue)) else None
            if isinstance(size, SymExpr):
                self.int_atoms |= size.atoms()

    def is_number(self, value: Value) -> bool:
        """A scalar operand for sure (not a tensor in disguise)."""
        from stridelens.server.analysis.values import Number

        if isinstance(value, Number):
            return value.atoms <= self.int_atoms
        if isinstance(value, SizeValue):
            return value.certain or value.expr.atoms() <= self.int_atoms
        if isinstance(value, Const):
            return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
        if isinstance(value, Opaque):
            return self.scalar_type(value) is not None
        return False

    def scalar_type(self, value: Opaque) -> type | None:
        """The Python scalar type of a parameter annotated or defaulted as one (`eps: float`)."""
        return self.interp.scalar_params.get((value.root, value.path))  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ equal sizes
    def canon(self, x: Size, equal: dict[int, Size] | None = None) -> Size:
        equal = self.equal if equal is None else equal
        if not equal or not isinstance(x, SymExpr):
            return x
        for _ in range(8):
            if not (x.atoms() & equal.keys()) if isinstance(x, SymExpr) else True:
                return x
            y = sz.substitute(x, equal)
            if y is None:
                return x
            x = y
        return x

    def canon_layout(self, layout: Layout) -> Layout:
        if not self.equal or not (layout.atoms() & self.equal.keys()):
            return layout
        out = layout.substitute(self.equal)
        for _ in range(7):
            if out is None or not (out.atoms() & self.equal.keys()):
                break
            out = out.substitute(self.equal)
        return out if out is not None else layout

    def unify(self, a: Size | None, b: Size | None) -> None:
        """Record that two sizes are equal in every run that gets past this line."""
        if a is None or b is None:
            return
        a, b = self.canon(a), self.canon(b)
        if a == b:
            return
        for lone, other in ((a, b), (b, a)):
            if isinstance(lone, SymExpr) and len(lone.terms) == 1:
                m, c = lone.terms[0]
                if c == 1 and len(m) == 1 and m[0][1] == 1 and m[0][0] not in (other.atoms() if isinstance(other, SymExpr) else ()):
                    self.equal[m[0][0]] = other
                    self.names.merge(lone, other)
                    return

    # ------------------------------------------------------------------ sizes
    def size_of(self, value: Value | None) -> Size | None:
        if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool):
            return value.value
        if isinstance(value, SizeValue):
            return self.canon(value.expr)
        if isinstance(value, Opaque):
            origin = None if value.path[0].startswith("<") else value.path
            return self.canon(self.names.atom_for(("opaque", value.root, value.path), origin))
        return None

    def conditions_of(self, args: list[Value]) -> frozenset[Condition]:
        """What the sizes among `args` assumed (`C % n == 0` for a `C // n`)."""
        out: frozenset[Condition] = frozenset()
        for arg in args:
            if isinstance(arg, SizeValue):
                out |= arg.conditions
            elif isinstance(arg, SeqValue):
                out |= self.conditions_of(list(arg.items))
        return out

    def sizes_of(self, args: list[Value]) -> tuple[Size, ...] | None:
        """`view(B, T, C)`, `view((B, T, C))`, `view(x.shape)`: the sizes, or None."""
        items: list[Value]
        if len(args) == 1 and isinstance(args[0], SeqValue):
            items = list(args[0].items)
        elif len(args) == 1 and isinstance(args[0], Const) and isinstance(args[0].value, (tuple, list)):
            items = [Const(v) for v in args[0].value]
        else:
            items = list(args)
        out = []
        for item in items:
            size = self.size_of(item)
            if size is None:
                return None
            out.append(size)
        self.mark_int(items)
        return tuple(out)

    def grad_of(self, inputs: list[TensorFact], scope: Any) -> bool | None:
        if scope.grad_enabled is False:
            return False
        if all(t.requires_grad is False and t.carries_graph is not True for t in inputs):
            return False
        if scope.grad_enabled is None:
            return None
        if any(t.carries_graph or t.requires_grad for t in inputs):
            return True
        return None

    def tensor(
        self,
        layout: Layout,
        like: TensorFact,
        *,
        view_of_input: bool | None,
        assumes: frozenset[Condition],
        scope: Any,
        inputs: list[TensorFact] | None = None,
        dtype: str | bool | None = True,
        grad: bool | str | None = "inherit",
    ) -> TensorFact:
        """A fact for `layout`: a view of `like`'s storage (`view_of_input`), a new tensor
        (False), or unknown storage identity (None)."""
        inputs = inputs if inputs is not None else [like]
        contiguous, flips = self.contiguity(layout)
        if layout.atoms():  # some size is symbolic: which ones
            all_ints = all(isinstance(s, int) for s in layout.shape)
            strides_int = layout.strides is not None and all(isinstance(s, int) for s in layout.strides)
        else:
            all_ints, strides_int = True, layout.strides is not None
        requires = self.grad_of(inputs, scope) if grad == "inherit" else grad
        graph = requires
        if grad == "inherit" and scope.grad_enabled is False and view_of_input is not False:
            # Under no_grad a view of a tensor that requires grad requires it too (no grad_fn);
            # what may be a view or a copy is known only where the input needs no grad.
            requires = like.requires_grad if view_of_input else (False if like.requires_grad is False else None)
            graph = False
        if view_of_input:
            storage, is_view, view_of = like.storage_key, True, like.view_of
        elif view_of_input is False:
            storage, is_view, view_of = self.interp.fresh_storage(), False, None
            sized = self.interp.sized_storages
            if not self.interp.replay and inputs and all(t.storage_key in sized for t in inputs):
                sized.add(storage)  # computed only from literal sizes: replay would know it
        else:
            storage, is_view, view_of = None, None, None
        return new_fact(
            shape=tuple(layout.shape) if all_ints else None,
            strides=tuple(layout.strides) if layout.strides is not None and strides_int and all_ints else None,
            storage_offset=layout.offset if isinstance(layout.offset, int) and all_ints and strides_int else None,
            dtype=like.dtype if dtype is True else (dtype or None),
            device=like.device,
            contiguous=contiguous,
            is_view=is_view,
            view_of=view_of,
            storage_key=storage,
            requires_grad=requires if isinstance(requires, bool) or requires is None else None,  # type: ignore[arg-type]
            carries_graph=graph if isinstance(graph, bool) or graph is None else None,  # type: ignore[arg-type]
            permuted_by=like.permuted_by if view_of_input else None,
            detached_from=like.detached_from if view_of_input else None,
            sym=layout,
            assumes=assumes | flips,
        )

    def contiguity(self, layout: Layout) -> tuple[bool | None, frozenset[Condition]]:
        """`is_contiguous()` for every size, and the sizes that must not be 1 for it."""
        return contiguity_verdict(layout)

    def fresh(
        self,
        shape: tuple[Size, ...],
        like: TensorFact,
        inputs: list[TensorFact],
        scope: Any,
        *,
        dtype: str | bool | None = True,
        contiguous: bool | str = True,
    ) -> TensorFact:
        """A new tensor of `shape`. `contiguous`: True, row-major whatever the inputs (matmul,
        linear); "inherit", row-major when every input is (elementwise ops, norms, a conv),
        under the inputs' own layout conditions; False, layout unknown."""
        conditions: frozenset[Condition] = frozenset()
        for t in inputs:
            conditions |= shape_conditions(t.assumes)
        if contiguous == "inherit":
            dense = all(t.contiguous is True for t in inputs)
            if dense:
                for t in inputs:
                    conditions |= t.assumes
            contiguous = dense
        layout = lay.contiguous(shape) if contiguous else Layout(shape, None, None)
        return self.tensor(layout, like, view_of_input=False, assumes=conditions, scope=scope, inputs=inputs, dtype=dtype)

    def same_layout_op(self, tensor: TensorFact, scope: Any, inputs: list[TensorFact] | None = None, dtype: str | bool | None = True) -> TensorFact:
        """An elementwise result of `tensor`'s shape: contiguous when its input is."""
        layout: Layout = tensor.sym
        return self.fresh(layout.shape, tensor, inputs or [tensor], scope, dtype=dtype, contiguous="inherit")

    # ------------------------------------------------------------------ methods
    def method(self, tensor: TensorFact, name: str, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        layout: Layout | None = tensor.sym
        if layout is None:
            return None
        layout = self.canon_layout(layout)
        try:
            return self._method(tensor, layout, name, args, kwargs, scope)
        except (Undecided, IndexError, ValueError, TypeError):
            return None

    def _dim_arg(self, args: list[Value], kwargs: dict[str, Value], i: int, key: str = "dim", default: int | None = None) -> int | None:
        value = args[i] if len(args) > i else kwargs.get(key)
        if value is None:
            return default
        if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool):
            return value.value
        raise Undecided

    def _method(self, tensor: TensorFact, layout: Layout, name: str, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        view = lambda out, extra=frozenset(): self.tensor(  # noqa: E731
            out, tensor, view_of_input=True, assumes=tensor.assumes | extra, scope=scope
        )
        if name in ("view", "reshape"):
            if args and isinstance(args[0], TorchRef):
                return None  # view(dtype)
            shape = self.sizes_of(args)
            if shape is None:
                return None
            spelled = self.conditions_of(args)
            if spelled and -1 not in shape and lay.equal(self.canon(lay.numel(shape)), self.canon(lay.numel(layout.shape))):
                # `view(B, T, nh, C // nh)` of B*T*C elements: torch checks the element count,
                # so every (non-empty) run past this line has nh dividing C. Not an assumption.
                spelled = frozenset(c for c in spelled if c.kind != "divides")
            sized = with_fields(tensor, assumes=tensor.assumes | spelled)
            return self._view_or_reshape(sized, layout, name, shape, scope)
        if name == "flatten":
            start = self._dim_arg(args, kwargs, 0, "start_dim", 0)
            end = self._dim_arg(args, kwargs, 1, "end_dim", -1)
            if start is None or end is None:
                return None
            return self._view_or_reshape(tensor, layout, "flatten", lay.flatten_shape(layout.shape, start, end), scope, flatten=(start, end))
        if name in ("permute",):
            dims = self._int_tuple(args)
            return None if dims is None else view(lay.permute(layout, dims))
        if name in ("transpose", "swapaxes", "swapdims"):
            d0, d1 = self._dim_arg(args, kwargs, 0, "dim0"), self._dim_arg(args, kwargs, 1, "dim1")
            if d0 is None or d1 is None:
                return None
            return view(lay.transpose(layout, d0, d1))
        if name in ("t", "T") and layout.ndim <= 2:
            return view(lay.transpose(layout, 0, -1) if layout.ndim == 2 else layout)
        if name == "mT" and layout.ndim >= 2:
            return view(lay.transpose(layout, -2, -1))
        if name == "unsqueeze":
            d = self._dim_arg(args, kwargs, 0)
            return None if d is None else view(lay.unsqueeze(layout, d))
        if name == "squeeze":
            dims = self._int_tuple(args) if args else None
            if dims is None and args:
                return None
            return self._squeeze(tensor, layout, dims, scope)
        if name in ("expand", "broadcast_to"):
            shape = self.sizes_of(args)
            return None if shape is None else view(lay.expand(layout, shape))
        if name == "expand_as" and args and isinstance(args[0], TensorFact) and args[0].sym is not None:
            return view(lay.expand(layout, args[0].sym.shape))
        if name == "contiguous" and not args and not kwargs:
            if tensor.contiguous is True:
                return tensor
            if tensor.contiguous is False:
                return self.tensor(lay.contiguous(layout.shape), tensor, view_of_input=False, assumes=tensor.assumes, scope=scope)
            # Either the tensor itself or a row-major copy: contiguous, of the same shape (its
            # strides may differ where a size is 1, so they are not stated).
            out = self.tensor(Layout(layout.shape, None, None), tensor, view_of_input=None, assumes=shape_conditions(tensor.assumes), scope=scope)
            return with_fields(out, contiguous=True)
        if name == "detach":
            return with_fields(view(layout), requires_grad=False, carries_graph=False, is_view=False)
        if name == "repeat" and args and not kwargs:
            return self._repeat(tensor, layout, args, scope)
        if name in ("split", "chunk", "tensor_split", "unbind"):
            return self._split(tensor, layout, name, args, kwargs, scope)
        if name == "narrow":
            d = self._dim_arg(args, kwargs, 0)
            begin, length = (self.size_of(args[1]), self.size_of(args[2])) if len(args) == 3 else (None, None)
            if d is None or begin is None or length is None:
                return None
            return view(lay.narrow(layout, d, begin, length))
        if name == "select":
            d = self._dim_arg(args, kwargs, 0)
            index = self._dim_arg(args, kwargs, 1, "index")
            if d is None or index is None:
                return None
            return view(lay.select(layout, d, index))
        if name == "clone" and not kwargs:
            return self.same_layout_op(tensor, scope)
        if name in ("type_as",) and args and isinstance(args[0], TensorFact):
            return self._cast(tensor, args[0].dtype, scope)  # llama2.c's `xq_out.type_as(xq)`
        if name == "type" and len(args) == 1 and not kwargs and isinstance(args[0], TorchRef) and args[0].path.startswith("torch."):
            from stridelens.server.analysis.torch_api import DTYPES

            dtype_name = DTYPES.get(args[0].path[6:])
            return None if dtype_name is None else self._cast(tensor, dtype_name, scope)
        if name in ("float", "half", "double", "long", "int", "short", "bool", "bfloat16", "byte", "char"):
            from stridelens.server.analysis.torch_api import CAST_METHODS

            return self._cast(tensor, CAST_METHODS[name], scope)
        if name in ("matmul", "mm", "bmm") and args and isinstance(args[0], TensorFact):
            return self.matmul(tensor, args[0], scope)
        if name in RETURNS_VALUES_INDICES:
            return self._values_indices(tensor, layout, name, args, kwargs, scope)
        if name in REDUCTIONS:
            return self._reduce(tensor, layout, name, args, kwargs, scope)
        if name in UNARY_SAME_SHAPE:
            others = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorFact)]
            if others:
                return self.elementwise([tensor, *others], scope)
            if any(isinstance(a, (Opaque, SizeValue)) and not self.is_number(a) for a in args):
                return None  # an operand that may be a tensor of another shape
            dtype: str | bool | None = True
            if name in ("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_not", "isfinite", "signbit"):
                dtype = "bool"
            return self.same_layout_op(tensor, scope, dtype=dtype)
        return None

    def _repeat(self, tensor: TensorFact, layout: Layout, args: list[Value], scope: Any) -> Value | None:
        """`x.repeat(r0, ..., rk)`: a new row-major tensor (always a copy), x's sizes times the
        last repeats, the leading repeats as new dims (torch 2.13: fewer repeats than dims
        raises, so nothing is stated)."""
        reps = self.sizes_of(args)
        if reps is None or len(reps) < layout.ndim or any(isinstance(r, int) and r < 0 for r in reps):
            return None
        lead = len(reps) - layout.ndim
        shape: list[Size] = list(reps[:lead])
        for size, times in zip(layout.shape, reps[lead:], strict=True):
            product = sz.mul(size, times)
            if product is None:
                return None
            shape.append(product)
        return self.tensor(lay.contiguous(tuple(shape)), tensor, view_of_input=False, assumes=shape_conditions(tensor.assumes), scope=scope)

    def _values_indices(self, tensor: TensorFact, layout: Layout, name: str, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        """`x.max(dim)`, `x.topk(k)`, `x.sort()` & co.: `(values, indices)`, two new tensors
        (values of x's dtype, int64 indices that never require grad)."""
        def flag(i: int, key: str) -> bool:
            value = args[i] if len(args) > i else kwargs.get(key, Const(False))
            if not (isinstance(value, Const) and isinstance(value.value, bool)):
                raise Undecided
            return value.value

        shape = layout.shape
        first = 1 if name in ("kthvalue", "topk") else 0  # the dim's position (after k)
        if name in ("max", "min", "median") and ((not args and "dim" not in kwargs) or (args and not isinstance(args[0], Const))):
            return None  # one tensor (no dim), or elementwise `max(a, b)`
        k: Size = 0
        if first:
            found = self.size_of(args[0] if args else kwargs.get("k"))
            if found is None:
                # `topk(logits, min(top_k, logits.size(-1)))`: an int nobody can name here;
                # the rank, the other sizes and the dtypes stay.
                k = sz.anonymous()
            else:
                k = found
                self.mark_int(args[:1] or [kwargs["k"]])
        dim = self._dim_arg(args, kwargs, first, "dim", None if name in ("max", "min", "median") else -1)
        if dim is None:
            return None
        d = lay._dim(dim, layout.ndim)
        if name == "topk":
            out: tuple[Size, ...] = (*shape[:d], k, *shape[d + 1 :])
        elif name == "sort":
            flag(first + 1, "descending")
            out = shape
        else:
            out = lay.reduce_shape(shape, (d,), flag(first + 1, "keepdim"))
        values = self.fresh(out, tensor, [tensor], scope, contiguous="inherit")
        indices = self.fresh(out, tensor, [tensor], scope, dtype="int64", contiguous="inherit")
        return SeqValue((values, with_fields(indices, requires_grad=False, carries_graph=False)), VALUES_INDICES)

    def _int_tuple(self, args: list[Value]) -> tuple[int, ...] | None:
        items: list[Any]
        if len(args) == 1 and isinstance(args[0], Const) and isinstance(args[0].value, (tuple, list)):
            items = list(args[0].value)
        else:
            items = [a.value if isinstance(a, Const) else None for a in args]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            return None
        return tuple(items)

    def _equal_numel(self, layout: Layout, shape: tuple[Size, ...]) -> tuple[Layout, tuple[Size, ...]]:
        """`out.view(b, n, self.heads * d)` of a (b, h, n, d) tensor runs only if h == heads:
        past this line they are one size."""
        if any(isinstance(s, int) and s == -1 for s in shape):
            return layout, shape
        old, new = sz.product(layout.shape), sz.product(shape)
        if old is None or new is None or old == new:
            return layout, shape
        ratio = sz.exact_div(old, new)
        if isinstance(ratio, SymExpr) and len(ratio.terms) == 1:
            m, c = ratio.terms[0]
            ups = [a for a, e in m if e == 1]
            downs = [a for a, e in m if e == -1]
            if c == 1 and len(m) == 2 and len(ups) == 1 and len(downs) == 1:
                self.unify(sz.atom(ups[0]), sz.atom(downs[0]))
                return self.canon_layout(layout), tuple(self.canon(s) for s in shape)
        return layout, shape

    def _view_or_reshape(
        self, tensor: TensorFact, layout: Layout, name: str, shape: tuple[Size, ...], scope: Any, flatten: tuple[int, int] | None = None
    ) -> Value | None:
        layout, shape = self._equal_numel(layout, shape)
        # A `-1` is an exact quotient of the numel by the other sizes: torch raises ("shape
        # '[2, -1]' is invalid for input of size 5") where it is not, so past the call it is,
        # and no condition is said (as for `view(B, T, nh, C // nh)`).
        if layout.strides is None:
            new = lay.infer_shape(shape, lay.numel(layout.shape))
            if name == "view":
                if tensor.contiguous is not True:
                    return None
                # A contiguous tensor can be viewed as any shape of its numel: a contiguous view.
                out = self.tensor(Layout(new, None, None), tensor, view_of_input=True, assumes=shape_conditions(tensor.assumes), scope=scope)
                return with_fields(out, contiguous=True)
            return self.tensor(Layout(new, None, None), tensor, view_of_input=None, assumes=shape_conditions(tensor.assumes), scope=scope)

        outcome, flips = reshape_verdict(layout, shape, flatten)
        # `C // n` sizes stand for exact quotients: say so.
        divides = frozenset(c for c in tensor.assumes if c.kind == "divides")
        if outcome[0] == "raises":
            if name == "view":
                self.interp.symbolic_view_raises(flips | _contiguity_conditions(tensor))
                return TensorFact(dtype=tensor.dtype, device=tensor.device)
            new = lay.infer_shape(shape, lay.numel(layout.shape))
            outcome = ("copy", lay.contiguous(new))
        if outcome[0] == "view":
            viewed = self.tensor(outcome[1], tensor, view_of_input=True, assumes=tensor.assumes | flips | divides, scope=scope)
            return with_fields(viewed, view_conditional=True)
        result = self.tensor(outcome[1], tensor, view_of_input=False, assumes=shape_conditions(tensor.assumes) | flips, scope=scope)
        self.interp.symbolic_reshape_copies(name, flips | _contiguity_conditions(tensor))
        return with_fields(result, view_conditional=True)

    def _squeeze(self, tensor: TensorFact, layout: Layout, dims: tuple[int, ...] | None, scope: Any) -> Value | None:
        targets = range(layout.ndim) if dims is None else [d % max(layout.ndim, 1) for d in dims]
        extra: set[Condition] = set()
        for d in targets:
            size = layout.shape[d]
            if isinstance(size, SymExpr):
                if len(size.terms) != 1:
                    return None
                extra.add(Condition("ne", size, 1, layout_only=False))
        out = lay.squeeze(layout, dims)
        return self.tensor(out, tensor, view_of_input=True, assumes=tensor.assumes | frozenset(extra), scope=scope)

    def _split(self, tensor: TensorFact, layout: Layout, name: str, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        dim = self._dim_arg(args, kwargs, 0 if name == "unbind" else 1, "dim", 0)  # `x.unbind(-1)`
        if dim is None:
            return None
        d = dim % max(layout.ndim, 1)
        size = layout.shape[d]
        if name == "unbind":
            count = size if isinstance(size, int) else None
            if count is None or count > 64:
                return None
            pieces: list[Size] = [1] * count
        elif name == "chunk":
            n = args[0] if args else kwargs.get("chunks")
            if not (isinstance(n, Const) and isinstance(n.value, int)):
                return None
            pieces = lay.chunk_sizes(size, n.value)
        elif name == "split":
            first = args[0] if args else kwargs.get("split_size_or_sections")
            each = self.size_of(first)
            if each is not None:
                pieces = lay.split_sizes(size, each)
            elif isinstance(first, (SeqValue, Const)):
                listed = self.sizes_of([first])
                if listed is None:
                    return None
                pieces = list(listed)
            else:
                return None
        else:
            return None
        items: list[Value] = []
        start: Size = 0
        for piece in pieces:
            if name == "unbind":
                out = lay.select(layout, d, sz.as_int(start) or 0)
            else:
                out = lay.narrow(layout, d, start, piece)
            items.append(self.tensor(out, tensor, view_of_input=True, assumes=tensor.assumes, scope=scope))
            nxt = sz.add(start, piece)
            if nxt is None:
                return None
            start = nxt
        return SeqValue(tuple(items))

    def _reduce(self, tensor: TensorFact, layout: Layout, name: str, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        dim_value = args[0] if args else kwargs.get("dim")
        keep = kwargs.get("keepdim", args[1] if len(args) > 1 else Const(False))
        if not isinstance(keep, Const) or not isinstance(keep.value, bool):
            return None
        dims: tuple[int, ...] | None
        if dim_value is None or (isinstance(dim_value, Const) and dim_value.value is None):
            if name in ("argmax", "argmin") and keep.value:
                return None
            dims = None
        elif isinstance(dim_value, Const) and isinstance(dim_value.value, int):
            dims = (dim_value.value,)
        elif isinstance(dim_value, Const) and isinstance(dim_value.value, (tuple, list)):
            dims = tuple(dim_value.value)
        else:
            return None
        if name in ("max", "min") and dims is not None:
            return None  # (values, indices)
        shape = lay.reduce_shape(layout.shape, dims, keep.value)
        dtype: str | bool | None = "int64" if name in ("argmax", "argmin") else ("bool" if name in ("all", "any") else True)
        return self.fresh(shape, tensor, [tensor], scope, dtype=dtype)

    # ------------------------------------------------------------------ several inputs
    def elementwise(self, tensors: list[TensorFact], scope: Any, dtype: str | bool | None = True) -> TensorFact | None:
        shapes = [tuple(self.canon(x) for x in s) for t in tensors if (s := t.known_shape) is not None]
        if len(shapes) != len(tensors):
            return None
        try:
            shape = lay.broadcast_shapes(*shapes, undecided=sz.anonymous)
        except (Undecided, ValueError):
            return None
        like = next(t for t in tensors if t.sym is not None or t.shape is not None)
        out = self.fresh(shape, like, tensors, scope, dtype=dtype if dtype is not True else _result_dtype(tensors), contiguous="inherit")
        clamped = _clamp_conditions_broadcast_away(tensors, shapes, shape)
        return with_fields(out, assumes=out.assumes - clamped) if clamped else out

    def matmul(self, a: TensorFact, b: TensorFact, scope: Any) -> TensorFact | None:
        sa, sb = a.known_shape, b.known_shape
        if sa is None or sb is None:
            return None
        if sa and sb:
            self.unify(sa[-1], sb[-2] if len(sb) >= 2 else sb[0])
            sa = tuple(self.canon(s) for s in sa)
            sb = tuple(self.canon(s) for s in sb)
        try:
            shape = lay.matmul_shape(sa, sb)
        except (Undecided, ValueError):
            return None
        return self.fresh(shape, a, [a, b], scope, dtype=_result_dtype([a, b]))

    def _cast(self, tensor: TensorFact, target: str | None, scope: Any) -> TensorFact:
        """`x.float()`, `x.type(dt)`, `x.type_as(y)`: torch returns the tensor itself when it
        already has the dtype; where either dtype is unknown it may, so no new storage and no
        view verdict (unless the tensor is no view either way) is claimed."""
        if target is not None and target == tensor.dtype:
            return tensor
        out = self.same_layout_op(tensor, scope, dtype=target)
        if target is None or tensor.dtype is None:
            out = with_fields(out, is_view=False if tensor.is_view is False else None, storage_key=None)
        return out

    def _adaptive_pool(self, x: TensorFact, spatial: int, size: Value | None, scope: Any) -> TensorFact | None:
        """`F.adaptive_avg_pool2d(x, (1, 1))`: the leading dims, then the sizes asked for."""
        if x.sym is None or x.sym.ndim < spatial + 1 or not isinstance(size, Const):
            return None
        asked = size.value if isinstance(size.value, (tuple, list)) else (size.value,) * spatial
        if len(asked) != spatial or not all(type(s) is int and s > 0 for s in asked):
            return None  # a None entry keeps the input's size: not modelled
        return self.fresh((*x.sym.shape[:-spatial], *asked), x, [x], scope, contiguous="inherit")

    def linear(self, x: TensorFact, out_features: Size, inputs: list[TensorFact], scope: Any, in_features: Size | None = None) -> TensorFact | None:
        if x.sym is None or not x.sym.shape:
            return None
        self.unify(x.sym.shape[-1], in_features)
        shape = tuple(self.canon(s) for s in (*x.sym.shape[:-1], out_features))
        out = self.fresh(shape, x, inputs, scope)
        # With a bias, a 1-d or >2-d input comes back as a view of a 2-d result (checked on
        # torch 2.13): storage is new, whether `_base` is set depends on the bias; say nothing.
        return with_fields(out, is_view=None) if len(shape) != 2 else out

    # ------------------------------------------------------------------ torch.* / F.*
    def function(self, leaf: str, args: list[Value], kwargs: dict[str, Value], scope: Any, functional: bool) -> Value | None:
        try:
            return self._function(leaf, args, kwargs, scope, functional)
        except (Undecided, IndexError, ValueError, TypeError):
            return None

    def _function(self, leaf: str, args: list[Value], kwargs: dict[str, Value], scope: Any, functional: bool) -> Value | None:
        tensors = [a for a in args if isinstance(a, TensorFact)]
        first = args[0] if args else None
        if leaf == "einsum" and not functional:
            return einsum_result(self, args, scope)
        if not isinstance(first, TensorFact) and leaf not in ("cat", "concat", "stack"):
            return None
        if leaf == "linear" and len(args) >= 2 and isinstance(args[1], TensorFact):
            weight = args[1]
            w_shape = weight.known_shape
            if w_shape is None or len(w_shape) != 2 or not isinstance(first, TensorFact):
                return None
            return self.linear(first, w_shape[0], [t for t in [*args, *kwargs.values()] if isinstance(t, TensorFact)], scope, w_shape[1])
        if leaf in ("matmul", "mm", "bmm") and len(tensors) == 2:
            return self.matmul(tensors[0], tensors[1], scope)
        if leaf == "adaptive_avg_pool2d" and isinstance(first, TensorFact):
            # (the 1d one returns a view of a 2d result: torch 2.13)
            return self._adaptive_pool(first, 2, args[1] if len(args) > 1 else kwargs.get("output_size"), scope)
        if leaf in ("cat", "concat", "stack") and isinstance(first, (SeqValue,)):
            return self._cat(leaf, first, args, kwargs, scope)
        if leaf in ("cat", "concat", "stack") and isinstance(first, ListOf):
            return self._cat_list(leaf, first, args, kwargs, scope)
        if leaf == "scaled_dot_product_attention" and len(tensors) >= 3:
            q, v = tensors[0], tensors[2]
            if q.sym is None or v.sym is None:
                return None
            shape = (*q.sym.shape[:-1], v.sym.shape[-1])
            # Strides and view-ness depend on the backend the call picks.
            return with_fields(self.fresh(shape, q, tensors, scope, contiguous=False), is_view=None)
        if not isinstance(first, TensorFact):
            return None
        if (leaf in REDUCTIONS or leaf in RETURNS_VALUES_INDICES) and not functional:
            return self.method(first, leaf, args[1:], kwargs, scope)
        if leaf in SHAPE_OF_FIRST and first.sym is not None:
            return self.fresh(first.sym.shape, first, tensors, scope, dtype=True, contiguous=True if leaf in FRESH_CONTIGUOUS else "inherit")
        if leaf in UNARY_SAME_SHAPE:
            if first.sym is None:
                return None
            if len(tensors) > 1:
                return self.elementwise(tensors, scope)
            if any(isinstance(a, (Opaque, SizeValue)) for a in args[1:]):
                return None
            return self.fresh(first.sym.shape, first, [first], scope, contiguous=True if leaf in FRESH_CONTIGUOUS else "inherit")
        if leaf in ("transpose", "permute", "reshape", "flatten", "squeeze", "unsqueeze", "split", "chunk"):
            return self.method(first, leaf, args[1:], kwargs, scope)
        return None

    def _cat(self, leaf: str, seq: SeqValue, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        items = [i for i in seq.items if isinstance(i, TensorFact)]
        shapes = [s for i in items if (s := i.known_shape) is not None]
        if len(items) != len(seq.items) or not items or len(shapes) != len(items):
            return None
        dim = self._dim_arg(args, kwargs, 1, "dim", 0)
        if dim is None or len({len(s) for s in shapes}) != 1:
            return None
        ndim = len(shapes[0]) + (1 if leaf == "stack" else 0)
        d = dim % ndim
        if leaf == "stack":
            if any(s != shapes[0] for s in shapes):
                return None
            shape: tuple[Size, ...] = (*shapes[0][:d], len(items), *shapes[0][d:])
        else:
            for s in shapes:
                if any(s[i] != shapes[0][i] for i in range(len(s)) if i != d):
                    return None
            total: Size = 0
            for s in shapes:
                nxt = sz.add(total, s[d])
                if nxt is None:
                    return None
                total = nxt
            shape = (*shapes[0][:d], total, *shapes[0][d + 1 :])
        # Mixed dtypes promote: stated only when all agree.
        return self.fresh(shape, items[0], items, scope, dtype=_result_dtype(items), contiguous="inherit")

    def _cat_list(self, leaf: str, seq: ListOf, args: list[Value], kwargs: dict[str, Value], scope: Any) -> Value | None:
        """`torch.stack([f(y) for y in ys], dim)`: items of one shape, a count the code does
        not fix. The joined dim is a size with no name (the rank is still known)."""
        item = seq.item
        shape = item.known_shape if isinstance(item, TensorFact) else None
        dim = self._dim_arg(args, kwargs, 1, "dim", 0)
        if shape is None or dim is None or (leaf != "stack" and not shape):
            return None
        node = self.interp._current_node
        hole = self.names.atom_for(("hole", id(node)), None)
        self.interp._keep_alive.append(node)
        d = lay._dim(dim, len(shape) + (1 if leaf == "stack" else 0))
        out = (*shape[:d], hole, *shape[d:]) if leaf == "stack" else (*shape[:d], hole, *shape[d + 1 :])
        return self.fresh(out, item, [item], scope, contiguous="inherit")  # type: ignore[list-item, arg-type]

    # ------------------------------------------------------------------ indexing
    def index(self, base: TensorFact, items: list[Any], scope: Any) -> TensorFact | None:
        """Basic indexing (ints, slices, None, ...) of a symbolic tensor: always a view."""
        layout = layout_of(base)
        if layout is None:
            return None
        bounds: list[Condition] = []
        try:
            out = self._index(layout, items, bounds)
        except (Undecided, IndexError, ValueError, TypeError):
            return None
        if out is None:
            return None
        return self.tensor(out, base, view_of_input=True, assumes=base.assumes | frozenset(bounds), scope=scope)

    def _index(self, layout: Layout, items: list[Any], bounds: list[Condition]) -> Layout | None:
        if sum(1 for i in items if i is Ellipsis) > 1:
            return None
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        if used > layout.ndim:
            raise IndexError("too many indices")
        expanded: list[Any] = []
        for item in items:
            if item is Ellipsis:
                expanded.extend([slice(None)] * (layout.ndim - used))
            else:
                expanded.append(item)
        d = 0
        for item in expanded:
            if item is None:
                layout = lay.unsqueeze(layout, d)
                d += 1
            elif isinstance(item, int):
                layout = lay.select(layout, d, item)
            elif isinstance(item, tuple) and item and item[0] == "slice":
                _, start, stop, step = item
                if step is not None and not isinstance(step, int):
                    return None
                size = layout.shape[d]
                if isinstance(size, SymExpr) or isinstance(stop, SymExpr):
                    # Python clamps slice bounds; the length is exact only within the dim.
                    if stop is not None and stop != size:
                        bounds.append(Condition("le", stop, size, layout_only=False))
                    if isinstance(start, int) and start > 0 and stop is None:
                        bounds.append(Condition("ge", size, start, layout_only=False))
                    if isinstance(start, SymExpr):
                        bounds.append(Condition("le", start, size if stop is None else stop, layout_only=False))
                layout = lay.slice_dim(layout, d, start, stop, 1 if step is None else step)
                d += 1
            else:
                return None
        return layout

    def factory(self, name: str, args: list[Value], kwargs: dict[str, Value], literal: bool = False) -> tuple[Size, ...] | None:
        """The shape of `torch.zeros(B, T)` & co. with symbolic sizes (also with only literal
        ones when `literal`), or None."""
        if name in ("zeros", "ones", "empty", "randn", "rand", "full"):
            size_args = args[:1] if name == "full" else args
            if "size" in kwargs:
                size_args = [kwargs["size"]]
            if not size_args:
                return None
            shape = self.sizes_of(size_args)
            if shape is None or any(isinstance(s, int) and s < 0 for s in shape):
                return None
            if literal:
                return shape if all(isinstance(s, int) for s in shape) else None
            return shape if any(isinstance(s, SymExpr) for s in shape) else None
        if name == "arange" and any(k in kwargs for k in ("start", "end", "step")):
            return None  # LeViT's `arange(0, n, step=2)`: a ceiling division not modelled
        if name == "arange" and literal:
            return _literal_arange_shape(args)
        if name == "arange" and (len(args) == 1 or (len(args) == 2 and args[0] == Const(0))):
            # `arange(n)`, `arange(0, n)`: n items (a step would need a ceiling division).
            n = self.size_of(args[-1])
            return (n,) if isinstance(n, SymExpr) else None
        return None


def _clamp_conditions_broadcast_away(tensors: list[TensorFact], shapes: list[tuple[Size, ...]], result: tuple[Size, ...]) -> frozenset[Condition]:
    """A slice's `stop <= size` conditions the broadcast result does not need: where one input
    without them has the result's shape and the sliced input's dims are each 1 or that input's,
    a clamped (shorter) dim either is 1 or fails to broadcast. `att.masked_fill(bias[:, :, :T, :T]
    == 0, ...)` is `att`'s shape in every run that gets past it, whatever the buffer's size."""
    clamps = [frozenset(c for c in t.assumes if c.kind == "le" and not c.layout_only) for t in tensors]
    full = [i for i, s in enumerate(shapes) if s == result and not clamps[i]]
    if not full or not any(clamps):
        return frozenset()
    dims = shapes[full[0]]
    dropped: frozenset[Condition] = frozenset()
    for shape, clamp in zip(shapes, clamps, strict=True):
        if not clamp or len(shape) > len(dims):
            continue
        aligned = dims[len(dims) - len(shape) :]
        if all(s == 1 or s == d for s, d in zip(shape, aligned, strict=True)):
            dropped |= clamp
    # A condition another input needs for its own sizes stays.
    kept = frozenset().union(*(c for i, c in enumerate(clamps) if not (c <= dropped) or i in full))
    return dropped - kept


def _literal_arange_shape(args: list[Value]) -> tuple[Size, ...] | None:
    """`arange(12.0)`, `arange(2, 12, 2)`: torch's length, ceil((end - start) / step)."""
    numbers = [a.value for a in args if isinstance(a, Const) and type(a.value) in (int, float)]
    if len(numbers) != len(args) or not 1 <= len(numbers) <= 3:
        return None
    start, end, step = (0, numbers[0], 1) if len(numbers) == 1 else (numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else 1)
    if step == 0 or (end - start) * step < 0:
        return None
    return (math.ceil((end - start) / step),)


def _result_dtype(tensors: list[TensorFact]) -> str | None:
    dtypes = {t.dtype for t in tensors}
    return dtypes.pop() if len(dtypes) == 1 else None


def _contiguity_conditions(tensor: TensorFact) -> frozenset[Condition]:
    return frozenset(c for c in tensor.assumes if c.kind in ("contiguous", "divides"))


__all__ = ["SymbolicOps", "module_arg"]
