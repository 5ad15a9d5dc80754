"""Abstract values of the interpreter besides `TensorFact`.

Only what tensor facts need is modelled: literal constants (for sizes and flags),
references to torch callables, `nn` module instances built from literals, sequences of
tensors, and user classes whose `__init__` assigned modules. Everything else is `UNKNOWN`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Union

from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.facts import TensorFact, join_rendered, new_fact
from stridelens.server.analysis.layouts import Layout
from stridelens.server.analysis.sizes import SymExpr


class Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown()


@dataclass(frozen=True)
class Const:
    """A Python literal the analysis could fold (int, float, bool, str, None, tuples, slices)."""

    value: Any


@dataclass(frozen=True)
class SizeValue:
    """An integer the file does not spell out: `B` of `B, T, C = x.shape`, `C // n_head`.

    `certain`: known to be an int (it comes from a tensor's shape), not only used as one."""

    expr: SymExpr
    certain: bool = True
    # What the expression's algebra assumed (`C % n == 0` for `C // n`): `conditions.Condition`s.
    conditions: frozenset[Any] = frozenset()


@dataclass(frozen=True)
class Opaque:
    """An unknown value that a name path reaches: a parameter, `config.n_embd`, `self.n_head`.

    Unknown like `UNKNOWN`, except where the code uses it as a size: there it is an integer
    atom, named by its path (`root` tells apart two parameters of the same name)."""

    root: int
    path: tuple[str, ...]


@dataclass(frozen=True)
class Number:
    """A Python number whose value is unknown (`math.sqrt(d)`, `1.0 / scale`): a scalar
    operand, never a tensor. Computed from `atoms` (opaque values such as `dim`), it is a
    number only once each of them is known to be an int (`SymbolicOps.is_int`)."""

    atoms: frozenset[int] = frozenset()


NUMBER = Number()


@dataclass(frozen=True)
class TorchRef:
    """A name bound to something in torch: `torch`, `torch.nn.functional`, `torch.float16`."""

    path: str


@dataclass(frozen=True)
class GradContext:
    """A context manager or decorator switching grad mode: `torch.no_grad()` etc."""

    enabled: bool
    name: str


@dataclass
class ModuleValue:
    """An `nn` module instance built from literal arguments; the real module is built
    lazily on the meta device only when it is called with a known tensor."""

    path: str  # "torch.nn.Conv2d"
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    children: tuple[ModuleValue, ...] = ()
    line: int = 0
    built: Any = field(default=None, repr=False)
    training: bool = True
    # `nn.Sequential(*[layer for _ in range(n)])`: args holds the one layer, applied n >= 0 times.
    repeated: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class SeqValue:
    """A tuple/list whose items are known abstract values (e.g. `x.chunk(3)`)."""

    items: tuple[Value, ...]
    kind: str = "tuple"


@dataclass(frozen=True)
class ListOf:
    """A list of unknown length whose items share one abstract value (a comprehension)."""

    item: Value


@dataclass(frozen=True)
class DictValue:
    """A dict with string keys whose values are known abstract values: `dict(wte=nn.Embedding(..),
    h=nn.ModuleList(..))`, the argument of an `nn.ModuleDict` (which it then stands for)."""

    items: tuple[tuple[str, Value], ...]

    def get(self, key: str) -> Value | None:
        for k, v in self.items:
            if k == key:
                return v
        return None


@dataclass
class ClassInfo:
    """A user class: its methods and the attributes `__init__` assigned."""

    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    attributes: dict[str, Value] = field(default_factory=dict)
    is_module: bool = False  # subclasses nn.Module


@dataclass(frozen=True)
class InstanceValue:
    cls: ClassInfo
    # The layers this instance was built with, by `__init__` parameter (`PreNorm(dim,
    # Attention(...))`: `fn`): `self.fn = fn` is that layer for this instance, not any.
    init_layers: tuple[tuple[str, Value], ...] = ()

    def __hash__(self) -> int:
        return id(self.cls)


@dataclass(frozen=True)
class FunctionValue:
    node: ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, eq=False)
class ModuleChoice:
    """One of these modules, by a condition the analysis does not decide (`nn.AvgPool2d(s) if
    s > 1 else nn.Identity()`): calling it gives what every option's output agrees on."""

    options: tuple[ModuleValue | InstanceValue, ...]


Value = Union[  # noqa: UP007 - a runtime alias mypy must see as a union
    Unknown, Const, TorchRef, GradContext, ModuleValue, SeqValue, ListOf, TensorFact,
    ClassInfo, InstanceValue, FunctionValue, SizeValue, Opaque, Number, DictValue, ModuleChoice,
]


def join_facts(a: TensorFact, b: TensorFact, canon: Callable[[Layout], Layout] | None = None) -> TensorFact:
    """The fact true on both paths: fields that agree survive, others become unknown.
    `canon` writes a symbolic layout in the sizes proved equal so far (a block's output
    `(B, T, n_embd)` is its input's `(B, T, C)` once a Linear unified C with n_embd)."""
    if a is b:
        return a
    sym_a, sym_b = a.sym, b.sym
    if canon is not None and sym_a is not None and sym_b is not None and sym_a != sym_b:
        sym_a, sym_b = canon(sym_a), canon(sym_b)
    # Field by field, written out: this runs for every node of a body called from two sites.
    shape_same = a.shape == b.shape
    if not shape_same and (sym_a is None or sym_b is None):
        # Exact sizes on one path (or both): as a layout of those sizes, so the rank and the
        # sizes both paths agree on stay (`(2, 3)` and `(5, 3)`: `(?, 3)`).
        sym_a = sym_a if sym_a is not None else (Layout(a.shape, None, None) if a.shape is not None else None)
        sym_b = sym_b if sym_b is not None else (Layout(b.shape, None, None) if b.shape is not None else None)
    strides_same = a.strides == b.strides
    offset_same = a.storage_offset == b.storage_offset
    key_same = a.storage_key == b.storage_key
    return new_fact(
        shape=a.shape if shape_same else None,
        dtype=a.dtype if a.dtype == b.dtype else None,
        device=a.device if a.device == b.device else None,
        strides=a.strides if strides_same else None,
        storage_offset=a.storage_offset if offset_same else None,
        contiguous=a.contiguous if a.contiguous == b.contiguous else None,
        is_view=a.is_view if a.is_view == b.is_view else None,
        view_of=a.view_of if a.view_of == b.view_of else None,
        storage_numel=a.storage_numel if a.storage_numel == b.storage_numel else None,
        element_size=a.element_size if a.element_size == b.element_size else None,
        requires_grad=a.requires_grad if a.requires_grad == b.requires_grad else None,
        carries_graph=a.carries_graph if a.carries_graph == b.carries_graph else None,
        detached_from=a.detached_from if a.detached_from == b.detached_from else None,
        permuted_by=a.permuted_by if a.permuted_by == b.permuted_by else None,
        provenance=(
            a.provenance if a.provenance == b.provenance else tuple(p for p in a.provenance if p in b.provenance)
        ),  # true on both paths
        storage_key=a.storage_key if key_same else None,
        meta=a.meta if shape_same and strides_same and offset_same and key_same else None,
        sym=sym_a if sym_a == sym_b else join_layouts(sym_a, sym_b),
        assumes=a.assumes | b.assumes,
        rendered=join_rendered(a.rendered, b.rendered),
        # Grad facts one path only assumed (the default grad mode) stay unstated after a join.
        grad_unknown=a.grad_unknown or b.grad_unknown,
        grad_assumed=a.grad_assumed or b.grad_assumed,
    )


def join_layouts(a: Layout | None, b: Layout | None) -> Layout | None:
    """What two symbolic layouts share: the shape when it is the same (fused and unfused
    attention both give `(B, nh, T, hs)`), the strides and offset only where those agree too."""
    if a is None or b is None:
        return None
    if a.shape != b.shape:
        if len(a.shape) != len(b.shape):
            return None
        # The same rank: the sizes both sides agree on, and one nobody can name for the others.
        return Layout(tuple(x if x == y else sz.anonymous() for x, y in zip(a.shape, b.shape, strict=True)), None, None)
    if a.strides != b.strides:
        return Layout(a.shape, None, None)
    return Layout(a.shape, a.strides, a.offset if a.offset == b.offset else None)


def join_values(a: Value, b: Value, canon: Callable[[Layout], Layout] | None = None) -> Value:
    if a is b:
        return a
    if isinstance(a, TensorFact) and isinstance(b, TensorFact):
        return join_facts(a, b, canon)
    if isinstance(a, TensorFact) or isinstance(b, TensorFact):
        # A tensor on one path only: keep that it is a tensor, nothing else.
        return TensorFact()
    if isinstance(a, SeqValue) and isinstance(b, SeqValue) and len(a.items) == len(b.items):
        return SeqValue(tuple(join_values(x, y, canon) for x, y in zip(a.items, b.items, strict=False)), a.kind)
    if grown_list(a) and grown_list(b) and (isinstance(a, ListOf) or isinstance(b, ListOf)):
        # A list before and after a loop appended to it: some number of items like these.
        return appended(a, seq_items(b) or (), canon)  # type: ignore[arg-type]
    try:
        if a == b:
            return a
    except Exception:  # noqa: BLE001 - odd constants compare badly
        pass
    choice = module_choice(a, b)
    return UNKNOWN if choice is None else choice


MAX_MODULE_OPTIONS = 8


def module_choice(a: Value, b: Value) -> ModuleChoice | None:
    """One of the layers of `a` and `b` (each a layer, an instance of the file's own nn.Module,
    or a choice already): ConvNeXt's `downsample_layers`, a stem then three other Sequentials.
    None when either is something else, or past MAX_MODULE_OPTIONS."""
    options: list[ModuleValue | InstanceValue] = []
    for value in (a, b):
        if isinstance(value, ModuleChoice):
            items: tuple[Any, ...] = value.options
        elif isinstance(value, ModuleValue) or (isinstance(value, InstanceValue) and value.cls.is_module):
            items = (value,)
        else:
            return None
        options.extend(o for o in items if not any(o is seen for seen in options))
    return ModuleChoice(tuple(options)) if len(options) <= MAX_MODULE_OPTIONS else None


def grown_list(v: Value) -> bool:
    """A list the code may append to: a list display (`[]` included), or a list of unknown
    length."""
    return isinstance(v, ListOf) or (isinstance(v, SeqValue) and v.kind == "list") or is_empty_list(v)


def is_empty_list(v: Value) -> bool:
    """`ys = []`, before the loop that appends to it."""
    return isinstance(v, Const) and type(v.value) is list and not v.value


def seq_items(v: Value) -> tuple[Value, ...] | None:
    """The items of a tuple or list the analysis knows (a `ListOf`: its one item), else None."""
    if isinstance(v, ListOf):
        return (v.item,)
    return v.items if isinstance(v, SeqValue) else None


def appended(container: SeqValue | ListOf, items: tuple[Value, ...], canon: Callable[[Layout], Layout] | None = None) -> ListOf:
    """`container` after `.append(item)` / `.extend(items)`, run any number of times (a
    loop's body): a list of unknown length whose items are like all of these."""
    every = [*(seq_items(container) or ()), *items]
    joined = every[0]
    for item in every[1:]:
        joined = join_values(joined, item, canon)
    return ListOf(joined)


def forget_layout(fact: TensorFact) -> TensorFact:
    """Keep only the facts that hold whatever the sizes are."""
    return replace(
        fact,
        shape=None,
        strides=None,
        storage_offset=None,
        contiguous=None,
        storage_numel=None,
        meta=None,
        sym=None,
        assumes=frozenset(),
        rendered=None,
    )
