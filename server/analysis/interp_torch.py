"""Torch calls and replay: factories, `torch.*` / `F.*` functions, operators on tensors and
tensor methods. This is where `view` is decided: `tensor_method` replays it on meta tensors
when sizes are known (`_replay_method`) and asks the stride algebra over symbolic sizes
otherwise (`symbolic_ops.SymbolicOps.method`).

A mixin of `interpreter.Interpreter`; methods take `self: Interpreter`.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import TYPE_CHECKING, Any

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import replay as rp
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis import symbolic_einops as sym_einops
from stridelens.server.analysis import torch_api as api
from stridelens.server.analysis.dtypes import NOT_MODELLED, op_dtype
from stridelens.server.analysis.facts import TensorFact, new_fact, with_fields
from stridelens.server.analysis.interp_support import (
    _ROW_MAJOR_RESULTS,
    _STRIDED_RESULTS,
    MAX_LITERAL_ELEMENTS,
    MAX_PROVENANCE,
    Scope,
    _dtype_of,
    _first_line,
    _format_args,
    _is_torch_constant,
    _literal_size,
    _maybe_anything,
    format_bytes,
    to_value,
)
from stridelens.server.analysis.values import (
    UNKNOWN,
    Const,
    GradContext,
    ListOf,
    ModuleValue,
    Number,
    Opaque,
    SeqValue,
    SizeValue,
    TorchRef,
    Value,
    seq_items,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interpreter import Interpreter


# Keyword arguments that torch's signatures type as Python scalars or flags (never a tensor
# operand, so never a dtype promotion): `dropout_p=self.dropout if self.training else 0.0`.
_SCALAR_KWARGS = frozenset(
    {
        "dim", "keepdim", "dropout_p", "is_causal", "scale", "eps", "p", "training", "inplace",
        "momentum", "negative_slope", "approximate", "alpha", "beta", "dims",
        "start_dim", "end_dim", "diagonal", "num_samples", "replacement", "k", "largest",
        "sorted", "descending", "stable", "correction", "unbiased", "enable_gqa", "threshold",
    }
)  # fmt: skip


def _operand_kwargs(kwargs: dict[str, Value]) -> list[Value]:
    """The keyword arguments that may be tensors (and so decide a promotion)."""
    return [v for k, v in kwargs.items() if k not in _SCALAR_KWARGS]


# Ops whose result may be a view of a tensor they allocated (`_base` set), measured on
# torch 2.13: einsum (a contraction 'bij,jk->bik' or a permutation 'bhqd->bqhd', not
# 'i,j->ij'), repeat_interleave with an int count, tensordot, bilinear, meshgrid, 1-d pools.
_MAYBE_VIEW_RESULTS = frozenset(
    {
        "einsum", "repeat_interleave", "tensordot", "bilinear", "meshgrid", "broadcast_tensors", "linear",
        "broadcast_to", "expand", "as_strided", "max_pool1d", "adaptive_avg_pool1d",
        "adaptive_max_pool1d", "scaled_dot_product_attention",
    }
)  # fmt: skip


class TorchCallsMixin:
    # The call being replayed, for replay events (declared here: mypy takes a mixin's first
    # assignment for the attribute's type).
    _current_node: ast.AST | None
    _current_scope: Scope | None

    def _unknown_result(self: Interpreter, tensor: TensorFact, name: str) -> Value:
        if name in api.SCALAR_METHODS:
            return UNKNOWN
        return TensorFact(device=tensor.device)

    # torch.xxx(...) ------------------------------------------------------------
    def call_torch(
        self: Interpreter, path: str, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        if path.startswith("math."):
            return self.math_call(path[5:], args)
        if path.startswith("einops."):
            return self._einops(path, args, kwargs, exact, node, scope)
        if path in api.GRAD_CONTEXTS:
            mode = api.GRAD_CONTEXTS[path]
            if mode is None:
                flag = args[0] if args else kwargs.get("mode")
                if isinstance(flag, Const) and isinstance(flag.value, bool):
                    return GradContext(flag.value, path)
                return UNKNOWN
            if path == "torch.inference_mode":
                flag = args[0] if args else kwargs.get("mode", Const(True))
                if isinstance(flag, Const) and flag.value is False:
                    return GradContext(True, path)
            return GradContext(mode, path)
        if path == "torch.device" and args and isinstance(args[0], Const):
            return Const(str(args[0].value))
        if path == "torch.Size" and args and isinstance(args[0], Const):
            return Const(tuple(args[0].value)) if isinstance(args[0].value, (tuple, list)) else UNKNOWN
        prefix, _, leaf = path.rpartition(".")
        if prefix in ("torch.nn", "torch.nn.modules") and (leaf in api.NN_MODULES or leaf in api.NN_CONTAINERS):
            return self.make_module(path, leaf, args, kwargs, exact, node)
        if prefix in ("torch.nn", "torch.nn.modules") and leaf[:1].isupper() and leaf not in ("Module", "Parameter", "Buffer"):
            # Another nn layer: never built or replayed here, but its output is a tensor whose
            # dtype its parameters decide (`call_module`).
            return self.make_module(path, leaf, args, kwargs, False, node)
        if prefix == "torch.nn" and leaf == "Parameter":
            grad = _parameter_requires_grad(args, kwargs)
            if args and isinstance(args[0], TensorFact):
                tensor = args[0]
                meta = tensor.meta
                if meta is not None and grad is not None:
                    try:
                        param = self._torch().nn.Parameter(meta, requires_grad=grad)
                        return with_fields(rp.fact_from_meta(param, tensor.device), storage_key=tensor.storage_key, view_of=tensor.view_of)
                    except Exception:  # noqa: BLE001
                        pass
                # A Parameter is the same storage and layout, as a leaf that requires grad
                # unless `requires_grad=` says otherwise (a value unknown here: not stated).
                return with_fields(tensor, requires_grad=grad, carries_graph=False, is_view=False, meta=None)
            return TensorFact(requires_grad=grad, carries_graph=False)
        if not exact:
            return self._opaque_result(args, kwargs, scope)
        if prefix == "torch" and leaf == "multinomial" and args and isinstance(args[0], TensorFact) and args[0].meta is None and args[0].sym is not None:
            # `torch.multinomial(probs, num_samples=1)` of symbolic sizes: (*probs.shape[:-1],
            # num_samples) int64 indices, a new tensor that never needs grad.
            count = self.symops.size_of(args[1] if len(args) > 1 else kwargs.get("num_samples"))
            if count is not None:
                shape = (*args[0].sym.shape[:-1], count)
                out = self.symops.fresh(shape, args[0], [args[0]], scope, dtype="int64")
                return with_fields(out, requires_grad=False, carries_graph=False, is_view=False)
        if prefix == "torch" and leaf in _INDICES_WHATEVER and args and not any(isinstance(a, TensorFact) and (a.meta is not None or a.sym is not None) for a in args):
            # `torch.multinomial(probs, 1)`, `torch.topk(logits, k)` of a value whose sizes the
            # analysis does not have: the indices are a new int64 tensor that never needs grad.
            indices = TensorFact(dtype="int64", requires_grad=False, carries_graph=False, is_view=False, storage_key=self.fresh_storage())
            if leaf in api.RETURNS_VALUES_INDICES:
                source = args[0] if isinstance(args[0], TensorFact) else TensorFact()
                grad = (source.requires_grad if scope.grad_enabled else False) if source.requires_grad is not None or not scope.grad_enabled else None
                values = TensorFact(dtype=source.dtype, is_view=False, requires_grad=grad, carries_graph=grad, storage_key=self.fresh_storage())
                return SeqValue((values, indices), api.VALUES_INDICES)
            return indices
        if prefix == "torch" and leaf in api.FACTORIES:
            return self.factory(leaf, args, kwargs, node, scope)
        if prefix == "torch" and leaf in api.TORCH_FUNCTIONS:
            if leaf in api.VIEW_METHODS | api.MAYBE_COPY | {"clone"} and args and isinstance(args[0], TensorFact):
                # torch.transpose(x, ...) is x.transpose(...): one code path for both.
                return self.tensor_method(args[0], leaf, args[1:], kwargs, node, scope)
            return self.torch_function(path, leaf, args, kwargs, node, scope, functional=False)
        if prefix in ("torch.nn.functional", "torch.functional") and leaf in api.FUNCTIONAL:
            return self.torch_function(path, leaf, args, kwargs, node, scope, functional=True)
        return self._opaque_result(args, kwargs, scope) if prefix.startswith("torch") and leaf[:1].islower() and any(isinstance(a, TensorFact) for a in args) else UNKNOWN

    def _einops(self: Interpreter, path: str, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope) -> Value:
        """`rearrange(x, ...)` & co. (`symbolic_einops`); a layer stands for its pattern."""
        leaf = path.rpartition(".")[2]
        if not exact:
            return UNKNOWN
        if path in (f"einops.{leaf}", f"einops.einops.{leaf}") and leaf in sym_einops.FUNCTIONS:
            return sym_einops.einops_call(self, leaf, args, kwargs, node, scope)
        if path in ("einops.einsum", "einops.einops.einsum") and len(args) >= 2 and isinstance(args[-1], Const) and isinstance(args[-1].value, str):
            # `einsum(x, C, 'b d_in n, b n -> b d_in')`: torch.einsum's, the pattern last in words.
            equation = sym_einops.letters_equation(args[-1].value)
            if equation is None:
                return UNKNOWN
            self._current_node, self._current_scope = node, scope
            result = self.symops.function("einsum", [Const(equation), *args[:-1]], {}, scope, False)
            return result if result is not None else UNKNOWN
        if path.startswith("einops.layers.torch.") and leaf in sym_einops.LAYERS:
            return ModuleValue(path, tuple(args), dict(kwargs), line=node.lineno, built=False)
        return UNKNOWN

    def _opaque_result(self: Interpreter, args: list[Value], kwargs: dict[str, Value], scope: Scope) -> Value:
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorFact)]
        if not tensors:
            return UNKNOWN
        return TensorFact(
            storage_key=self.fresh_storage(),
            device=tensors[0].device,
            carries_graph=True if scope.grad_enabled and any(t.carries_graph for t in tensors) else None,
        )

    def factory(self: Interpreter, name: str, args: list[Value], kwargs: dict[str, Value], node: ast.Call, scope: Scope) -> Value:
        device_value = kwargs.get("device")
        device: str | None = "cpu"
        if device_value is not None:
            device = str(device_value.value).split(":")[0] if isinstance(device_value, Const) and device_value.value is not None else None
        if name.endswith("_like") and device_value is None:
            device = args[0].device if args and isinstance(args[0], TensorFact) else None  # the input's
        requires_grad = kwargs.get("requires_grad")
        # A new tensor from a factory is contiguous whatever its sizes (`*_like` keeps its
        # input's layout, `empty_strided` takes any, `as_tensor` may return its input).
        fresh_layout = not (
            name == "empty_strided"
            or name.endswith("_like")
            or (name == "as_tensor" and args and not isinstance(args[0], (Const, SeqValue)))
        )
        symbolic = TensorFact(
            storage_key=self.fresh_storage(),
            device=device,
            is_view=False,
            contiguous=True if fresh_layout else None,
            requires_grad=to_value(requires_grad) if isinstance(requires_grad, Const) else (False if requires_grad is None else None),
            carries_graph=False,
        )
        asked = kwargs.get("dtype")
        if asked is not None:
            symbolic = with_fields(symbolic, dtype=_dtype_of(asked))
        elif name.endswith("_like") and args and isinstance(args[0], TensorFact):
            symbolic = with_fields(symbolic, dtype=args[0].dtype)
        elif name in ("randint", "randperm"):
            symbolic = with_fields(symbolic, dtype="int64")
        elif self.default_dtypes and name in ("zeros", "ones", "empty", "randn", "rand"):
            symbolic = with_fields(symbolic, dtype="float32")  # torch's default dtype: never changed here
        elif name == "full" and _fill_dtype(node, self.default_dtypes) is not None:
            symbolic = with_fields(symbolic, dtype=_fill_dtype(node, self.default_dtypes))
        elif self.default_dtypes and name == "arange" and args:
            symbolic = with_fields(symbolic, dtype=_default_factory_dtype(name, args) if all(isinstance(a, Const) for a in args) else None)
        if name in ("tensor", "as_tensor") and args:
            data = args[0]
            if not isinstance(data, Const) or _literal_size(data.value) > MAX_LITERAL_ELEMENTS:
                return symbolic
        sym_shape = self.symops.factory(name, args, kwargs)
        if sym_shape is not None:
            dtype = kwargs.get("dtype")
            dtype_name = _dtype_of(dtype) if dtype is not None else ("int64" if name == "arange" else ("float32" if name != "full" else symbolic.dtype))
            return with_fields(symbolic, sym=lay.contiguous(sym_shape), dtype=dtype_name, assumes=self.symops.conditions_of([*args, *kwargs.values()]))
        if not self.replay:
            if all(self._sized(v) for v in [*args, *kwargs.values()]):
                self.sized_storages.add(symbolic.storage_key)  # type: ignore[arg-type]
            literal = self.symops.factory(name, args, kwargs, literal=True) if fresh_layout else None
            if literal is not None:
                # Without torch, the stride algebra gives the same layouts replay would.
                layout = lay.contiguous(literal)
                self.literal_storage_numels[symbolic.storage_key] = math.prod(literal)  # type: ignore[index, arg-type]
                dtype = kwargs.get("dtype")
                return with_fields(
                    symbolic,
                    sym=layout,
                    shape=literal,
                    strides=layout.strides,
                    storage_offset=0,
                    dtype=_dtype_of(dtype) if dtype is not None else _default_factory_dtype(name, args),
                )
            return symbolic
        try:
            torch = self._torch()
            call_kwargs = {k: rp.to_torch(v) for k, v in kwargs.items()}
            call_args = [rp.to_torch(a) for a in args]
            call_kwargs["device"] = "meta"
            with torch.set_grad_enabled(scope.grad_enabled):
                meta = getattr(torch, name)(*call_args, **call_kwargs)
        except rp.CannotReplay:
            return symbolic
        except Exception as err:  # noqa: BLE001 - torch says these args are invalid
            self._event("replay-error", node, f"torch.{name}: {_first_line(err)}")
            return symbolic
        if not rp.is_meta_tensor(meta):
            return UNKNOWN
        return rp.fact_from_meta(meta, device)

    def _sized(self: Interpreter, value: Value) -> bool:
        """Would replay know this argument? (Only asked in the symbolic pass.)"""
        if isinstance(value, Const):
            return True
        if isinstance(value, TorchRef):
            return _is_torch_constant(value.path)
        if isinstance(value, TensorFact):
            return value.storage_key in self.sized_storages
        if isinstance(value, SeqValue):
            return all(self._sized(v) for v in value.items)
        return False

    def torch_function(
        self: Interpreter, path: str, leaf: str, args: list[Value], kwargs: dict[str, Value], node: ast.Call, scope: Scope, *, functional: bool
    ) -> Value:
        first = args[0] if args else kwargs.get("input")
        if isinstance(first, TensorFact):
            through = _returns_its_input(leaf, args, kwargs, functional)
            if through is True:  # `F.relu(x, inplace=True)`, `torch.relu_(x)`: x itself
                return first
            if through is None:  # `F.dropout(x, p, self.training)`: x itself in eval mode
                return self._maybe_its_input(first, scope)
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorFact)]
        seqs = [a for a in args if isinstance(a, (SeqValue, ListOf))]
        unknown = any(self._may_be_a_tensor(a) for a in [*args, *kwargs.values()])
        for seq in seqs:
            items = seq.items if isinstance(seq, SeqValue) else (seq.item,)
            tensors.extend(i for i in items if isinstance(i, TensorFact))
            unknown = unknown or any(self._may_be_a_tensor(i) for i in items)
        if not tensors and not (leaf == "einsum" and not functional):
            return UNKNOWN  # (einsum makes tensors of the parameters it is given)
        try:
            torch = self._torch()
            fn = getattr(torch.nn.functional if functional else torch, leaf)
            call_args = [rp.to_torch(a) for a in args]
            call_kwargs = {k: rp.to_torch(v) for k, v in kwargs.items()}
            with torch.set_grad_enabled(scope.grad_enabled):
                if leaf in api.CONV_FUNCTIONS and any(
                    isinstance(a, torch.Tensor) and not a.is_contiguous() for a in call_args
                ):
                    out = rp.conv_with_device_layout(fn, call_args, call_kwargs)
                else:
                    out = rp.cached_call(path, call_args, call_kwargs, lambda: fn(*call_args, **call_kwargs))
        except rp.CannotReplay:
            self._current_node, self._current_scope = node, scope
            symbolic = self.symops.function(leaf, args, kwargs, scope, functional)
            result = symbolic if symbolic is not None else self._symbolic_new(tensors, scope, leaf, unknown)
            return self._with_op_dtype(result, leaf, [*args, *_operand_kwargs(kwargs)])
        except Exception as err:  # noqa: BLE001
            self._event("replay-error", node, f"{path}: {_first_line(err)}")
            return self._with_op_dtype(self._symbolic_new(tensors, scope, leaf, unknown), leaf, [*args, *_operand_kwargs(kwargs)])
        return self._from_output(out, tensors[0], node, f"{leaf}()")

    def _maybe_its_input(self: Interpreter, tensor: TensorFact, scope: Scope) -> TensorFact:
        """The result of an op that returns `tensor` itself or a new tensor of its shape and
        dtype (a dropout whose mode is unknown): neither storage identity nor view-ness is
        known, and under no_grad it requires grad as `tensor` may."""
        dense = tensor.contiguous is True
        if scope.grad_enabled:
            grad = tensor.requires_grad  # a new tensor needs grad exactly when its input does
        else:
            grad = False if tensor.requires_grad is False else None
        graph = False if tensor.requires_grad is False and tensor.carries_graph is False else None
        if tensor.sym is not None:
            layout = tensor.sym
            # A new tensor is laid out afresh (offset 0): only a dense input's layout is both's.
            same = lay.Layout(
                layout.shape,
                layout.strides if dense else None,
                0 if dense and layout.offset == 0 else None,
            )
            out = self.symops.tensor(same, tensor, view_of_input=None, assumes=tensor.assumes, scope=scope, grad=grad)
            return with_fields(out, carries_graph=graph)
        return new_fact(
            shape=tensor.shape,
            dtype=tensor.dtype,
            device=tensor.device,
            strides=tensor.strides if dense else None,
            storage_offset=0 if dense and tensor.storage_offset == 0 else None,
            contiguous=True if dense else None,
            assumes=tensor.assumes if dense else frozenset(),
            requires_grad=grad,
            carries_graph=graph,
        )

    def _maybe_tensors(self: Interpreter, operands: list[Value]) -> bool:
        """Is an operand a value the analysis cannot follow (maybe a tensor: `einops.einsum`'s)?"""
        return any(not isinstance(o, TensorFact) and not (isinstance(o, Const) and isinstance(o.value, (int, float, bool))) and not self.symops.is_number(o) for o in operands)

    def _with_op_dtype(self: Interpreter, result: Value, op: str, operands: list[Value]) -> Value:
        """`result` of the symbolic `op` on `operands`, with the dtype torch's promotion gives
        (`dtypes.op_dtype`); left as it is for ops without a rule. Not for replayed results,
        whose dtype is torch's own."""
        if not isinstance(result, TensorFact) or result.meta is not None:
            return result
        tensor_dtypes: list[str | None] = []
        scalars: list[type] = []
        exact = True
        for operand in operands:
            items = seq_items(operand)
            for item in (operand,) if items is None else items:
                if isinstance(item, TensorFact):
                    tensor_dtypes.append(item.dtype)
                elif isinstance(item, Const) and isinstance(item.value, (bool, int, float)):
                    scalars.append(type(item.value))
                elif isinstance(item, Opaque) and (scalar := self.symops.scalar_type(item)) is not None:
                    scalars.append(scalar)
                elif isinstance(item, (SizeValue, Number)) and self.symops.is_number(item):
                    scalars.append(int)
                elif isinstance(item, TorchRef) and item.path.removeprefix("torch.") in api.DTYPES:
                    return result  # `dtype=` asked for: the op's own rule decided
                elif not (isinstance(item, Const) and (item.value is None or isinstance(item.value, (str, tuple)))) and not isinstance(item, TorchRef):
                    exact = False  # maybe a tensor (of another dtype), or a float
        dtype = op_dtype(op, tensor_dtypes, tuple(scalars), exact_operands=exact)
        if dtype == NOT_MODELLED or dtype == result.dtype:
            return result
        return with_fields(result, dtype=dtype)

    def _symbolic_new(self: Interpreter, inputs: list[TensorFact], scope: Scope, what: str, unknown_operands: bool = False) -> TensorFact:
        """A fresh tensor computed from `inputs` whose sizes are unknown. Computed only from
        contiguous tensors it is contiguous too (TensorIterator, reductions, matmul and the
        nn kernels keep the inputs' dense layout), except for the ops that return views.
        `unknown_operands`: another operand may be a tensor (of any layout, maybe requiring
        grad): neither is stated then."""
        graph: bool | None = None
        if not scope.grad_enabled:
            graph = False
        elif any(t.carries_graph or t.requires_grad for t in inputs):
            graph = True
        elif inputs and all(t.requires_grad is False for t in inputs) and not unknown_operands:
            graph = False
        key = self.fresh_storage()
        if not self.replay and inputs and all(t.storage_key in self.sized_storages for t in inputs):
            self.sized_storages.add(key)
        # matmul & co. lay their result out afresh whatever their inputs' strides (checked
        # against torch for transposed, broadcast and 1-d operands).
        dense = bool(inputs) and what not in _STRIDED_RESULTS and (
            what in _ROW_MAJOR_RESULTS or (all(t.contiguous is True for t in inputs) and not unknown_operands)
        )
        return TensorFact(
            device=inputs[0].device if inputs else None,
            storage_key=key,
            # torch.einsum, repeat_interleave & co. may hand back a view of a new tensor
            # (`_base` set): whether they do depends on the equation, the sizes or grad mode.
            is_view=None if what in _MAYBE_VIEW_RESULTS else False,
            contiguous=True if dense else None,
            # Dense because its inputs are: under their layout conditions (`x.is_contiguous()`).
            assumes=frozenset().union(*(t.assumes for t in inputs)) if dense and what not in _ROW_MAJOR_RESULTS else frozenset(),
            carries_graph=graph,
            requires_grad=graph,
        )

    def _from_output(self: Interpreter, out: Any, like: TensorFact, node: ast.AST, what: str) -> Value:
        if rp.is_meta_tensor(out):
            return rp.fact_from_meta(out, like.device)
        if isinstance(out, (tuple, list)) and out and all(rp.is_meta_tensor(o) for o in out):
            kind = api.VALUES_INDICES if hasattr(out, "indices") and hasattr(out, "values") else "tuple"
            return SeqValue(tuple(rp.fact_from_meta(o, like.device) for o in out), kind)
        if isinstance(out, (int, float, bool)):
            return Const(out)
        if hasattr(out, "values") and hasattr(out, "indices") and rp.is_meta_tensor(out.values):
            return SeqValue((rp.fact_from_meta(out.values, like.device), rp.fact_from_meta(out.indices, like.device)))
        return UNKNOWN

    def tensor_op(self: Interpreter, fn: Any, operands: list[Value], node: ast.AST, scope: Scope, what: str) -> Value:
        """`fn` (a function of the `operator` module) applied to the operands."""
        tensors = [o for o in operands if isinstance(o, TensorFact)]
        try:
            torch = self._torch()
            concrete = [rp.to_torch(self._scalar_stand_in(o)) for o in operands]
            with torch.set_grad_enabled(scope.grad_enabled):
                # Keyed by the operator itself (operator.add, operator.matmul, ...).
                out = rp.cached_call(("op", fn), concrete, {}, lambda: fn(*concrete))
        except rp.CannotReplay:
            symbolic = self._symbolic_elementwise(fn, operands, tensors, scope)
            result = symbolic if symbolic is not None else self._symbolic_new(tensors, scope, what, self._maybe_tensors(operands))
            return self._with_op_dtype(result, fn.__name__, operands)
        except Exception as err:  # noqa: BLE001
            self._event("replay-error", node, f"{what}: {_first_line(err)}")
            return self._with_op_dtype(self._symbolic_new(tensors, scope, what, self._maybe_tensors(operands)), fn.__name__, operands)
        result = self._from_output(out, tensors[0], node, what)
        if isinstance(result, TensorFact) and result.is_view and tensors:
            result = with_fields(result, view_of=tensors[0].view_of)
        return result

    def _scalar_stand_in(self: Interpreter, value: Value) -> Value:
        """A scalar parameter (`eps: float`) as a literal of its type for a replay: an
        elementwise op's result layout and dtype depend on the scalar's type, not its value."""
        if isinstance(value, Opaque):
            scalar = self.symops.scalar_type(value)
            if scalar is not None:
                return Const({int: 2, float: 0.5, bool: True}[scalar])
        return value

    def _symbolic_elementwise(self: Interpreter, fn: Any, operands: list[Value], tensors: list[TensorFact], scope: Scope) -> Value | None:
        """`a + b`, `x * 2`, `q @ k` with symbolic sizes."""
        if not any(t.sym is not None for t in tensors):
            return None
        for operand in operands:
            if isinstance(operand, TensorFact):
                continue
            if isinstance(operand, Const) and isinstance(operand.value, (int, float, bool)):
                continue
            if isinstance(operand, (SizeValue, Number, Opaque)) and self.symops.is_number(operand):
                continue
            return None  # an operand that may be a tensor of some other shape
        if fn is operator.matmul and len(tensors) == 2:
            return self.symops.matmul(tensors[0], tensors[1], scope)
        if fn is operator.getitem:
            return None
        dtype: Any = True
        if fn in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
            dtype = "bool"
        return self.symops.elementwise(tensors, scope, dtype=dtype)

    # x.method(...) -------------------------------------------------------------
    def tensor_method(
        self: Interpreter,
        tensor: TensorFact,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        node: ast.AST,
        scope: Scope,
        *,
        as_property: bool = False,
    ) -> Value:
        line = getattr(node, "lineno", 0)
        if tensor.shape is None and tensor.sym is not None and name in ("size", "dim"):
            if name == "dim":
                return Const(tensor.sym.ndim)
            return self.dim_size(tensor, args[0]) if args else self.shape_value(tensor)
        if tensor.shape is None and tensor.sym is None and name == "size" and len(args) == 1:
            return self.dim_of_unknown_rank(tensor, args[0], node)
        if name in ("size", "dim", "numel", "stride", "storage_offset", "is_contiguous", "element_size"):
            return self._tensor_query(tensor, name, args)
        if name in api.SCALAR_METHODS:
            return UNKNOWN
        if name in ("cuda", "cpu") or name == "to":
            return self._to_device(tensor, name, args, kwargs, node, scope)
        if name not in api.TENSOR_METHODS and not as_property:
            return UNKNOWN
        text = self._describe_call(name, node, as_property)
        result: Value
        if tensor.meta is not None and self.replay:
            result = self._replay_method(tensor, name, args, kwargs, node, scope, as_property, text)
        else:
            self._current_node, self._current_scope = node, scope
            symbolic = self.symops.method(tensor, name, args, kwargs, scope) if tensor.sym is not None else None
            result = symbolic if symbolic is not None else self._symbolic_method(tensor, name, args, kwargs, scope, line, text)
            result = self._with_op_dtype(result, name, [tensor, *args, *_operand_kwargs(kwargs)])
        if isinstance(result, TensorFact):
            result = self._annotate(tensor, result, name, text, line)
        elif isinstance(result, SeqValue):
            result = SeqValue(
                tuple(self._annotate(tensor, r, name, text, line) if isinstance(r, TensorFact) else r for r in result.items),
                result.kind,
            )
        return result

    def _describe_call(self: Interpreter, name: str, node: ast.AST, as_property: bool) -> str:
        if as_property or not isinstance(node, ast.Call):
            return name
        text = self._call_texts.get(node)
        if text is None:  # a function body runs once per call site: format its calls once
            text = self._call_texts[node] = f"{name}({_format_args(node)})"
        return text

    def _tensor_query(self: Interpreter, tensor: TensorFact, name: str, args: list[Value]) -> Value:
        if tensor.shape is None:
            return UNKNOWN
        if name == "size":
            if not args:
                return Const(tuple(tensor.shape))
            dim = args[0]
            if isinstance(dim, Const) and isinstance(dim.value, int) and -len(tensor.shape) <= dim.value < len(tensor.shape):
                return Const(tensor.shape[dim.value])
            return UNKNOWN
        if name == "dim":
            return Const(len(tensor.shape))
        if name == "numel":
            return Const(tensor.numel)
        if name == "stride" and tensor.strides is not None:
            return Const(tuple(tensor.strides)) if not args else UNKNOWN
        if name == "storage_offset" and tensor.storage_offset is not None:
            return Const(tensor.storage_offset)
        if name == "is_contiguous" and tensor.contiguous is not None and not args:
            return Const(tensor.contiguous)
        return UNKNOWN

    def _to_device(
        self: Interpreter, tensor: TensorFact, name: str, args: list[Value], kwargs: dict[str, Value], node: ast.AST, scope: Scope
    ) -> Value:
        device = tensor.device
        dtype_args: list[Value] = []
        changed_device = False
        if name == "cuda":
            device, changed_device = "cuda", tensor.device != "cuda"
        elif name == "cpu":
            device, changed_device = "cpu", tensor.device != "cpu"
        else:
            for value in [*args, *([kwargs["device"]] if "device" in kwargs else [])]:
                if isinstance(value, Const) and isinstance(value.value, str):
                    new = value.value.split(":")[0]
                    changed_device = changed_device or new != tensor.device
                    device = new
                elif isinstance(value, TensorFact):
                    dtype_args.append(TorchRef(f"torch.{value.dtype}") if value.dtype else UNKNOWN)
                    changed_device = changed_device or value.device != tensor.device
                    device = value.device
                elif isinstance(value, Const) and value.value is None:
                    continue
                else:
                    dtype_args.append(value)
            if "dtype" in kwargs:
                dtype_args.append(kwargs["dtype"])
            if device is None:
                changed_device = True
        line = getattr(node, "lineno", 0)
        if tensor.meta is not None and self.replay:
            try:
                torch = self._torch()
                concrete = [rp.to_torch(a) for a in dtype_args]
                extra = {k: rp.to_torch(v) for k, v in kwargs.items() if k in ("memory_format", "copy")}
                with torch.set_grad_enabled(scope.grad_enabled):
                    out = tensor.meta.to(*concrete, **extra) if concrete or extra else tensor.meta
                    if changed_device:
                        out = out.clone() if out is tensor.meta else out
            except rp.CannotReplay:
                return self._symbolic_copy(tensor, device, scope)
            except Exception as err:  # noqa: BLE001
                self._event("replay-error", node, f".{name}(): {_first_line(err)}")
                return self._symbolic_copy(tensor, device, scope)
            if out is tensor.meta:
                return tensor  # same tensor: `.to()` returns self when nothing changes
            fact = rp.fact_from_meta(out, device)
            return fact.with_note("copy", f".{name}(...) to {device}" if changed_device else f".{name}(...)", line)
        if not dtype_args and not changed_device:
            return tensor
        return self._symbolic_to(tensor, device, dtype_args, scope)

    def _symbolic_to(self: Interpreter, tensor: TensorFact, device: str | None, dtype_args: list[Value], scope: Scope) -> TensorFact:
        """`.to(...)` without replay: the same shape, the dtype asked for; a copy for certain only
        where the dtype or device known differs (else it may be the tensor itself)."""
        dtypes = {_dtype_of(a) for a in dtype_args}
        dtype = dtypes.pop() if len(dtypes) == 1 else (tensor.dtype if not dtype_args else None)
        if dtype is None or tensor.sym is None:
            return self._symbolic_copy(tensor, device, scope, dtype)
        moved = device is not None and tensor.device is not None and device != tensor.device
        copies = moved or (tensor.dtype is not None and tensor.dtype != dtype)
        if not copies and tensor.dtype == dtype and device == tensor.device:
            return tensor
        grad: bool | None
        if not dtype.startswith(("float", "bfloat", "complex")):
            grad = False  # an integer or bool tensor never requires grad
        elif copies:
            grad = tensor.requires_grad if scope.grad_enabled else False
        else:
            grad = tensor.requires_grad if scope.grad_enabled or tensor.requires_grad is False else None
        dense = tensor.contiguous is True
        return TensorFact(
            device=device,
            dtype=dtype,
            # torch.preserve_format: a dense input's strides (a contiguous one stays contiguous).
            sym=lay.contiguous(tensor.sym.shape) if dense and copies else lay.Layout(tensor.sym.shape, None, None),
            contiguous=True if dense else None,
            assumes=tensor.assumes if dense else frozenset(),
            is_view=False if copies or tensor.is_view is False else None,
            storage_key=self.fresh_storage() if copies else None,
            requires_grad=grad,
            carries_graph=grad if copies else None,
        )

    def _symbolic_copy(self: Interpreter, tensor: TensorFact, device: str | None, scope: Scope, dtype: str | None = None) -> TensorFact:
        """`.to(...)` of a tensor of unknown sizes: the tensor itself or a copy of it. Either way
        it requires grad as the input does where that is known (a copy under no_grad does not)."""
        grad: bool | None = None
        if tensor.requires_grad is False or (dtype is not None and not dtype.startswith(("float", "bfloat", "complex"))):
            grad = False
        elif tensor.requires_grad is True and scope.grad_enabled:
            grad = True
        return TensorFact(
            device=device,
            dtype=dtype,
            storage_key=None,
            requires_grad=grad,
            carries_graph=False if grad is False else (((tensor.carries_graph or tensor.requires_grad) and scope.grad_enabled) or None),
        )

    def _replay_method(
        self: Interpreter,
        tensor: TensorFact,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        node: ast.AST,
        scope: Scope,
        as_property: bool,
        text: str,
    ) -> Value:
        try:
            torch = self._torch()
            meta = tensor.meta
            concrete = [rp.to_torch(a) for a in args]
            concrete_kw = {k: rp.to_torch(v) for k, v in kwargs.items()}
            with torch.set_grad_enabled(scope.grad_enabled):
                if as_property:
                    out = getattr(meta, name)
                elif name in api.VIEW_METHODS or name.endswith("_"):
                    out = getattr(meta, name)(*concrete, **concrete_kw)
                else:
                    out = rp.cached_call(
                        ("method", name), [meta, *concrete], concrete_kw,
                        lambda: getattr(meta, name)(*concrete, **concrete_kw),
                    )
        except rp.CannotReplay:
            return self._symbolic_method(tensor, name, args, kwargs, scope, getattr(node, "lineno", 0), text)
        except Exception as err:  # noqa: BLE001
            message = _first_line(err)
            if name == "view" and ("view size is not compatible" in message or "Cannot view" in message):
                self._event("view-incompatible", node, message)
                return TensorFact(dtype=tensor.dtype, device=tensor.device).with_note(
                    "raises at run time", f"{text}: {message}", getattr(node, "lineno", 0)
                )
            self._event("replay-error", node, f".{name}(): {message}")
            return self._symbolic_method(tensor, name, args, kwargs, scope, getattr(node, "lineno", 0), text)
        if name.endswith("_") and out is meta:
            # In place: same tensor, its facts may have changed (requires_grad_, t_()...).
            fact = rp.fact_from_meta(meta, tensor.device)
            return with_fields(fact, view_of=tensor.view_of, provenance=tensor.provenance)
        result = self._from_output(out, tensor, node, text)
        if name in ("reshape", "reshape_as", "flatten", "ravel") and isinstance(result, TensorFact):
            if result.meta is not None and result.meta._base is None and result.storage_key != tensor.storage_key:
                if (result.numel or 0) > 0 and out is not meta:
                    self._event(
                        "reshape-copies",
                        node,
                        f"`{name}` copies {format_bytes(result.nbytes)} here: its input is not contiguous",
                        nbytes=result.nbytes,
                    )
        return result

    def _symbolic_method(
        self: Interpreter,
        tensor: TensorFact,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        scope: Scope,
        line: int,
        text: str,
    ) -> Value:
        """Facts that hold whatever the sizes: views share storage, permutes reorder."""
        base = TensorFact(
            dtype=tensor.dtype,
            device=tensor.device,
            requires_grad=tensor.requires_grad if scope.grad_enabled else False,
            carries_graph=tensor.carries_graph if scope.grad_enabled else False,
        )
        if not scope.grad_enabled and (name in api.VIEW_METHODS or name in ("chunk", "split", "tensor_split", "unbind")):
            # Under no_grad a view of a tensor that requires grad still requires it (no grad_fn).
            base = with_fields(base, requires_grad=tensor.requires_grad)
        elif not scope.grad_enabled and (name in api.MAYBE_COPY or name == "contiguous") and tensor.requires_grad is not False:
            base = with_fields(base, requires_grad=None)  # the tensor itself, or a copy that does not
        if name in ("chunk", "split", "tensor_split", "unbind"):
            item = with_fields(base, is_view=True, storage_key=tensor.storage_key, view_of=tensor.view_of)
            count = args[0] if args else None
            if name == "chunk" and isinstance(count, Const) and isinstance(count.value, int) and 0 < count.value <= 64:
                return SeqValue((item,) * count.value)
            return ListOf(item)
        if name in ("detach", "detach_"):
            return with_fields(
                base,
                is_view=False,
                storage_key=tensor.storage_key,
                view_of=tensor.view_of,
                requires_grad=False,
                carries_graph=False,
                shape=tensor.shape,
                strides=tensor.strides,
                storage_offset=tensor.storage_offset,
                contiguous=tensor.contiguous,
            )
        spelled = self._spelled_shape(name, args, kwargs) if name in ("view", "reshape") else None
        if name == "flatten" and tensor.sym is None and tensor.shape is None:
            spelled = self._flattened_rank(tensor, args, kwargs)
        if spelled is not None:
            # `x.view(B, T, nh, hs)`: the sizes fix the result's shape whatever x is.
            base = with_fields(base, sym=spelled, assumes=self.symops.conditions_of(args))
        if name == "view" and len(args) == 1 and isinstance(args[0], TorchRef):
            # `x.view(torch.int16)`: the same storage read as another dtype; torch sets no
            # `_base` and the result never requires grad (measured, FACTS.md).
            dtype = api.DTYPES.get(args[0].path.removeprefix("torch."))
            return with_fields(
                base, dtype=dtype, is_view=False, storage_key=tensor.storage_key, view_of=tensor.view_of,
                requires_grad=False, carries_graph=False,
            )
        if name == "real" and (tensor.dtype is None or not tensor.dtype.startswith("complex")):
            # `x.real` of a real tensor is x itself (no `_base`); of a complex one, a view.
            return tensor if tensor.dtype is not None else with_fields(base, storage_key=tensor.storage_key)
        if name in api.VIEW_METHODS:
            return with_fields(base, is_view=True, storage_key=tensor.storage_key, view_of=tensor.view_of, permuted_by=tensor.permuted_by)
        if name == "contiguous":
            return with_fields(base, contiguous=True, permuted_by=None)
        if name in api.MAYBE_COPY:
            return with_fields(base, permuted_by=None)
        if name == "clone":
            return with_fields(base, is_view=False, storage_key=self.fresh_storage(), contiguous=tensor.contiguous, permuted_by=tensor.permuted_by)
        if name in api.CAST_METHODS:
            return with_fields(base, dtype=api.CAST_METHODS[name])
        if name == "type" and len(args) == 1 and isinstance(args[0], TorchRef):
            # `x.type(torch.float32)`: x itself where it has that dtype already, else a copy.
            return with_fields(base, dtype=api.DTYPES.get(args[0].path.removeprefix("torch.")))
        if name == "type_as" and args and isinstance(args[0], TensorFact):
            # The tensor itself where the dtypes agree (no `_base` verdict either way).
            if tensor.dtype is not None and tensor.dtype == args[0].dtype:
                return tensor
            return with_fields(base, dtype=args[0].dtype)
        if name.endswith("_"):
            return tensor
        operands = [*args, *kwargs.values()]
        # `a.mul(w)` of a parameter `w`: an operand that may be a tensor may require grad (or
        # lay the result out by its own strides), so neither is stated.
        unknown = any(self._may_be_a_tensor(v) for v in operands)
        return self._symbolic_new([tensor, *[a for a in operands if isinstance(a, TensorFact)]], scope, name, unknown_operands=unknown)

    def _may_be_a_tensor(self: Interpreter, value: Value) -> bool:
        """`_maybe_anything`, less a parameter of a known scalar type (`eps: float`)."""
        return _maybe_anything(value) and not (isinstance(value, Opaque) and self.symops.scalar_type(value) is not None)

    def _flattened_rank(self: Interpreter, tensor: TensorFact, args: list[Value], kwargs: dict[str, Value]) -> Any:
        """`x.flatten(1)` of a tensor of unknown rank: `start_dim + 1` dims (a lower rank
        raises), the first ones x's, the last one unnamed."""
        start = args[0] if args else kwargs.get("start_dim", Const(0))
        end = args[1] if len(args) > 1 else kwargs.get("end_dim", Const(-1))
        if not (isinstance(start, Const) and type(start.value) is int and 0 <= start.value <= 8) or not (isinstance(end, Const) and end.value == -1):
            return None
        node = self._current_node
        leading = []
        for i in range(start.value):
            size = self.dim_of_unknown_rank(tensor, Const(i), node) if node is not None else UNKNOWN
            if not isinstance(size, SizeValue):
                return None
            leading.append(size.expr)
        return lay.Layout((*leading, sz.anonymous()), None, None)

    def _spelled_shape(self: Interpreter, name: str, args: list[Value], kwargs: dict[str, Value]) -> Any:
        """The shape `view`/`reshape` of a tensor of unknown shape spell out, as a layout without
        strides; a `-1` is a size with no name (the rank is still known). None if not spelled."""
        if kwargs or not args or isinstance(args[0], TorchRef):
            return None
        shape = self.symops.sizes_of(args)
        if shape is None or any(isinstance(s, int) and s < -1 for s in shape):
            return None
        holes = [i for i, s in enumerate(shape) if isinstance(s, int) and s == -1]
        if len(holes) > 1:
            return None
        if holes:
            hole = self.names.atom_for(("hole", id(self._current_node)), None)
            self._keep_alive.append(self._current_node)
            shape = tuple(hole if i == holes[0] else s for i, s in enumerate(shape))
        return lay.Layout(tuple(shape), None, None)

    def _annotate(self: Interpreter, source: TensorFact, result: TensorFact, name: str, text: str, line: int) -> TensorFact:
        """Carry the symbolic facts and the provenance that explains the result."""
        updates: dict[str, Any] = {}
        shares = result.storage_key is not None and result.storage_key == source.storage_key
        # Keep the source's story only where it still explains the result: a view of the
        # same storage, or a layout inherited from it.
        keeps_layout_story = result.contiguous is False and source.contiguous is False
        inherited = source.provenance[-MAX_PROVENANCE:] if keeps_layout_story else ()
        provenance = (*inherited, *result.provenance)
        if shares:
            updates["view_of"] = source.view_of
        if name in api.PERMUTING:
            updates["permuted_by"] = text
        elif name in ("contiguous", "clone") or (name in api.MAYBE_COPY and not shares):
            updates["permuted_by"] = None if (result.contiguous or name == "contiguous") else source.permuted_by
        elif shares and name in api.VIEW_METHODS:
            updates["permuted_by"] = source.permuted_by
        if source.detached_from and shares:
            updates["detached_from"] = source.detached_from
        fact = with_fields(result, provenance=provenance, **updates)
        if name in api.PERMUTING:
            # A symbolic verdict holds only while the moved dims are not of size 1 (its
            # `assumes`): the note says so too.
            hedged = result.meta is None and any(c.kind == "ne" for c in result.assumes)
            if result.contiguous is False and not hedged:
                fact = fact.with_note("non-contiguous", text, line)
            elif result.contiguous is None or hedged:
                fact = fact.with_note("non-contiguous unless the moved dims have size 1", text, line)
        elif name in ("detach", "detach_"):
            fact = fact.with_note("detached, shares storage", text, line)
        elif name in api.MAYBE_COPY and result.meta is not None:
            if not shares and source.contiguous is False:
                fact = fact.with_note(f"copy ({format_bytes(result.nbytes)})", f"{text} of a non-contiguous tensor", line)
            elif shares:
                fact = fact.with_note("view, no copy", text, line)
        elif shares and name in api.VIEW_METHODS and result.is_view is not False and result is not source:
            changed = result.contiguous is False and source.contiguous is not False
            if result.is_view is None:  # `x.real` of a dtype unknown here: x itself, or a view
                fact = fact.with_note("shares storage", text, line)
            else:
                fact = fact.with_note("non-contiguous view" if changed else "view (shares storage)", text, line)
        return fact


def _fill_dtype(node: ast.Call, default_dtypes: bool) -> str | None:
    """`torch.full(size, fill)` without `dtype=`: torch infers it from the fill as written.
    A bool is bool and an int int64 always; a float (`float("-inf")`, `-1e4`, `math.inf`)
    takes the default dtype, float32 where the file never changes it."""
    fill = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "fill_value"), None)
    if isinstance(fill, ast.UnaryOp) and isinstance(fill.op, (ast.USub, ast.UAdd)):
        fill = fill.operand
    if isinstance(fill, ast.Constant):
        if type(fill.value) is bool:
            return "bool"
        if type(fill.value) is int:
            return "int64"
        return "float32" if type(fill.value) is float and default_dtypes else None
    written_float = (
        isinstance(fill, ast.Call) and isinstance(fill.func, ast.Name) and fill.func.id == "float"
    ) or (isinstance(fill, ast.Attribute) and isinstance(fill.value, ast.Name) and fill.value.id == "math" and fill.attr in ("inf", "nan", "pi", "e"))
    return "float32" if written_float and default_dtypes else None


def _default_factory_dtype(name: str, args: list[Value]) -> str | None:
    """torch's dtype for a literal factory without `dtype=`: `full` follows its fill value,
    `arange` of ints is int64, the rest take the default float32."""
    if name == "full":
        return None
    if name == "arange":
        return "int64" if all(isinstance(a, Const) and type(a.value) is int for a in args) else "float32"
    return "float32"


# torch functions whose result (or its indices) is an int64 tensor whatever they are given.
_INDICES_WHATEVER = frozenset({"multinomial", "argmax", "argmin", "argsort", "topk", "sort"})


def _argument(args: list[Value], kwargs: dict[str, Value], position: int, name: str, default: Value) -> Value:
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def _is(value: Value, flag: bool) -> bool:
    return isinstance(value, Const) and value.value is flag


def _returns_its_input(leaf: str, args: list[Value], kwargs: dict[str, Value], functional: bool) -> bool | None:
    """Does `leaf` hand back its input itself (True), maybe (None), or a new tensor (False)?"""
    inplace: Value = Const(False)
    if functional:
        position = api.INPLACE_POSITION.get(leaf)
        if position is None:
            return False
        inplace = _argument(args, kwargs, position, "inplace", Const(False))
        if _is(inplace, True):
            return True
        if leaf not in api.DROPOUTS:
            return False if _is(inplace, False) else None
        p = _argument(args, kwargs, 1, "p", Const(0.5))
        training = _argument(args, kwargs, 2, "training", Const(True))
    elif leaf.endswith("_"):  # torch.relu_(x)
        return True
    elif leaf == "dropout":  # torch.dropout(input, p, train)
        p = _argument(args, kwargs, 1, "p", UNKNOWN)
        training = _argument(args, kwargs, 2, "train", UNKNOWN)
    else:
        return False
    rate = p.value if isinstance(p, Const) and type(p.value) in (int, float) else None
    if _is(training, False) or rate == 0:
        return True
    if _is(training, True) and rate is not None and rate > 0 and _is(inplace, False):
        return False
    return None


def _parameter_requires_grad(args: list[Value], kwargs: dict[str, Value]) -> bool | None:
    """`nn.Parameter(t, requires_grad)`: True by default, else the flag when it is known."""
    flag = args[1] if len(args) > 1 else kwargs.get("requires_grad")
    if flag is None:
        return True
    return flag.value if isinstance(flag, Const) and isinstance(flag.value, bool) else None
