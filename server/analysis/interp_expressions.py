"""Expressions: names, literals, slices, comprehensions, operators, attributes (`x.shape`,
`self.n_head`), indexing (basic indexing is always a view), and dispatching calls to
torch, tensor methods, modules or user code.

A mixin of `interpreter.Interpreter`; methods take `self: Interpreter`.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stridelens.server.analysis import replay as rp
from stridelens.server.analysis import torch_api as api
from stridelens.server.analysis.constfold import NOT_FOLDED, fold_binop, fold_unary
from stridelens.server.analysis.facts import TensorFact, with_fields
from stridelens.server.analysis.interp_modules import FLOAT32_KEEPING_NORMS
from stridelens.server.analysis.interp_sizes import SymSlice
from stridelens.server.analysis.interp_support import (
    _LIST_MUTATORS,
    Scope,
    _call_name,
    _is_number,
    _source_text,
)
from stridelens.server.analysis.values import (
    NUMBER,
    UNKNOWN,
    ClassInfo,
    Const,
    DictValue,
    FunctionValue,
    InstanceValue,
    ListOf,
    ModuleChoice,
    ModuleValue,
    Number,
    Opaque,
    SeqValue,
    SizeValue,
    TorchRef,
    Value,
    appended,
    forget_layout,
    grown_list,
    join_values,
    seq_items,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interpreter import Interpreter


class ExpressionsMixin:
    # ------------------------------------------------------------- expressions
    def eval(self: Interpreter, node: ast.expr, scope: Scope) -> Value:
        kind = type(node)
        if kind is ast.Constant:
            return Const(node.value)  # type: ignore[attr-defined]
        handler = self._expr_handlers.get(kind)
        if handler is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child, scope)
            return UNKNOWN
        value: Value = handler(self, node, scope)
        if value is UNKNOWN or type(value) is Const:
            return value
        if (self.inference_depth or (self.bodies_may_infer and scope.parent is not None)) and kind is not ast.Name:
            value = _no_view_verdict(value, scope.grad_enabled)
        self.record(node, value, scope)
        return value

    def expr_Constant(self: Interpreter, node: ast.Constant, scope: Scope) -> Value:
        return Const(node.value)

    def expr_Name(self: Interpreter, node: ast.Name, scope: Scope) -> Value:
        value = scope.lookup(node.id)
        if value is None:
            if node.id in ("True", "False", "None"):
                return Const({"True": True, "False": False, "None": None}[node.id])
            return UNKNOWN
        return value

    def expr_Tuple(self: Interpreter, node: ast.Tuple | ast.List, scope: Scope) -> Value:
        items: list[Value] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                spread = self.eval(elt.value, scope)
                if isinstance(spread, SeqValue):
                    items.extend(spread.items)  # `(q, *kv.chunk(2, dim=-1))`: its items
                    continue
                if isinstance(spread, Const) and isinstance(spread.value, (tuple, list)):
                    items.extend(Const(v) for v in spread.value)  # `(b, *x.shape)` of known sizes
                    continue
                return UNKNOWN
            items.append(self.eval(elt, scope))
        kind = "tuple" if isinstance(node, ast.Tuple) else "list"
        if all(isinstance(i, Const) for i in items):
            consts = tuple(i.value for i in items if isinstance(i, Const))
            return Const(consts if kind == "tuple" else list(consts))
        return SeqValue(tuple(items), kind)

    expr_List = expr_Tuple

    def expr_Slice(self: Interpreter, node: ast.Slice, scope: Scope) -> Value:
        parts: list[Any] = []
        symbolic: list[Value] = []
        for part in (node.lower, node.upper, node.step):
            if part is None:
                parts.append(None)
                symbolic.append(Const(None))
                continue
            value = self.eval(part, scope)
            symbolic.append(value)
            parts.append(value.value if isinstance(value, Const) else None)
        if all(isinstance(v, Const) for v in symbolic):
            return Const(slice(*parts))
        # Not a Value of the union: a symbolic slice only ever reaches the subscript that reads it.
        return SymSlice(*symbolic)  # type: ignore[return-value]

    def expr_IfExp(self: Interpreter, node: ast.IfExp, scope: Scope) -> Value:
        test = self.eval(node.test, scope)
        if isinstance(test, Const) and isinstance(test.value, (bool, int)):
            return self.eval(node.body if test.value else node.orelse, scope)
        body, orelse = self.eval(node.body, scope), self.eval(node.orelse, scope)
        if _callable_module(body) and _callable_module(orelse) and body is not orelse:
            return ModuleChoice((body, orelse))  # type: ignore[arg-type]
        return join_values(body, orelse, self.symops.canon_layout)

    def expr_NamedExpr(self: Interpreter, node: ast.NamedExpr, scope: Scope) -> Value:
        value = self.eval(node.value, scope)
        self.bind(node.target, value, scope)
        return value

    def expr_Lambda(self: Interpreter, node: ast.Lambda, scope: Scope) -> Value:
        return UNKNOWN

    def expr_ListComp(self: Interpreter, node: ast.ListComp, scope: Scope) -> Value:
        return self._comprehension(node, scope, [node.elt])

    expr_SetComp = expr_ListComp

    expr_GeneratorExp = expr_ListComp

    def expr_DictComp(self: Interpreter, node: ast.DictComp, scope: Scope) -> Value:
        self._comprehension(node, scope, [node.key, node.value])
        return UNKNOWN

    def expr_UnaryOp(self: Interpreter, node: ast.UnaryOp, scope: Scope) -> Value:
        operand = self.eval(node.operand, scope)
        if isinstance(operand, Const):
            folded = fold_unary(node.op, operand.value)
            return UNKNOWN if folded is NOT_FOLDED else Const(folded)
        if isinstance(operand, TensorFact) and not isinstance(node.op, ast.Not):
            fn: Any = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[
                type(node.op)
            ]
            return self.tensor_op(fn, [operand], node, scope, f"unary {type(node.op).__name__}")
        return UNKNOWN

    def expr_BinOp(self: Interpreter, node: ast.BinOp, scope: Scope) -> Value:
        left = self.eval(node.left, scope)
        right = self.eval(node.right, scope)
        return self.binop(node.op, left, right, node, scope)

    def binop(
        self: Interpreter, op: ast.operator, left: Value, right: Value, node: ast.AST, scope: Scope, inplace: bool = False
    ) -> Value:
        if isinstance(left, Const) and isinstance(right, Const):
            folded = fold_binop(op, left.value, right.value)
            return UNKNOWN if folded is NOT_FOLDED else Const(folded)
        if isinstance(op, ast.Add) and not inplace:
            joined = _concatenated(left, right)
            if joined is not None:
                return joined  # `x.shape[:-1] + (-1, 2)`
        if not isinstance(left, TensorFact) and not isinstance(right, TensorFact):
            sized = self.size_binop(op, left, right, node)
            if sized is not None:
                return sized
            if _is_number(left) and _is_number(right):
                atoms = frozenset().union(*(v.atoms for v in (left, right) if isinstance(v, Number)))
                return Number(atoms) if atoms else NUMBER
        if isinstance(left, TensorFact) or isinstance(right, TensorFact):
            fns: dict[type, Any] = {
                ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
                ast.Pow: operator.pow, ast.MatMult: operator.matmul, ast.BitAnd: operator.and_,
                ast.BitOr: operator.or_, ast.BitXor: operator.xor,
            }  # fmt: skip
            fn = fns.get(type(op))
            if fn is None:
                return TensorFact()
            if inplace and isinstance(left, TensorFact):
                # `x += y` writes into x's storage: same tensor, new facts only for grad.
                result = self.tensor_op(fn, [left, right], node, scope, "op")
                if isinstance(result, TensorFact) and left.meta is not None and result.meta is not None:
                    return replace(
                        result,
                        storage_key=left.storage_key,
                        strides=left.strides,
                        storage_offset=left.storage_offset,
                        contiguous=left.contiguous,
                        is_view=left.is_view,
                        view_of=left.view_of,
                        storage_numel=left.storage_numel,
                    )
                return _written_into(left, right, scope.grad_enabled)
            return self.tensor_op(fn, [left, right], node, scope, "matmul" if fn is operator.matmul else "op")
        return UNKNOWN

    def expr_Compare(self: Interpreter, node: ast.Compare, scope: Scope) -> Value:
        left = self.eval(node.left, scope)
        rights = [self.eval(c, scope) for c in node.comparators]
        if len(rights) == 1 and isinstance(left, Const) and isinstance(rights[0], Const) and type(node.ops[0]) in _LITERAL_COMPARE:
            try:
                return Const(bool(_LITERAL_COMPARE[type(node.ops[0])](left.value, rights[0].value)))
            except Exception:  # noqa: BLE001 - `None < 1`: not a literal answer
                return UNKNOWN
        if len(rights) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            # `val is not None` of a literal, or of a layer or function (never None). Not of a
            # tensor: a join of a tensor and None is still said to be a tensor.
            sides = (left, rights[0])
            if any(isinstance(v, Const) and v.value is None for v in sides) and all(
                isinstance(v, (Const, ModuleValue, InstanceValue, FunctionValue, ClassInfo)) for v in sides
            ):
                same = all(isinstance(v, Const) and v.value is None for v in sides)
                return Const(same if isinstance(node.ops[0], ast.Is) else not same)
        if len(rights) == 1 and (isinstance(left, TensorFact) or isinstance(rights[0], TensorFact)):
            fns: dict[type, Any] = {
                ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
                ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            }  # fmt: skip
            fn = fns.get(type(node.ops[0]))
            if fn is not None:
                result = self.tensor_op(fn, [left, rights[0]], node, scope, "compare")
                if isinstance(result, TensorFact):
                    return replace(result, requires_grad=False, carries_graph=False)
        return UNKNOWN

    def expr_BoolOp(self: Interpreter, node: ast.BoolOp, scope: Scope) -> Value:
        values = [self.eval(value, scope) for value in node.values]
        # Folded where every operand up to the deciding one is a literal (`i == 1 or i == n - 1`
        # in a comprehension over a shape).
        stop_on = isinstance(node.op, ast.Or)
        for value in values:
            if not isinstance(value, Const):
                return UNKNOWN
            if bool(value.value) is stop_on:
                return value
        return values[-1]

    def expr_Dict(self: Interpreter, node: ast.Dict, scope: Scope) -> Value:
        items: list[tuple[str, Value]] | None = []
        for key, part in zip(node.keys, node.values, strict=True):
            key_value = self.eval(key, scope) if key is not None else None
            value = self.eval(part, scope)
            if items is not None and isinstance(key_value, Const) and isinstance(key_value.value, str):
                items.append((key_value.value, value))
            else:
                items = None  # `**other` or a key that is no literal string
        return DictValue(tuple(items)) if items else UNKNOWN

    def expr_Starred(self: Interpreter, node: ast.Starred, scope: Scope) -> Value:
        self.eval(node.value, scope)
        return UNKNOWN

    def expr_Attribute(self: Interpreter, node: ast.Attribute, scope: Scope) -> Value:
        owner = self.eval(node.value, scope)
        attr = node.attr
        if isinstance(owner, TorchRef):
            return TorchRef(f"{owner.path}.{attr}")
        if isinstance(owner, InstanceValue):
            value = instance_attribute(owner, attr)
            if value is not None and value is not UNKNOWN:
                if isinstance(node.value, ast.Name):
                    self.name_size(value, (node.value.id, attr))
                if owner.cls.is_module and isinstance(value, TensorFact) and value.device is not None:
                    # A parameter or buffer made on the CPU moves with `model.cuda()`.
                    value = with_fields(value, device=None)
                return value
            method = owner.cls.methods.get(attr)
            if method is not None:
                return FunctionValue(method)
            value = self.attribute_value(owner, attr, node.value)
            if isinstance(node.value, ast.Name):
                self.name_size(value, (node.value.id, attr))
            return value
        if isinstance(owner, TensorFact):
            return self.tensor_attribute(owner, attr, node, scope)
        if isinstance(owner, SeqValue) and owner.kind == api.VALUES_INDICES and attr in ("values", "indices"):
            return owner.items[attr == "indices"]  # `x.topk(k).values`
        if isinstance(owner, DictValue):  # an nn.ModuleDict: `self.transformer.wte`
            item = owner.get(attr)
            return item if item is not None else UNKNOWN
        if isinstance(owner, (Opaque, ModuleValue)):
            return self.attribute_value(owner, attr, node.value)
        return UNKNOWN

    def tensor_attribute(self: Interpreter, tensor: TensorFact, attr: str, node: ast.AST, scope: Scope) -> Value:
        if attr in ("T", "mT", "H", "mH"):
            return self.tensor_method(tensor, attr, [], {}, node, scope, as_property=True)
        if attr == "shape" and tensor.shape is not None:
            return Const(tuple(tensor.shape))
        if attr == "ndim" and tensor.shape is not None:
            return Const(len(tensor.shape))
        if attr == "shape" and tensor.sym is not None:
            return self.shape_value(tensor)
        if attr == "ndim" and tensor.sym is not None:
            return Const(tensor.sym.ndim)
        if attr == "dtype" and tensor.dtype is not None:
            return TorchRef(f"torch.{tensor.dtype}")
        if attr == "data":
            # `.data` shares storage and drops the graph, silently.
            line = getattr(node, "lineno", 0)
            fact = replace(
                tensor,
                requires_grad=False,
                carries_graph=False,
                is_view=tensor.is_view if tensor.meta is None else None,
                meta=tensor.meta.detach() if tensor.meta is not None else None,
            )
            if fact.meta is not None:
                fact = replace(rp.fact_from_meta(fact.meta, tensor.device), storage_key=tensor.storage_key, provenance=tensor.provenance)
            fact = replace(fact, detached_from=_source_text(node.value) if isinstance(node, ast.Attribute) else None)
            return fact.with_note("shares storage, no autograd", ".data", line)
        if attr in ("grad",):
            return TensorFact(device=tensor.device, dtype=tensor.dtype, shape=tensor.shape)
        return UNKNOWN

    def expr_Subscript(self: Interpreter, node: ast.Subscript, scope: Scope) -> Value:
        base = self.eval(node.value, scope)
        index = self.eval(node.slice, scope)
        if base is UNKNOWN and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            # `x.shape[0]` of a tensor whose rank is not known yet: still one size.
            owner = self.facts.get(node.value.value) if isinstance(node.value.value, ast.expr) else None
            if isinstance(owner, TensorFact) and owner.shape is None and owner.sym is None:
                return self.dim_of_unknown_rank(owner, index, node.value)
        if isinstance(base, SeqValue) and isinstance(index, Const) and isinstance(index.value, int):
            try:
                return base.items[index.value]
            except IndexError:
                return UNKNOWN
        if isinstance(base, SeqValue) and isinstance(index, Const) and isinstance(index.value, slice):
            return SeqValue(base.items[index.value], base.kind)  # `x.shape[:-1]`
        if isinstance(base, ListOf) and (
            (isinstance(index, Const) and isinstance(index.value, int))
            or isinstance(index, (SizeValue, Opaque, Number))
            or (index is UNKNOWN and not isinstance(node.slice, (ast.Slice, ast.Tuple)))
        ):
            return base.item  # (`self.stages[i]` of a loop's `i`: any item is like the others)
        if isinstance(base, SeqValue) and base.kind == "list" and isinstance(index, (SizeValue, Opaque)) and base.items:
            # `self.blocks[i]` of a ModuleList: whichever item it is, what they all share.
            return self._element_of(base)
        if isinstance(base, DictValue) and isinstance(index, Const) and isinstance(index.value, str):
            item = base.get(index.value)
            return item if item is not None else UNKNOWN
        if isinstance(base, Const) and isinstance(index, Const):
            try:
                value = base.value[index.value]
            except Exception:  # noqa: BLE001
                return UNKNOWN
            return Const(value)
        if isinstance(base, TensorFact):
            return self.index_tensor(base, index, node, scope)
        return UNKNOWN

    def index_tensor(self: Interpreter, base: TensorFact, index: Value, node: ast.Subscript, scope: Scope) -> Value:
        if base.meta is None and base.sym is not None:
            items = self._symbolic_index_items(index)
            if items is not None:
                result = self.symops.index(base, items, scope)
                if result is not None:
                    return result
        basic = self._is_basic_index(index)
        line = node.lineno
        try:
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            text = ", ".join(ast.unparse(p) for p in parts)
        except Exception:  # noqa: BLE001
            text = "..."
        result = self.tensor_op(operator.getitem, [base, index], node, scope, f"[{text}]")
        if isinstance(result, TensorFact) and result.meta is not None and result.storage_key == base.storage_key:
            changed = result.contiguous is False and base.contiguous is not False
            kept = base.provenance if result.contiguous is False and base.contiguous is False else ()
            result = replace(result, provenance=kept, permuted_by=base.permuted_by).with_note(
                "non-contiguous view" if changed else "view (shares storage)", f"indexing [{text}]", line
            )
        if isinstance(result, TensorFact) and result.meta is None and basic:
            # Basic indexing is always a view, whatever the sizes.
            return replace(
                forget_layout(result),
                is_view=True,
                storage_key=base.storage_key,
                view_of=base.view_of,
                dtype=base.dtype,
                device=base.device,
                carries_graph=base.carries_graph,
                requires_grad=base.requires_grad,
            ).with_note("view", f"indexing [{text}]", line)
        if isinstance(result, TensorFact) and result.meta is None and not basic and base.requires_grad is False and result.requires_grad is None:
            # Whatever the index is (ints, int64 or bool tensors: none can carry a gradient),
            # the result needs grad only where the indexed tensor does.
            result = replace(result, requires_grad=False, carries_graph=False)
        if isinstance(result, TensorFact) and result.meta is None and not basic and not _surely_advanced(index):
            # `offsets[i]` with `i` unknown: an int gives a view, a tensor a copy.
            return replace(result, is_view=None, storage_key=None, view_of=None, contiguous=None)
        if isinstance(result, TensorFact) and result.meta is None and result.sym is None and base.meta is None and base.sym is not None:
            gathered = self._one_list_index(base, index, scope)
            if gathered is not None:
                return with_fields(result, sym=gathered.sym, assumes=result.assumes | gathered.assumes)
        return result

    def _one_list_index(self: Interpreter, base: TensorFact, index: Value, scope: Scope) -> TensorFact | None:
        """`h[:, [-1], :]` (llama2.c's last position, kept as a dim): slices and one list of
        ints. Advanced indexing copies: the list's dim has its length, the others are sliced;
        the layout is not stated."""
        if isinstance(index, Const) and isinstance(index.value, tuple):  # all literal: `[:, [-1], :]`
            raw: list[Value] = [
                SeqValue(tuple(Const(x) for x in v), "list") if isinstance(v, list) else Const(v) for v in index.value
            ]
        else:
            raw = list(index.items) if isinstance(index, SeqValue) and index.kind == "tuple" else [index]
        lists = [i for i, item in enumerate(raw) if isinstance(item, SeqValue) and item.kind == "list"]
        if len(lists) != 1:
            return None
        picked = raw[lists[0]]
        assert isinstance(picked, SeqValue)
        if not picked.items or not all(isinstance(v, Const) and type(v.value) is int for v in picked.items):
            return None
        others = [Const(slice(None)) if i == lists[0] else item for i, item in enumerate(raw)]
        items = self._symbolic_index_items(SeqValue(tuple(others), "tuple"))
        if items is None or any(not (isinstance(i, tuple) and i[0] == "slice") for i in items):
            return None  # ints, None or ... beside a list: numpy's placement rules, not followed
        sliced = self.symops.index(base, items, scope)
        if sliced is None or sliced.sym is None:
            return None
        shape = list(sliced.sym.shape)
        shape[lists[0]] = len(picked.items)
        out = self.symops.fresh(tuple(shape), base, [base], scope, dtype=base.dtype, contiguous=False)
        return with_fields(out, is_view=False, view_of=None)

    def _symbolic_index_items(self: Interpreter, index: Value) -> list[Any] | None:
        """Basic index items with sizes: ints, ("slice", start, stop, step), None, Ellipsis."""
        raw: list[Value]
        if isinstance(index, Const) and isinstance(index.value, tuple):
            raw = [Const(v) for v in index.value]
        elif isinstance(index, SeqValue) and index.kind == "tuple":
            raw = list(index.items)
        else:
            raw = [index]
        out: list[Any] = []
        for item in raw:
            if isinstance(item, Const):
                v = item.value
                if v is None or v is Ellipsis or (isinstance(v, int) and not isinstance(v, bool)):
                    out.append(v)
                elif isinstance(v, slice):
                    if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in (v.start, v.stop, v.step)):
                        return None
                    out.append(("slice", v.start, v.stop, v.step))
                else:
                    return None
            elif isinstance(item, SymSlice):
                parts: list[Any] = []
                for part in (item.start, item.stop, item.step):
                    if isinstance(part, Const) and part.value is None:
                        parts.append(None)
                        continue
                    size = self.symops.size_of(part)
                    if size is None:
                        return None
                    parts.append(size)
                out.append(("slice", *parts))
            else:
                return None
        return out

    @staticmethod
    def _is_basic_index(index: Value) -> bool:
        def ok(v: Any) -> bool:
            return v is None or v is Ellipsis or (isinstance(v, (int, slice)) and not isinstance(v, bool))

        if isinstance(index, Const):
            value = index.value
            if isinstance(value, tuple):
                return all(ok(v) for v in value)
            return ok(value)
        if isinstance(index, SymSlice):
            return True
        if isinstance(index, SeqValue) and index.kind == "tuple":
            return all(isinstance(i, SymSlice) or (isinstance(i, Const) and ok(i.value)) for i in index.items)
        return False

    # -------------------------------------------------------------------- calls
    def _eval_args(self: Interpreter, node: ast.Call, scope: Scope) -> tuple[list[Value], dict[str, Value], bool]:
        args: list[Value] = []
        kwargs: dict[str, Value] = {}
        exact = True
        for a in node.args:
            if isinstance(a, ast.Starred):
                spread = self.eval(a.value, scope)
                if isinstance(spread, SeqValue):
                    args.extend(spread.items)  # `f(*[a, b])`, `x.view(*shape)`: the items themselves
                    continue
                if isinstance(spread, ListOf) and len(node.args) == 1:
                    # `nn.Sequential(*[Block() for _ in range(n)])`: n of the same (interp_modules).
                    self.spread_lists[node] = spread
                exact = False
                continue
            args.append(self.eval(a, scope))
        for kw in node.keywords:
            value = self.eval(kw.value, scope)
            if kw.arg is None and isinstance(value, DictValue):
                kwargs.update(value.items)  # `self.fn(x, **kwargs)` of the caller's keywords
            elif kw.arg is None:
                exact = False
            else:
                kwargs[kw.arg] = value
        return args, kwargs, exact

    def expr_Call(self: Interpreter, node: ast.Call, scope: Scope) -> Value:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "forward" and _is_super_call(func.value):
            base = self._torch_layer_base(scope)
            if base is not None:
                # `super().forward(x.type(torch.float32))` in a subclass of a torch layer: the
                # layer's dtype rule only (its constructor's arguments are not known here).
                args, kwargs, exact = self._eval_args(node, scope)
                x = next((a for a in args if isinstance(a, TensorFact)), None)
                if x is not None and x.dtype == "float32" and base.rpartition(".")[2] in FLOAT32_KEEPING_NORMS:
                    return TensorFact(dtype="float32")
                return UNKNOWN
        if isinstance(func, ast.Attribute):
            receiver = self.eval(func.value, scope)
            args, kwargs, exact = self._eval_args(node, scope)
            name = func.attr
            if (
                name == "permute"
                and isinstance(receiver, TensorFact)
                and receiver.sym is None
                and receiver.shape is None
                and receiver.meta is None
                and node.args
                and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args)
            ):
                # `x.permute(0, 2, 1)` says x has 3 dims.
                holder = func.value.id if isinstance(func.value, ast.Name) else None
                receiver = self.with_rank(receiver, len(node.args), holder)
                if holder is not None:
                    self._rebind_in_place(holder, receiver, scope)
            parameter_sizes = isinstance(receiver, Opaque) and len(receiver.path) == 1 and (_sizes_call(name, node) or _shape_view(name, args, kwargs))
            if isinstance(receiver, TensorFact) or (
                (receiver is UNKNOWN or isinstance(receiver, Opaque))
                and (name in api.TENSOR_ONLY_METHODS or parameter_sizes or _dtype_cast(name, args, kwargs))
            ):
                if isinstance(receiver, TensorFact):
                    tensor = receiver
                elif parameter_sizes:
                    assert isinstance(receiver, Opaque)
                    tensor = self.opaque_tensor(receiver)  # the parameter: its sizes keep its name
                else:
                    tensor = TensorFact(storage_key=self.fresh_storage())
                if not exact:
                    return self._unknown_result(tensor, name)
                result = self.tensor_method(tensor, name, args, kwargs, node, scope)
                if name in ("detach", "detach_") and isinstance(result, TensorFact):
                    result = replace(result, detached_from=_source_text(func.value))
                return result
            if _copies_layer(func, args):
                return args[0]
            if isinstance(receiver, TorchRef):
                self.record(func, TorchRef(f"{receiver.path}.{name}"))
                return self.call_torch(f"{receiver.path}.{name}", args, kwargs, exact, node, scope)
            if isinstance(receiver, ModuleValue):
                return self.module_method(receiver, name, args, kwargs)
            if name in ("append", "extend") and len(args) == 1 and not kwargs and grown_list(receiver):
                # `self.layers.append(Block(...))` in a loop: a ModuleList of some Blocks;
                # `ys = []` ... `ys.append(y)`: a list of tensors like `y`.
                container = receiver if isinstance(receiver, (SeqValue, ListOf)) else SeqValue((), "list")
                added = (args[0],) if name == "append" else seq_items(args[0])
                if added is not None and self._rebind_container(func.value, appended(container, added), scope):
                    return Const(None)
            if name in _LIST_MUTATORS and isinstance(func.value, ast.Name) and isinstance(receiver, (Const, SeqValue, ListOf)):
                # `sizes.append(4)`: the literal bound to `sizes` is no longer what it holds.
                scope.env[func.value.id] = UNKNOWN
            if isinstance(receiver, DictValue) and name not in ("get", "keys", "values", "items") and isinstance(func.value, ast.Name):
                # `kwargs.update(context=...)`, `.pop(...)`: what it held is no longer known.
                self._forget_dict(func.value.id, scope)
            if isinstance(receiver, DictValue):
                item = receiver.get(name)
                if isinstance(item, (ModuleValue, InstanceValue)):
                    return self.call_value(item, args, kwargs, exact, node, scope)
                if name == "values" and not args:
                    return SeqValue(tuple(v for _, v in receiver.items), "list")
                if name == "keys" and not args:
                    return SeqValue(tuple(Const(k) for k, _ in receiver.items), "list")
                if name == "items" and not args:
                    return SeqValue(tuple(SeqValue((Const(k), v)) for k, v in receiver.items), "list")
                return UNKNOWN
            if isinstance(receiver, InstanceValue):
                callee = instance_attribute(receiver, name)
                if callee is not None:
                    self.record(func, callee)
                if isinstance(callee, ModuleValue):
                    return self.call_module(callee, args, kwargs, exact, node, scope)
                if (isinstance(callee, InstanceValue) and callee.cls.is_module) or isinstance(callee, ModuleChoice):
                    return self.call_value(callee, args, kwargs, exact, node, scope)
                if name in ("eval", "train", "to", "cuda", "cpu", "requires_grad_"):
                    return receiver
                method = receiver.cls.methods.get(name)
                if method is None and name in ("register_buffer", "register_parameter") and len(args) >= 2 and isinstance(args[0], Const) and isinstance(args[0].value, str):
                    # `self.register_buffer("mask", torch.tril(...))`: `self.mask` is that tensor.
                    self._assign_attribute(receiver, args[0].value, args[1])
                    if isinstance(func.value, ast.Name):
                        self.name_tensor_sizes(args[1], (func.value.id, args[0].value), scope)
                    return Const(None)
                if method is not None and exact:
                    returned = self.call_concrete(method, receiver, args, kwargs, scope, node)
                    return UNKNOWN if returned is None else returned
                return UNKNOWN
            return UNKNOWN
        if isinstance(func, ast.Name) and func.id == "map" and scope.lookup("map") is None:
            mapped = self._map_lambda(node, scope)
            if mapped is not None:
                return mapped
        callee = self.eval(func, scope)
        args, kwargs, exact = self._eval_args(node, scope)
        if isinstance(callee, TorchRef):
            return self.call_torch(callee.path, args, kwargs, exact, node, scope)
        if isinstance(callee, ClassInfo):
            return InstanceValue(callee, _init_layers(callee, args, kwargs) if exact else ())
        if _copies_layer(func, args):
            return args[0]
        if isinstance(callee, FunctionValue) and exact:
            returned = self.call_concrete(callee.node, None, args, kwargs, scope, node)
            return UNKNOWN if returned is None else returned
        if isinstance(callee, (ModuleValue, InstanceValue, ModuleChoice)):
            return self.call_value(callee, args, kwargs, exact, node, scope)
        if isinstance(func, ast.Name) and callee is UNKNOWN and scope.lookup(func.id) is None:
            return self.call_builtin(func.id, args, kwargs)
        return UNKNOWN

    def _map_lambda(self: Interpreter, node: ast.Call, scope: Scope) -> Value | None:
        """`q, k, v = map(lambda t: rearrange(t, ...), qkv)`: the lambda's body for each item."""
        if len(node.args) != 2 or node.keywords or not isinstance(node.args[0], ast.Lambda):
            return None
        fn = node.args[0]
        spec = fn.args
        if len(spec.args) != 1 or spec.vararg or spec.kwarg or spec.kwonlyargs or spec.posonlyargs:
            return None
        iterable = self.eval(node.args[1], scope)
        items = list(iterable.items) if isinstance(iterable, SeqValue) and len(iterable.items) <= 16 else None
        if items is None:
            return None
        results: list[Value] = []
        for item in items:
            inner = Scope(scope, scope.grad_enabled, grad_assumed=scope.grad_assumed)
            inner.env[spec.args[0].arg] = item
            results.append(self.eval(fn.body, inner))
        return SeqValue(tuple(results), "list")

    def _torch_layer_base(self: Interpreter, scope: Scope) -> str | None:
        """The torch layer the class of the running method subclasses (`class
        LayerNorm(nn.LayerNorm)`), by its path; None when it is no such class."""
        owner = scope.lookup("self")
        if not isinstance(owner, InstanceValue):
            return None
        for base in owner.cls.node.bases:
            value = self.eval(base, scope)
            if isinstance(value, TorchRef) and value.path.startswith("torch.nn.") and value.path.rpartition(".")[2][:1].isupper():
                return value.path
        return None

    def call_value(
        self: Interpreter, callee: Value, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        """Calling a module: an nn layer, or one of the file's own nn.Modules (its `forward`
        followed with the caller's facts)."""
        if isinstance(callee, ModuleValue):
            return self.call_module(callee, args, kwargs, exact, node, scope)
        if isinstance(callee, ModuleChoice):
            return self._call_choice(callee, args, kwargs, exact, node, scope)
        if isinstance(callee, InstanceValue) and callee.cls.is_module:
            forward = callee.cls.methods.get("forward")
            if forward is not None and exact:
                returned = self.call_concrete(forward, callee, args, kwargs, scope, node)
                if returned is not None:
                    return returned
            return self.call_user_module(callee, args, scope)
        return UNKNOWN

    def _call_choice(
        self: Interpreter, choice: ModuleChoice, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        """Each option on the same arguments, the outputs joined. A layer's output only, not
        what a call of it proves of the input (a Linear's dtype): the other option may not."""
        joined: Value | None = None
        for option in choice.options:
            if isinstance(option, ModuleValue):
                out = self.layer_output(option, args, kwargs, exact, node, scope)
            else:
                out = self.call_value(option, args, kwargs, exact, node, scope)
            joined = out if joined is None else join_values(joined, out, self.symops.canon_layout)
        return UNKNOWN if joined is None else joined

    def call_builtin(self: Interpreter, name: str, args: list[Value], kwargs: dict[str, Value] | None = None) -> Value:
        if name == "dict" and not args and kwargs:
            return DictValue(tuple(kwargs.items()))
        if name == "len" and len(args) == 1:
            arg = args[0]
            if isinstance(arg, TensorFact) and arg.shape:
                return Const(arg.shape[0])
            if isinstance(arg, TensorFact) and arg.sym is not None and arg.sym.shape:
                return self.dim_size(arg, Const(0))
            if isinstance(arg, SeqValue):
                return Const(len(arg.items))
            if isinstance(arg, Const) and isinstance(arg.value, (tuple, list, str)):
                return Const(len(arg.value))
        if name == "enumerate" and len(args) == 1 and not kwargs:
            items = _sequence_items(args[0])
            if items is not None:
                return SeqValue(tuple(SeqValue((Const(i), item)) for i, item in enumerate(items)), "list")
        if name == "zip" and args and not kwargs:
            columns = [_sequence_items(a) for a in args]
            if all(c is not None for c in columns):
                return SeqValue(tuple(SeqValue(row) for row in zip(*columns, strict=False)), "list")  # type: ignore[misc]
            if any(isinstance(a, ListOf) for a in args):
                # `zip(layers, to_drop)` of a list of unknown length: rows of its item and
                # whatever the other columns hold.
                return ListOf(SeqValue(tuple(a.item if isinstance(a, ListOf) else UNKNOWN for a in args)))
        if name in ("tuple", "list") and len(args) == 1 and isinstance(args[0], SeqValue):
            return SeqValue(args[0].items, name)
        if name in ("int", "tuple", "list") and len(args) == 1 and isinstance(args[0], Const):
            try:
                return Const({"int": int, "tuple": tuple, "list": list}[name](args[0].value))
            except Exception:  # noqa: BLE001
                return UNKNOWN
        return UNKNOWN


# Comparisons folded between literals (`i == 1` in a comprehension over a shape).
_LITERAL_COMPARE: dict[type, Any] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}  # fmt: skip


def _sequence_items(value: Value) -> tuple[Value, ...] | None:
    """The items of a tuple or list the analysis knows item by item (a shape, `(q, k, v)`)."""
    if isinstance(value, SeqValue):
        return value.items
    if isinstance(value, Const) and isinstance(value.value, (tuple, list)):
        return tuple(Const(v) for v in value.value)
    return None


def _concatenated(left: Value, right: Value) -> Value | None:
    """`a + b` of two tuples (or two lists) known item by item, else None."""
    kinds = []
    for side in (left, right):
        if isinstance(side, SeqValue):
            kinds.append(side.kind)
        elif isinstance(side, Const) and isinstance(side.value, (tuple, list)):
            kinds.append("tuple" if isinstance(side.value, tuple) else "list")
        else:
            return None
    if kinds[0] != kinds[1] or (isinstance(left, Const) and isinstance(right, Const)):
        return None  # (two literals fold as constants)
    items = (*(_sequence_items(left) or ()), *(_sequence_items(right) or ()))
    return SeqValue(items, kinds[0])


def _no_view_verdict(value: Value, grad_enabled: bool = False) -> Value:
    """A value computed under `torch.inference_mode()` (or in a body that may run there): a
    view of an inference tensor has no `_base` (`_is_view()` False) though it shares storage,
    a view of a normal tensor has one, so `is_view` is not stated there (`view_of` and storage
    sharing stay). A view of a normal tensor that requires grad requires grad even there, so a
    `requires_grad: False` the disabled grad mode gave is not stated either; one computed with
    grad on (`arange(n)[:k]` in a body) comes from the base, and holds in either mode."""
    if isinstance(value, TensorFact):
        if not value.is_view:
            return value
        if not grad_enabled and (value.requires_grad is False or value.carries_graph is False):
            return replace(value, is_view=None, requires_grad=None, carries_graph=None)
        return replace(value, is_view=None)
    if isinstance(value, SeqValue) and any(isinstance(i, TensorFact) and i.is_view for i in value.items):
        return replace(value, items=tuple(_no_view_verdict(i, grad_enabled) for i in value.items))
    if isinstance(value, ListOf) and isinstance(value.item, TensorFact) and value.item.is_view:
        return replace(value, item=_no_view_verdict(value.item, grad_enabled))
    return value


def _written_into(left: TensorFact, right: Value, grad_enabled: bool) -> TensorFact:
    """`x += r` (no exact replay): the same tensor, so its shape, layout, dtype and storage
    stay (an in-place op cannot broadcast its target or change its dtype); only whether it
    now carries a graph may change."""
    others = [right] if isinstance(right, TensorFact) else []
    if not grad_enabled:
        grad = left.requires_grad
    elif left.requires_grad is True or any(t.requires_grad is True or t.carries_graph is True for t in others):
        grad = True
    elif left.requires_grad is False and all(t.requires_grad is False and t.carries_graph is False for t in others):
        grad = False
    else:
        grad = None
    return with_fields(left, requires_grad=grad, carries_graph=grad if grad_enabled else left.carries_graph)


def _surely_advanced(index: Value) -> bool:
    """An index that makes torch copy for sure: a tensor, or a tuple holding one."""
    if isinstance(index, TensorFact):
        return True
    if isinstance(index, Const) and (
        isinstance(index.value, list) or (isinstance(index.value, tuple) and any(isinstance(v, list) for v in index.value))
    ):
        return True  # `x[[0, 2]]`, `h[:, [-1], :]`
    return isinstance(index, SeqValue) and any(isinstance(i, TensorFact) or (isinstance(i, Const) and isinstance(i.value, list)) for i in index.items)


def _copies_layer(func: ast.expr, args: list[Value]) -> bool:
    """`copy.deepcopy(layer)` / `deepcopy(layer)`: a layer like it."""
    return (
        isinstance(func, (ast.Attribute, ast.Name))
        and _call_name(func) in ("deepcopy", "copy")
        and len(args) == 1
        and isinstance(args[0], (InstanceValue, ModuleValue))
    )


def _shape_view(name: str, args: list[Value], kwargs: dict[str, Value]) -> bool:
    """`x.view(shape)` given a tuple or list of sizes (numpy's `view` takes a dtype)."""
    if name != "view" or len(args) != 1 or kwargs:
        return False
    items = _sequence_items(args[0])
    return items is not None and len(items) > 0 and all(isinstance(i, (Const, SizeValue)) and not isinstance(getattr(i, "value", 0), (str, float)) for i in items)


def _dtype_cast(name: str, args: list[Value], kwargs: dict[str, Value]) -> bool:
    """`x.type(torch.float32)`: a tensor's (numpy arrays have no `type` method; `module.to(dtype)`
    is a module's, so `.to` is not taken as a tensor's)."""
    return name == "type" and len(args) == 1 and not kwargs and isinstance(args[0], TorchRef) and args[0].path.removeprefix("torch.") in api.DTYPES


def _sizes_call(name: str, node: ast.Call) -> bool:
    """`x.size(0)`, `x.view(n, -1)` of a parameter: a tensor's (numpy's `size` is no method, its
    `view` takes a dtype). Of any other unknown value, not assumed."""
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        return False
    if name == "size":
        return len(node.args) == 1
    return name == "view" and len(node.args) >= 2


def _callable_module(value: Value) -> bool:
    """An nn layer or an instance of one of the file's own nn.Modules."""
    return isinstance(value, ModuleValue) or (isinstance(value, InstanceValue) and value.cls.is_module)


_LAYER_VALUES = (ModuleValue, InstanceValue, ModuleChoice)


def _init_layers(cls: ClassInfo, args: list[Value], kwargs: dict[str, Value]) -> tuple[tuple[str, Value], ...]:
    """The layers a construction passes to `__init__`, by parameter name."""
    init = cls.methods.get("__init__")
    if init is None or not (args or kwargs):
        return ()
    params = [p.arg for p in [*init.args.posonlyargs, *init.args.args]][1:]
    named = {k: v for k, v in kwargs.items() if k in params or any(p.arg == k for p in init.args.kwonlyargs)}
    named.update({params[i]: v for i, v in enumerate(args) if i < len(params)})
    return tuple((k, v) for k, v in named.items() if isinstance(v, _LAYER_VALUES))


def instance_attribute(owner: InstanceValue, attr: str) -> Value | None:
    """`self.fn` of this instance: the class's attribute, or, where `__init__` stored a
    parameter as it was (`self.fn = fn`), the layer this instance was built with."""
    value = owner.cls.attributes.get(attr)
    if owner.init_layers and isinstance(value, Opaque) and len(value.path) == 1:
        for name, layer in owner.init_layers:
            if name == value.path[0]:
                return layer
    return value


def _is_super_call(node: ast.expr) -> bool:
    """`super()` or `super(Cls, self)`."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
