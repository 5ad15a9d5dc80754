"""The interpreter's integer and size values: `B, T, C = x.shape`, `x.size(0)`, `C // n_head`,
`self.n_head`, tensor parameters of known rank, and how symbolic facts are stated in the
user's names at each line.

Mixed into `Interpreter` (interpreter.py); everything here is about sizes, nothing about
torch calls.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stridelens.i18n import tr
from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.conditions import Condition, divisible
from stridelens.server.analysis.facts import ReplayEvent, TensorFact, with_fields
from stridelens.server.analysis.interp_support import _access_path
from stridelens.server.analysis.layer_ranks import einops_input_rank
from stridelens.server.analysis.layouts import Layout
from stridelens.server.analysis.naming import NameContext, Path
from stridelens.server.analysis.sizes import Size, SymExpr
from stridelens.server.analysis.symbolic_einops import FUNCTIONS as EINOPS_FUNCTIONS
from stridelens.server.analysis.values import (
    NUMBER,
    UNKNOWN,
    Const,
    InstanceValue,
    ModuleValue,
    Number,
    Opaque,
    SeqValue,
    SizeValue,
    Value,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interpreter import Scope

# `nn` module attributes that are constructor sizes (`self.fc.out_features`).
MODULE_SIZE_ATTRS = frozenset(
    {"in_features", "out_features", "in_channels", "out_channels", "num_embeddings", "embedding_dim", "hidden_size", "input_size", "embed_dim", "num_heads", "output_size", "num_layers"}
)


MATH_NUMBER_FUNCTIONS = frozenset(
    {"sqrt", "log", "log2", "log10", "exp", "pow", "sin", "cos", "tan", "tanh", "atan", "floor", "ceil", "fabs", "isqrt", "gcd", "erf"}
)


@dataclass(frozen=True)
class SymSlice:
    """A slice with a symbolic bound: `x[:, :t]`."""

    start: Value
    stop: Value
    step: Value


def size_value(size: Size, certain: bool = True, conditions: frozenset[Condition] = frozenset()) -> Value:
    if isinstance(size, int):
        return Const(size)
    return SizeValue(size, certain, conditions)


class SizesMixin:
    # Provided by Interpreter.
    names: Any
    symops: Any
    facts: dict[ast.AST, Value]
    events: list[ReplayEvent]
    _current_node: ast.AST | None
    _current_scope: Scope | None
    _opaque_tensors: dict[int, TensorFact]
    _keep_alive: list[Any]
    _snapshots: list[ScopeSnapshot]
    _last_names: tuple[Scope, ScopeSnapshot, dict[int, Size], NameContext] | None

    quiet_depth: int
    grad_condition: str | None

    def fresh_storage(self) -> int:  # pragma: no cover - Interpreter defines it
        raise NotImplementedError

    def eval(self, node: ast.expr, scope: Scope) -> Value:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ stating facts
    def stated(self, fact: TensorFact, scope: Scope) -> TensorFact:
        """The fact as it is stated at this node: symbolic sizes in the names visible here,
        and no grad facts that only the default grad mode gave."""
        grad_unknown = fact.grad_unknown
        grad_assumed = fact.grad_assumed
        if scope.grad_assumed and (fact.carries_graph is True or (fact.carries_graph is None and fact.requires_grad is True)) and not grad_unknown and grad_assumed is None:
            # True when autograd is on: said so where the file can name the condition. (Only
            # a leaf, no graph for sure, requires grad in every grad mode.)
            if self.grad_condition is None:
                grad_unknown = True
            else:
                grad_assumed = self.grad_condition
        if fact.sym is None:
            if fact.assumes and fact.meta is None and fact.contiguous is not None:
                # The layout verdict's conditions, written in the names here.
                return with_fields(fact, rendered=LazyRendering(self.names, None, fact.assumes, self._names_here(scope)), grad_unknown=grad_unknown, grad_assumed=grad_assumed)
            if grad_unknown == fact.grad_unknown and grad_assumed == fact.grad_assumed:
                return fact
            return with_fields(fact, grad_unknown=grad_unknown, grad_assumed=grad_assumed)
        # Written out only when asked (hover, explain, a message): most recorded facts never
        # are. The names and equal sizes are taken as they are now, at this line.
        return with_fields(
            fact, rendered=LazyRendering(self.names, fact.sym, fact.assumes, self._names_here(scope)), grad_unknown=grad_unknown, grad_assumed=grad_assumed
        )

    def _names_here(self, scope: Scope) -> NameContext:
        """The names of this line: those of the previous stated fact while nothing was bound
        or equated since (most nodes of a statement), else a new snapshot. Dict equality
        compares identical values by identity, so the check is cheap when nothing changed."""
        last = self._last_names
        equal = self.symops.equal
        if last is not None and last[0] is scope and last[1].env == scope.env and last[2] == equal:
            return last[3]
        snapshot = ScopeSnapshot(scope)
        self._snapshots.append(snapshot)
        frozen_equal = dict(equal)
        names_here = _NamesAtLine(self, snapshot, frozen_equal)
        # Sizes, and the paths that name them, read through every equality proved so far: a size
        # proved equal only later in the file (by a call) still has this line's names.
        ctx = NameContext(names_here.resolve, names_here.tensor_name, self.symops.canon)
        self._last_names = (scope, snapshot, frozen_equal, ctx)
        return ctx

    def resolve_path(self, path: Path, scope: Scope, equal: dict[int, Size] | None = None) -> Size | None:
        """The size a path leads to in `scope` (`x.shape[0]`, `self.n_head`, `B`)."""
        if len(path) > 2 and path[2] == "shape" and scope.lookup(IN_INIT) is not None and scope.lookup(assigned_marker(path[1])) is None:
            return None  # `self.A_log.shape[1]` on an `__init__` line before `self.A_log = ...`
        value: Any = scope.lookup(path[0])
        steps = path[1:]
        i = 0
        while i < len(steps):
            step = steps[i]
            if value is None:
                return None
            if step == "shape" and isinstance(value, Opaque) and len(value.path) == 1 and i + 1 < len(steps) and steps[i + 1].startswith("["):
                # A parameter of unknown rank whose `x.size(0)` the code asked for.
                made = self._opaque_tensors.get(value.root)
                found = self.names.peek(("dim", id(made), int(steps[i + 1][1:-1]))) if made is not None else None
                return None if found is None else self.symops.canon(found, equal)  # type: ignore[no-any-return]
            if step == "shape" and isinstance(value, TensorFact):
                if i + 1 >= len(steps) or not steps[i + 1].startswith("["):
                    return None
                dim = int(steps[i + 1][1:-1])
                shape = value.known_shape
                if shape is None or not -len(shape) <= dim < len(shape):
                    return None
                return self.symops.canon(shape[dim], equal)  # type: ignore[no-any-return]
            value = self.attribute_value(value, step, None)
            i += 1
        size = self.symops.size_of(value)
        return None if size is None else self.symops.canon(size, equal)  # type: ignore[no-any-return]

    def _tensor_name(self, key: int, layout: object, scope: Scope) -> str | None:
        current: Scope | None = scope
        while current is not None:
            for name, value in current.env.items():
                if isinstance(value, TensorFact) and value.storage_key == key and value.sym == layout:
                    # A parameter of unknown rank (no layout to compare): the tensor itself,
                    # not a view of its storage.
                    if layout is None and value.is_view is True:
                        continue
                    return name
                if layout is None and isinstance(value, Opaque) and len(value.path) == 1:
                    # A parameter not yet used as a tensor in this scope's names (not one
                    # of its attributes: `device = x.device`).
                    made = self._opaque_tensors.get(value.root)
                    if made is not None and made.storage_key == key:
                        return name
            current = current.parent
        return None



    def name_size(self, value: Value, path: Path) -> None:
        if not isinstance(value, (SizeValue, Opaque)) or path[0] == "_" or path[-1] == "_":
            return  # not a size, or a throwaway name: no name to show
        if isinstance(value, SizeValue):
            self.names.add_path(value.expr, path)
        else:
            self.names.add_path(self.symops.size_of(value), path)

    def name_tensor_sizes(self, value: Value, path: Path, scope: Scope | None = None) -> None:
        """`self.latents = nn.Parameter(torch.randn(num_latents, dim))`: its sizes are also
        `self.latents.shape[0]`, `self.latents.shape[1]`, names every method can use."""
        if not isinstance(value, TensorFact) or value.sym is None or path[-1].startswith("_"):
            return
        if scope is not None and scope.lookup(IN_INIT) is not None:
            # In `__init__`, the name holds from this line on only (see `resolve_path`).
            scope.env[assigned_marker(path[-1])] = Const(True)
        for i, size in enumerate(value.sym.shape):
            if isinstance(size, SymExpr):
                self.names.add_path(size, (*path, "shape", f"[{i}]"))

    # ------------------------------------------------------------------ attributes
    def attribute_value(self, owner: Value, attr: str, receiver: ast.expr | None) -> Value:
        """`owner.attr` for instances, opaque values and modules (sizes only)."""
        if isinstance(owner, InstanceValue):
            value = owner.cls.attributes.get(attr)
            if value is not None and value is not UNKNOWN:
                return value
            if attr in owner.cls.methods:
                return UNKNOWN
            # Keyed by class and attribute, not by the receiver's name: `self.n_head` is one
            # atom in every method. Its names are added where it is read (`name_size`).
            return Opaque(id(owner.cls), ("<attr>", attr))
        if isinstance(owner, Opaque):
            return Opaque(owner.root, (*owner.path, attr))
        if isinstance(owner, ModuleValue) and attr in MODULE_SIZE_ATTRS:
            size = self.symops.module_size(owner, attr, (_access_path(receiver) if receiver is not None else None))
            return size_value(size) if size is not None else UNKNOWN
        if isinstance(owner, ModuleValue) and attr == "weight":
            weight = self.symops.module_weight(owner, (_access_path(receiver) if receiver is not None else None))
            return weight if weight is not None else UNKNOWN
        return UNKNOWN

    def dim_of_unknown_rank(self, fact: TensorFact, dim: Value, node: ast.AST) -> Value:
        """`x.size(0)` before anything says how many dims x has: one size, the same one the
        dim gets once the rank is known (`with_rank`)."""
        if not (isinstance(dim, Const) and isinstance(dim.value, int)):
            return UNKNOWN
        self._keep_alive.append(fact)  # keyed by identity below: keep it alive
        receiver = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else getattr(node, "value", None)
        name = receiver.id if isinstance(receiver, ast.Name) else None
        index = dim.value
        origin = (name, "shape", f"[{index}]") if name else None
        return SizeValue(self.names.atom_for(("dim", id(fact), index), origin))

    def with_rank(self, fact: TensorFact, rank: int, name: str | None) -> TensorFact:
        """A tensor whose rank the code just stated (`B, C, T = x.shape`, `x.permute(0, 2, 1)`):
        one size per dim, named `x.shape[i]`; row-major when the tensor is known to be."""

        def dim_atom(i: int) -> SymExpr:
            for index in (i, i - rank):
                found = self.names.peek(("dim", id(fact), index))
                if found is not None:
                    return found  # type: ignore[no-any-return]
            return self.names.new_atom((name, "shape", f"[{i}]") if name else None)  # type: ignore[no-any-return]

        shape = tuple(dim_atom(i) for i in range(rank))
        layout = lay.contiguous(shape) if fact.contiguous is True else Layout(shape, None, None)
        return with_fields(fact, sym=layout)

    # ------------------------------------------------------------------ tensors' sizes
    def shape_value(self, fact: TensorFact) -> Value:
        """`x.shape` / `x.size()`: a tuple of sizes."""
        if fact.sym is None:
            return UNKNOWN
        return SeqValue(tuple(size_value(s) for s in fact.sym.shape))

    def dim_size(self, fact: TensorFact, dim: Value) -> Value:
        if fact.sym is None or not (isinstance(dim, Const) and isinstance(dim.value, int)):
            return UNKNOWN
        shape = fact.sym.shape
        if not -len(shape) <= dim.value < len(shape):
            return UNKNOWN
        return size_value(shape[dim.value])

    # ------------------------------------------------------------------ arithmetic
    def size_binop(self, op: ast.operator, left: Value, right: Value, node: ast.AST) -> Value | None:
        """Integer arithmetic where a side is symbolic; None when this is not size arithmetic."""
        if not any(isinstance(v, (SizeValue, Opaque)) for v in (left, right)):
            return None
        a, b = self.symops.size_of(left), self.symops.size_of(right)
        if isinstance(op, (ast.Pow, ast.Div)) and (a is not None or b is not None):
            # `(dim // heads) ** -0.5`, `C / 2`: a number, once its opaque parts are ints.
            other = right if a is not None else left
            if self.symops.is_number(other) or (isinstance(other, Const) and isinstance(other.value, float)):
                atoms = frozenset().union(*(x.atoms() for x in (a, b) if isinstance(x, SymExpr)))
                return Number(atoms)
        if a is None or b is None:
            return UNKNOWN
        certain = all(not isinstance(v, Opaque) and not (isinstance(v, SizeValue) and not v.certain) for v in (left, right))
        conditions = frozenset().union(*(v.conditions for v in (left, right) if isinstance(v, SizeValue)))
        result: Size | None
        if isinstance(op, ast.Add):
            result = sz.add(a, b)
        elif isinstance(op, ast.Sub):
            result = sz.sub(a, b)
        elif isinstance(op, ast.Mult):
            result = sz.mul(a, b)
        elif isinstance(op, ast.FloorDiv):
            result, needs = sz.floordiv(a, b)
            if needs:
                # `C // n` is tracked as C / n: true when n divides C, as a `view` needs.
                conditions = conditions | {divisible(a, b)}
        else:
            # `d ** -0.5`, `C / 2`: a number, not a size (once `d` is known to be an int).
            if isinstance(op, (ast.Pow, ast.Div, ast.Mod)):
                atoms = frozenset().union(*(x.atoms() for x in (a, b) if isinstance(x, SymExpr)))
                return NUMBER if certain else Number(atoms)
            return UNKNOWN
        if result is None:
            return UNKNOWN
        if isinstance(result, int):
            return Const(result)
        return SizeValue(result, certain, conditions)

    def math_call(self, name: str, args: list[Value]) -> Value:
        """`math.prod(x.shape[1:])` is a size; other `math` functions give numbers."""
        if name == "prod" and len(args) == 1:
            items = args[0].items if isinstance(args[0], SeqValue) else None
            if isinstance(args[0], Const) and isinstance(args[0].value, tuple):
                items = tuple(Const(v) for v in args[0].value)
            if items is not None:
                sizes = [self.symops.size_of(i) for i in items]
                if all(s is not None for s in sizes):
                    total = sz.product(sizes)  # type: ignore[arg-type]
                    if total is not None:
                        return size_value(total)
            return UNKNOWN
        if name in ("pi", "e", "inf", "tau", "nan"):
            return NUMBER
        return NUMBER if name in MATH_NUMBER_FUNCTIONS else UNKNOWN

    # ------------------------------------------------------------------ parameters
    def tensor_parameter(self, name: str, rank: int, *, row_major: bool = True) -> TensorFact:
        """A tensor parameter of known rank: one size per dim, named `x.shape[i]`. Its layout
        is taken as row-major, and every verdict that depends on that says so (`row_major`
        False: the sizes only)."""
        shape = tuple(self.names.new_atom((name, "shape", f"[{i}]")) for i in range(rank))
        key = self.fresh_storage()
        if not row_major:
            return TensorFact(storage_key=key, sym=lay.Layout(shape, None, None))
        layout = lay.contiguous(shape)
        condition = Condition("contiguous", tensor_key=key, tensor_layout=layout, tensor_name=name)
        return TensorFact(storage_key=key, contiguous=True, sym=layout, assumes=frozenset({condition}))

    def opaque_tensor(self, value: Opaque) -> TensorFact:
        """A parameter passed to a layer: a tensor of unknown rank, taken as row-major (and
        saying so wherever that matters)."""
        found = self._opaque_tensors.get(value.root)
        if found is None:
            key = self.fresh_storage()
            condition = Condition("contiguous", tensor_key=key, tensor_layout=None, tensor_name=value.path[0])
            found = TensorFact(storage_key=key, contiguous=True, assumes=frozenset({condition}))
            self._opaque_tensors[value.root] = found
        return found

    # ------------------------------------------------------------------ events
    def symbolic_event(self, kind: str, message: str, conditions: frozenset[Condition]) -> None:
        node, scope = self._current_node, self._current_scope
        if node is None or scope is None or self.quiet_depth:
            return
        ctx = NameContext(lambda path: self.resolve_path(path, scope), lambda key, layout: self._tensor_name(key, layout, scope))
        unless: list[str] = []
        assumed: list[str] = []
        prose: set[str] = set()  # assumptions already in words (no backticks around them)
        cache: dict[Path, Size | None] = {}
        for cond in sorted(conditions, key=lambda c: (c.kind, repr(c.a))):
            text = self.names.render_condition(cond, ctx, cache)
            if text is None and cond.kind == "contiguous" and cond.tensor_name:
                text = tr("the argument `{name}` is contiguous").format(name=cond.tensor_name)
                prose.add(text)
            if text is None:
                if cond.kind == "ne":
                    return  # a size we cannot name decides it: say nothing
                continue
            if cond.kind == "ne":
                unless.append(text.replace(" != ", " == "))
            else:
                assumed.append(text)
        # In the order of their text: the conditions' own order follows atom numbers, which
        # the process-wide verdict caches make differ from run to run.
        unless, assumed = sorted(set(unless)), sorted(set(assumed))
        detail = ""
        if unless:
            detail += tr(" unless {conditions}").format(conditions=tr(" or ").join(f"`{u}`" for u in unless))
        if assumed:
            listed = tr(", ").join(a if a in prose else f"`{a}`" for a in assumed)
            detail += tr(" (assuming {assumptions})").format(assumptions=listed)
        line = getattr(node, "lineno", 0)
        col = getattr(node, "col_offset", 0)
        self.events.append(
            ReplayEvent(kind, line, col, getattr(node, "end_lineno", None) or line, getattr(node, "end_col_offset", None) or col, message + detail, detail=detail or None)
        )

    def symbolic_view_raises(self, conditions: frozenset[Condition]) -> None:
        self.symbolic_event("view-incompatible", "view size is not compatible with input tensor's size and stride for every size", conditions)

    def symbolic_reshape_copies(self, name: str, conditions: frozenset[Condition]) -> None:
        self.symbolic_event("reshape-copies", f"`{name}` copies here: its input is not contiguous", conditions)


# Scope entries no Python name can collide with: "this scope is an `__init__` body", and
# "`self.<attr>` was assigned a tensor above this line of it".
IN_INIT = "<__init__>"


def assigned_marker(attr: str) -> str:
    return f"<self.{attr} assigned>"


class ScopeSnapshot:
    """The names of a scope chain as they are at one line (`Scope.lookup`, `env`, `parent`)."""

    __slots__ = ("__weakref__", "env", "parent")

    def __init__(self, scope: Any) -> None:
        # The innermost names are copied; the enclosing ones (the module's, complete once
        # function bodies run) are read live.
        self.env = dict(scope.env)
        self.parent = scope.parent

    def lookup(self, name: str) -> Any:
        value = self.env.get(name)
        if value is not None or self.parent is None:
            return value
        return self.parent.lookup(name)


class _NamesAtLine:
    """The names of one line, for a rendering done later. Weak references: the facts that
    carry the rendering live in the snapshot's own names, and the interpreter (kept by the
    `Analysis`) owns the snapshots, so a strong link would close a cycle and leave every
    analysis to the cyclic GC. Once the analysis is gone, nothing resolves (unknown, not
    wrong)."""

    __slots__ = ("_equal", "_interp", "_snapshot")

    def __init__(self, interp: Any, snapshot: ScopeSnapshot, equal: dict[int, Size]) -> None:
        self._interp = weakref.ref(interp)
        self._snapshot = weakref.ref(snapshot)
        self._equal = equal

    def resolve(self, path: Path) -> Size | None:
        interp, snapshot = self._interp(), self._snapshot()
        if interp is None or snapshot is None:
            return None
        # Through every equality proved so far (see `_names_here`).
        return interp.resolve_path(path, snapshot)  # type: ignore[no-any-return]

    def tensor_name(self, key: int, layout: object) -> str | None:
        interp, snapshot = self._interp(), self._snapshot()
        if interp is None or snapshot is None:
            return None
        return interp._tensor_name(key, layout, snapshot)  # type: ignore[no-any-return]


class LazyRendering:
    """A `RenderedLayout` computed on first use (see `TensorFact.rendered`)."""

    __slots__ = ("_args", "_value")

    def __init__(self, names: Any, layout: Any, assumes: Any, ctx: NameContext) -> None:
        self._args: tuple[Any, ...] | None = (names, layout, assumes, ctx)
        self._value: Any = None

    def resolve(self) -> Any:
        if self._args is not None:
            names, layout, assumes, ctx = self._args
            self._value = names.render_layout(layout, assumes, ctx)
            self._args = None
        return self._value


def infer_parameter_ranks(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    look_for_permute: bool = True,
    more: list[tuple[int, str, int]] | None = None,
    look_for_patterns: bool = False,
) -> dict[str, int]:
    """Ranks of parameters the body states at its top level before rebinding them:
    `B, T, C = x.size()` / `x.shape`, `x.permute(0, 2, 1)`, an einops pattern the parameter
    is given to (`rearrange(x, 'b n (h d) -> b h n d')`: any other rank raises), and `more` evidence of the same form
    (statement index, parameter, rank): the layers' (layer_ranks.py).

    Two passes so that most functions cost one look at their top-level statements: evidence
    first; only where there is some, whether the parameter was rebound before it."""
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    if not params:
        return {}
    evidence: list[tuple[int, str, int]] = list(more or ())  # (statement index, parameter, rank)
    for index, stmt in enumerate(fn.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], (ast.Tuple, ast.List)):
            target = stmt.targets[0]
            subject = shape_subject(stmt.value)
            if subject in params and not any(isinstance(e, ast.Starred) for e in target.elts):
                evidence.append((index, subject, len(target.elts)))
                continue
            spread = _spread_shape(stmt.value, len(target.elts)) if not any(isinstance(e, ast.Starred) for e in target.elts) else None
            if spread is not None and spread[0] in params:
                # `b, n, _, h = *x.shape, self.heads` (vit-pytorch): x has the dims left over.
                evidence.append((index, *spread))
                continue
        if not look_for_permute and not look_for_patterns:
            continue
        value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Assign, ast.Expr, ast.Return, ast.AugAssign, ast.AnnAssign)) else None
        if isinstance(value, ast.expr):
            for node in _spine(value):
                if look_for_patterns and isinstance(node, ast.Call):
                    evidence.extend((index, name, rank) for name, rank in pattern_ranks(node) if name in params)
                if look_for_permute and (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "permute"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in params
                    and node.args
                    and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args)
                ):
                    evidence.append((index, node.func.value.id, len(node.args)))
    if not evidence:
        return {}
    ranks: dict[str, int] = {}
    conflicts: set[str] = set()
    first_store: dict[str, int] = {}
    last_checked = 0
    for index, name, rank in sorted(evidence):
        for i in range(last_checked, index):
            for stored in _assigned_names(fn.body[i]) & params:
                first_store.setdefault(stored, i)
        last_checked = max(last_checked, index)
        if name in first_store:
            continue  # rebound before: the evidence is about another value
        if ranks.get(name, rank) != rank:
            conflicts.add(name)
        ranks[name] = rank
    return {k: v for k, v in ranks.items() if k not in conflicts and 0 < v <= 8}


def pattern_ranks(call: ast.Call) -> list[tuple[str, int]]:
    """(operand name, rank) for a bare-name operand whose rank an einops pattern fixes:
    `rearrange`/`reduce`/`repeat(x, pattern, ...)`. A pattern with an ellipsis fixes none."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else None
    args = call.args
    if name in EINOPS_FUNCTIONS and len(args) >= 2 and isinstance(args[0], ast.Name) and _is_str(args[1]):
        rank = einops_input_rank(args[1].value)  # type: ignore[attr-defined]
        return [(args[0].id, rank)] if rank is not None else []
    # einsum is not evidence here: an operand of unknown shape takes the sizes the other
    # operands give its letters there (symbolic_einops._with_equation_ranks), which names
    # of its own would lose.
    return []


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _spread_shape(value: ast.expr, targets: int) -> tuple[str, int] | None:
    """(x, rank) of `*x.shape, a, b` unpacked into `targets` names."""
    if not isinstance(value, ast.Tuple):
        return None
    starred = [e for e in value.elts if isinstance(e, ast.Starred)]
    if len(starred) != 1:
        return None
    subject = shape_subject(starred[0].value)
    rank = targets - (len(value.elts) - 1)
    return (subject, rank) if subject is not None and rank > 0 else None


def shape_subject(value: ast.expr) -> str | None:
    """`x` of `x.shape` / `x.size()` (what an unpacking `B, T, C = ...` gives the rank of)."""
    if isinstance(value, ast.Attribute) and value.attr == "shape" and isinstance(value.value, ast.Name):
        return value.value.id
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "size"
        and not value.args
        and isinstance(value.func.value, ast.Name)
    ):
        return value.func.value.id
    return None


def _spine(expr: ast.expr) -> list[ast.AST]:
    """The calls a statement's value is made of, down its method chain and into the
    arguments of each call (`x.permute(0, 2, 1).contiguous()`, `f(x.permute(0, 2, 1))`):
    where a parameter's rank shows, at a cost of a few nodes, not a walk of everything."""
    out: list[ast.AST] = []
    stack: list[ast.expr] = [expr]
    while stack and len(out) < 64:
        node = stack.pop()
        if isinstance(node, ast.Call):
            out.append(node)
            stack.append(node.func)
            stack.extend(a for a in node.args if isinstance(a, (ast.Call, ast.Attribute, ast.BinOp, ast.Subscript)))
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            stack.append(node.value)
        elif isinstance(node, ast.BinOp):
            stack.extend((node.left, node.right))
        elif isinstance(node, (ast.Tuple, ast.List)):
            stack.extend(node.elts)
    return out


def _assigned_names(stmt: ast.stmt) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
    return out


__all__ = ["SizesMixin", "SymSlice", "infer_parameter_ranks", "shape_subject", "size_value"]

