"""Einstein-notation ops: einops' `rearrange` / `repeat` / `reduce` (functions and the
`einops.layers.torch` modules) and `torch.einsum`, over literal and symbolic sizes.

einops on torch is a fixed sequence of torch ops (`einops._apply_recipe`): `reshape` to the
elementary axes (when the input has groups), `permute`, a reduction (`amax`/`amin`/`sum`/
`mean`, or one `prod`/`any`/`all` per axis), `unsqueeze` + `expand` for new axes (`repeat`),
and a final `reshape` to the output's groups; steps with nothing to do are skipped, so an
identity pattern returns its input. `recipe` computes those steps from the pattern and the
input's sizes (ints, or `SymExpr`s: `'b n (h d) -> b h n d', h=self.heads` splits `C` into
`self.heads` and `C // self.heads`, under `C % self.heads == 0`), and `einops_call` replays them
through the interpreter's own `tensor_method`, so that each step gets exactly the verdict
(view or copy, contiguity, conditions) the same torch op written out would get: on meta
tensors where sizes are literal, with the stride algebra elsewhere.

`einsum_shape` gives the result shape of an einsum equation (explicit or implicit output,
`...`, size-1 broadcasting); the result's layout and whether it is a view depend on the
contraction path torch picks, so they are not stated.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.conditions import Condition
from stridelens.server.analysis.facts import TensorFact, new_fact, with_fields
from stridelens.server.analysis.layouts import Layout
from stridelens.server.analysis.sizes import Size, SymExpr
from stridelens.server.analysis.values import (
    UNKNOWN,
    Const,
    ModuleValue,
    Opaque,
    SeqValue,
    SizeValue,
    Value,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interp_support import Scope

ELLIPSIS = "…"
REDUCTIONS = ("min", "max", "sum", "mean", "prod", "any", "all")
# einops' functions and layers (the layers are built in `__init__`, called in `forward`).
FUNCTIONS = frozenset({"rearrange", "repeat", "reduce"})
LAYERS = {"Rearrange": "rearrange", "Reduce": "reduce", "Repeat": "repeat"}


class PatternError(ValueError):
    """A pattern einops would reject, or one not modelled here."""


class _Anonymous:
    """A numbered axis other than 1 (`'b n -> b n 3'`): each one is its own axis."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


Axis = Any  # str | _Anonymous


@dataclass(frozen=True)
class Side:
    composition: tuple[Any, ...]  # each: a list of axes (a group; `[]` for `1`), or ELLIPSIS
    identifiers: frozenset[Any]
    has_ellipsis: bool


def parse_side(text: str) -> Side:
    """One side of a pattern, as einops' `ParsedExpression` reads it."""
    if "." in text:
        if text.count("...") != 1 or text.count(".") != 3:
            raise PatternError("dots only inside one ellipsis")
        text = text.replace("...", ELLIPSIS)
    composition: list[Any] = []
    identifiers: set[Any] = set()
    group: list[Any] | None = None
    has_ellipsis = False

    def add(name: str) -> None:
        nonlocal has_ellipsis
        if name in identifiers:
            raise PatternError(f"duplicate axis {name}")
        if name == ELLIPSIS:
            has_ellipsis = True
            identifiers.add(ELLIPSIS)
            (composition.append(ELLIPSIS) if group is None else group.append(ELLIPSIS))
            return
        if name.isdecimal():
            if int(name) == 1:
                if group is None:
                    composition.append([])
                return
            axis: Any = _Anonymous(int(name))
        elif name.isidentifier() and not name.startswith("_"):
            axis = name
        else:
            raise PatternError(f"invalid axis {name}")
        identifiers.add(axis)
        (composition.append([axis]) if group is None else group.append(axis))

    current = ""
    for char in text:
        if char in "() ":
            if current:
                add(current)
            current = ""
            if char == "(":
                if group is not None:
                    raise PatternError("nested parentheses")
                group = []
            elif char == ")":
                if group is None:
                    raise PatternError("unbalanced parentheses")
                composition.append(group)
                group = None
        elif char.isalnum() or char in ("_", ELLIPSIS):
            current += char
        else:
            raise PatternError(f"unknown character {char!r}")
    if group is not None:
        raise PatternError("unbalanced parentheses")
    if current:
        add(current)
    return Side(tuple(composition), frozenset(identifiers), has_ellipsis)


@dataclass(frozen=True)
class Recipe:
    """The torch ops einops runs, in order; None / empty where a step is skipped."""

    init_shape: tuple[Size, ...] | None
    permutation: tuple[int, ...] | None
    reduced: tuple[int, ...]
    added: tuple[tuple[int, Size], ...]  # (position, length), positions increasing
    n_after_adding: int
    final_shape: tuple[Size, ...] | None
    conditions: frozenset[Condition]

    @property
    def identity(self) -> bool:
        return (
            self.init_shape is None and self.permutation is None and not self.reduced
            and not self.added and self.final_shape is None
        )


def recipe(pattern: str, operation: str, shape: tuple[Size, ...], axes: dict[str, Size]) -> Recipe:
    """einops' `_prepare_transformation_recipe` + `_reconstruct_from_shape` over sizes."""
    left_text, arrow, right_text = pattern.partition("->")
    if not arrow or "->" in right_text:
        raise PatternError("one '->' expected")
    left, right = parse_side(left_text), parse_side(right_text)
    if any(item != ELLIPSIS and ELLIPSIS in item for item in left.composition):
        raise PatternError("ellipsis inside parentheses on the left")
    if right.has_ellipsis and not left.has_ellipsis:
        raise PatternError("ellipsis on the right only")
    left_ids = {a for a in left.identifiers if a != ELLIPSIS}
    right_ids = {a for a in right.identifiers if a != ELLIPSIS}
    if operation == "rearrange":
        if any(isinstance(a, _Anonymous) for a in left_ids | right_ids) or left_ids != right_ids:
            raise PatternError("rearrange needs the same axes on both sides")
    elif operation == "repeat":
        if left_ids - right_ids:
            raise PatternError("repeat cannot drop axes")
        if {a for a in right_ids - left_ids if not isinstance(a, _Anonymous)} - set(axes):
            raise PatternError("repeat needs sizes for new axes")
    elif right_ids - left_ids:
        raise PatternError("reduce cannot add axes")
    # Expand the ellipsis into numbered axes.
    ndim = len(shape)
    if left.has_ellipsis:
        n_ell = ndim - (len(left.composition) - 1)
        if n_ell < 0:
            raise PatternError("too few dims")
        ell = [f"{ELLIPSIS}{i}" for i in range(n_ell)]
        left_comp: list[list[Any]] = []
        for item in left.composition:
            left_comp.extend([[a] for a in ell] if item == ELLIPSIS else [list(item)])
        right_comp: list[list[Any]] = []
        for item in right.composition:
            if item == ELLIPSIS:
                right_comp.extend([a] for a in ell)
            else:
                right_comp.append([b for a in item for b in (ell if a == ELLIPSIS else [a])])
        left_ids |= set(ell)
        if right.has_ellipsis:
            right_ids |= set(ell)
    else:
        if ndim != len(left.composition):
            raise PatternError(f"expected {len(left.composition)} dims, got {ndim}")
        left_comp = [list(item) for item in left.composition]
        right_comp = [list(item) for item in right.composition]
    for name in axes:
        if name not in left_ids and name not in right_ids:
            raise PatternError(f"axis {name} is not used")
    # Elementary axes: the input's in order, then the new ones.
    lengths: dict[Any, Size | None] = {}
    for group in left_comp:
        for a in group:
            lengths[a] = a.value if isinstance(a, _Anonymous) else axes.get(a)
    left_order = list(lengths)
    for group in right_comp:
        for a in group:
            if a not in lengths:
                lengths[a] = a.value if isinstance(a, _Anonymous) else axes.get(a)
    conditions: set[Condition] = set()
    need_init = False
    for group, length in zip(left_comp, shape, strict=True):
        unknown = [a for a in group if lengths[a] is None]
        known = sz.product(lengths[a] for a in group if lengths[a] is not None)  # type: ignore[misc]
        if known is None or len(unknown) > 1:
            raise PatternError("cannot infer sizes")
        if unknown:
            if len(group) == 1:
                lengths[unknown[0]] = length
            else:
                q, _needs = sz.floordiv(length, known)
                if q is None:
                    raise PatternError("cannot divide")
                if isinstance(length, int) and isinstance(known, int) and length % known:
                    raise PatternError("shape mismatch")
                # (`_needs`: the length must be a multiple of `known`; einops raises where it
                # is not, so past the call it is, and no condition is said.)
                lengths[unknown[0]] = q
        elif isinstance(length, int) and isinstance(known, int) and length != known:
            raise PatternError("shape mismatch")
        if len(group) != 1:
            need_init = True
    size_of: dict[Any, Size] = {a: v for a, v in lengths.items() if v is not None}
    if len(size_of) != len(lengths):
        raise PatternError("unknown axis length")
    right_flat = [a for group in right_comp for a in group]
    reduced_axes = [a for a in left_order if a not in right_ids]
    order = [a for a in right_flat if a in left_ids] + reduced_axes
    permutation = tuple(left_order.index(a) for a in order)
    added = tuple((i, size_of[a]) for i, a in enumerate(right_flat) if a not in left_ids)
    final: list[Size] = []
    need_final = False
    for group in right_comp:
        total = sz.product(size_of[a] for a in group)
        if total is None:
            raise PatternError("size too large to track")
        final.append(total)
        need_final = need_final or len(group) != 1
    first_reduced = len(order) - len(reduced_axes)
    return Recipe(
        init_shape=tuple(size_of[a] for a in left_order) if need_init else None,
        permutation=None if permutation == tuple(range(len(permutation))) else permutation,
        reduced=tuple(range(first_reduced, len(order))),
        added=added,
        n_after_adding=len(added) + len(order),
        final_shape=tuple(final) if need_final else None,
        conditions=frozenset(conditions),
    )


# ------------------------------------------------------------------ running it
def einops_call(interp: Any, op: str, args: list[Value], kwargs: dict[str, Value], node: ast.AST, scope: Scope) -> Value:
    """`rearrange(x, pattern, **sizes)` & co., followed through the torch ops einops runs."""
    if not args or not isinstance(args[0], TensorFact):
        return UNKNOWN
    tensor = args[0]
    rest, kwargs = list(args[1:]), dict(kwargs)
    pattern = rest.pop(0) if rest else kwargs.pop("pattern", None)
    reduction: Value | None = None
    if op == "reduce":
        reduction = rest.pop(0) if rest else kwargs.pop("reduction", None)
    fallback = _fallback(interp, tensor, op, reduction, scope)
    if rest or not isinstance(pattern, Const) or not isinstance(pattern.value, str):
        return fallback
    if op == "reduce" and not (isinstance(reduction, Const) and reduction.value in REDUCTIONS):
        return fallback
    axes: dict[str, Size] = {}
    axis_conditions: frozenset[Condition] = frozenset()
    for name, value in kwargs.items():
        size = interp.symops.size_of(value)
        if size is None:
            # An axis length the analysis cannot name (`p1=patch_height` of a tuple it lost):
            # an int in every run that does not raise, so the rank and the other sizes stay.
            size = sz.anonymous()
        else:
            axis_conditions |= interp.symops.conditions_of([value])
        axes[name] = size
    interp.symops.mark_int([v for v in kwargs.values() if interp.symops.size_of(v) is not None])
    shape = tensor.known_shape
    if shape is None and tensor.meta is None and "." not in pattern.value:
        # The pattern states the input's rank, as `x.permute(0, 2, 1)` does.
        try:
            rank = len(parse_side(pattern.value.partition("->")[0]).composition)
        except PatternError:
            return fallback
        first = node.args[0] if isinstance(node, ast.Call) and node.args else None
        holder = first.id if isinstance(first, ast.Name) else None
        tensor = interp.with_rank(tensor, rank, holder)
        if holder is not None:
            interp._rebind_in_place(holder, tensor, scope)
        shape = tensor.known_shape
    if shape is None:
        return fallback
    try:
        steps = recipe(pattern.value, op, tuple(shape), axes)
    except (PatternError, lay.Undecided, ZeroDivisionError):
        return fallback
    if steps.identity:
        return tensor
    symbolic = any(isinstance(s, SymExpr) for s in (*(steps.init_shape or ()), *(steps.final_shape or ()), *(v for _, v in steps.added)))
    current: TensorFact = tensor
    if symbolic and current.meta is not None:
        # Replay cannot take symbolic sizes; the stride algebra is exact on the known layout.
        layout = Layout(tuple(current.shape or ()), tuple(current.strides) if current.strides is not None else None, current.storage_offset)
        current = with_fields(current, meta=None, sym=layout)
    conditions = steps.conditions | axis_conditions
    text = f"{op}({pattern.value!r})"
    saved_text = interp._call_texts.get(node)
    interp._call_texts[node] = text
    events = len(interp.events)
    try:
        out = _run(interp, current, steps, op, reduction, conditions, node, scope)
    finally:
        # The steps are einops' own: what they would report belongs to the call as a whole.
        del interp.events[events:]
        if saved_text is None:
            interp._call_texts.pop(node, None)
        else:
            interp._call_texts[node] = saved_text
    if not isinstance(out, TensorFact) or (out.shape is None and out.sym is None):
        return fallback
    # One note per kind: the steps all carry the call's text.
    notes = tuple(dict.fromkeys(out.provenance))
    return with_fields(out, provenance=notes)


def _run(
    interp: Any, t: TensorFact, steps: Recipe, op: str, reduction: Value | None,
    conditions: frozenset[Condition], node: ast.AST, scope: Scope,
) -> Value:
    def call(x: Value, name: str, call_args: list[Value], call_kwargs: dict[str, Value] | None = None) -> Value:
        if not isinstance(x, TensorFact):
            return UNKNOWN
        return interp.tensor_method(x, name, call_args, call_kwargs or {}, node, scope)

    x: Value = t
    if steps.init_shape is not None:
        x = call(x, "reshape", [_sizes(steps.init_shape, conditions)])
    if steps.permutation is not None:
        x = call(x, "permute", [Const(steps.permutation)])
    if steps.reduced:
        kind = str(reduction.value) if isinstance(reduction, Const) else ""
        if kind in ("min", "max", "sum", "mean"):
            name = {"min": "amin", "max": "amax"}.get(kind, kind)
            x = call(x, name, [], {"dim": Const(steps.reduced)})
        else:
            for d in sorted(steps.reduced, reverse=True):
                x = call(x, kind, [], {"dim": Const(d)})
    if steps.added:
        repeats: list[Size] = [-1] * steps.n_after_adding
        for position, length in steps.added:
            x = call(x, "unsqueeze", [Const(position)])
            repeats[position] = length
        x = call(x, "expand", [_sizes(tuple(repeats), conditions)])
    if steps.final_shape is not None:
        x = call(x, "reshape", [_sizes(steps.final_shape, conditions)])
    return x


def _sizes(shape: tuple[Size, ...], conditions: frozenset[Condition]) -> Value:
    if all(isinstance(s, int) for s in shape):
        return Const(tuple(shape))
    return SeqValue(tuple(Const(s) if isinstance(s, int) else SizeValue(s, True, conditions) for s in shape))


def _fallback(interp: Any, tensor: TensorFact, op: str, reduction: Value | None, scope: Scope) -> TensorFact:
    """What holds whatever the sizes: dtype and device carried; autograd as for any op on it."""
    grad = tensor.requires_grad if scope.grad_enabled else (False if tensor.requires_grad is False else None)
    dtype = tensor.dtype
    if op == "reduce" and not (isinstance(reduction, Const) and reduction.value in ("min", "max", "sum", "mean", "prod")):
        dtype = None
    return new_fact(dtype=dtype, device=tensor.device, requires_grad=grad, carries_graph=grad if grad is not None else None)


def module_call(interp: Any, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], node: ast.AST, scope: Scope) -> Value:
    """An `einops.layers.torch.Rearrange(...)` module applied to a tensor."""
    op = LAYERS.get(module.name)
    if op is None or len(args) != 1 or kwargs:
        return UNKNOWN
    return einops_call(interp, op, [args[0], *module.args], dict(module.kwargs), node, scope)


# ------------------------------------------------------------------ torch.einsum
def einsum_shape(equation: str, shapes: list[tuple[Size, ...]]) -> tuple[Size, ...] | None:
    """The shape of `torch.einsum(equation, *operands)`, or None when it depends on sizes the
    code does not fix (two different symbolic sizes for one letter)."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    letters: dict[str, list[Size]] = {}
    counts: dict[str, int] = {}
    ellipsis_shapes: list[tuple[Size, ...]] = []
    for term, shape in zip(terms, shapes, strict=True):
        if term.count("...") > 1 or "." in term.replace("...", ""):
            return None
        head, dots, tail = term.partition("...")
        if not (head + tail).isalpha() and (head + tail):
            return None
        n_ell = len(shape) - len(head) - len(tail)
        if (dots and n_ell < 0) or (not dots and n_ell != 0):
            return None
        if dots:
            ellipsis_shapes.append(tuple(shape[len(head) : len(head) + n_ell]))
        for letter, size in (*zip(head, shape[: len(head)], strict=True), *zip(tail, shape[len(shape) - len(tail) :], strict=True)):
            letters.setdefault(letter, []).append(size)
            counts[letter] = counts.get(letter, 0) + 1
    if arrow:
        head, dots, tail = out.partition("...")
        if not (head + tail).isalpha() and (head + tail):
            return None
        if len(set(head + tail)) != len(head + tail) or any(c not in letters for c in head + tail):
            return None
    else:
        # Implicit output: the ellipsis dims, then the letters used once, in order.
        dots = "..." if ellipsis_shapes else ""
        head, tail = "", "".join(sorted(c for c, n in counts.items() if n == 1))
    try:
        ell = lay.broadcast_shapes(*ellipsis_shapes, undecided=sz.anonymous) if ellipsis_shapes else ()
    except (lay.Undecided, ValueError):
        return None
    sizes: list[Size] = []
    for c in head:
        s = _letter_size(letters[c])
        if s is None:
            return None
        sizes.append(s)
    result: list[Size] = [*sizes, *(ell if dots else ())]
    for c in tail:
        s = _letter_size(letters[c])
        if s is None:
            return None
        result.append(s)
    return tuple(result)


def letters_equation(pattern: str) -> str | None:
    """einops.einsum's `'b l d_in, d_in n -> b l d_in n'` as torch.einsum's `'abc,cd->abcd'`."""
    lhs, arrow, rhs = pattern.partition("->")
    if not arrow:
        return None
    letters: dict[str, str] = {}
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def term(text: str) -> str | None:
        out = []
        for word in text.split():
            if word == "...":
                out.append("...")
                continue
            if not word.isidentifier():
                return None
            if word not in letters:
                if len(letters) >= len(alphabet):
                    return None
                letters[word] = alphabet[len(letters)]
            out.append(letters[word])
        return "".join(out)

    terms = [term(t) for t in lhs.split(",")]
    out = term(rhs)
    if out is None or any(t is None for t in terms):
        return None
    return ",".join(t for t in terms if t is not None) + "->" + out


def _with_equation_ranks(equation: str, shapes: list[tuple[Size, ...] | None]) -> list[tuple[Size, ...] | None]:
    """An operand of unknown shape has the rank its term spells (`'b i d'`: 3 dims) in every
    run past the call: its sizes are the other operands' for the same letter, else unnamed."""
    if all(s is not None for s in shapes):
        return shapes
    terms = equation.replace(" ", "").partition("->")[0].split(",")
    if len(terms) != len(shapes):
        return shapes
    known: dict[str, Size] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if shape is not None and "." not in term and len(term) == len(shape):
            for letter, size in zip(term, shape, strict=True):
                known.setdefault(letter, size)
    out: list[tuple[Size, ...] | None] = []
    for term, shape in zip(terms, shapes, strict=True):
        if shape is None and term.isalpha():
            for letter in term:
                known.setdefault(letter, sz.anonymous())
            shape = tuple(known[letter] for letter in term)
        out.append(shape)
    return out


def _letter_size(found: list[Size]) -> Size | None:
    """One letter's size: the operands' sizes agree, or broadcast from 1."""
    distinct = {s for s in found if not (isinstance(s, int) and s == 1)}
    if not distinct:
        return 1
    if len(distinct) == 1:
        return distinct.pop()
    # Sizes that may each be 1 or equal (the op ran): the result's has no name.
    return sz.anonymous()


def einsum_result(symops: Any, args: list[Value], scope: Any) -> TensorFact | None:
    """`torch.einsum(eq, a, b, ...)` (or `einsum(eq, [a, b])`) with symbolic sizes: the shape,
    the dtype when the operands agree; layout and view-ness unknown."""
    if not args or not isinstance(args[0], Const) or not isinstance(args[0].value, str):
        return None
    operands = list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], SeqValue):
        operands = list(operands[0].items)
    # A parameter passed to einsum is a tensor (of unknown shape).
    tensors: list[TensorFact] = []
    for o in operands:
        if isinstance(o, Opaque) and len(o.path) == 1:
            o = symops.interp.opaque_tensor(o)
        if not isinstance(o, TensorFact):
            return None
        tensors.append(o)
    if not tensors:
        return None
    dtypes = {t.dtype for t in tensors}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    shapes = _with_equation_ranks(args[0].value, [t.known_shape for t in tensors])
    shape = einsum_shape(args[0].value, shapes) if all(s is not None for s in shapes) else None  # type: ignore[arg-type]
    if shape is None:
        grad = symops.grad_of(tensors, scope)
        return new_fact(dtype=dtype, device=tensors[0].device, requires_grad=grad, carries_graph=grad)
    out = symops.fresh(shape, tensors[0], tensors, scope, dtype=dtype, contiguous=False)
    # torch returns a view for some equations (`_base` set), a new tensor for others.
    return with_fields(out, is_view=None, storage_key=None, contiguous=None)  # type: ignore[no-any-return]
