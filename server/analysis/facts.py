"""What the analysis knows about a tensor-valued expression.

A `TensorFact` is the abstract value of the interpreter. Every field may be `None`,
meaning *unknown*: the engine never guesses. Exact layout fields (shape, strides,
storage_offset, contiguous) come from replaying the op on a meta tensor; the
symbolic fields (view_of, carries_graph, detached_from, permuted_by) survive where
sizes are unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stridelens.i18n import N_, tr

if TYPE_CHECKING:
    from stridelens.server.analysis.sizes import Size


@dataclass(frozen=True)
class Provenance:
    """Why a fact holds: the op that made it so, and where."""

    what: str  # e.g. "non-contiguous", "view of `a`", "copy"
    because: str  # e.g. "permute(0, 2, 1)"
    line: int  # 1-based

    def render(self) -> str:
        # The interpreter writes notes in English; they are translated as they are shown.
        return tr("{what}: {because} at line {line}").format(
            what=_note_kind(self.what), because=_note_cause(self.because), line=self.line
        )


def _note_kind(what: str) -> str:
    """One of NOTE_KINDS, or `copy (1.5 KiB)`."""
    if what.startswith("copy (") and what.endswith(")"):
        return tr("copy ({size})").format(size=what[len("copy (") : -1])
    return tr(what)


def _note_cause(because: str) -> str:
    """The op of a note: code stays as it is, the words around it are translated."""
    for suffix, template in _CAUSE_SUFFIXES:
        if because.endswith(suffix) and len(because) > len(suffix):
            return tr(template).format(op=because[: -len(suffix)])
    if because.startswith("indexing ["):
        return tr("indexing {index}").format(index=because[len("indexing ") :])
    op, sep, device = because.partition("(...) to ")
    if sep and op.startswith("."):
        return tr("{op} to {device}").format(op=op + "(...)", device=device)
    return because


_CAUSE_SUFFIXES = (
    (" of a non-contiguous tensor", N_("{op} of a non-contiguous tensor")),
    (" forward", N_("{op} forward")),
)


# The kinds of provenance notes (`with_note(what, ...)`), marked for the catalogue.
NOTE_KINDS = (
    N_("shares storage, no autograd"),
    N_("view"),
    N_("new tensor"),
    N_("copy"),
    N_("non-contiguous"),
    N_("non-contiguous unless the moved dims have size 1"),
    N_("detached, shares storage"),
    N_("view, no copy"),
    N_("non-contiguous view"),
    N_("view (shares storage)"),
    N_("shape differs between calls"),  # interp_support.CALLS_DIFFER
    N_("raises at run time"),
)


@dataclass(frozen=True)
class RenderedLayout:
    """Symbolic sizes as Python expressions over names visible at one line (`"B"`,
    `"3 * C"`, `"x.shape[0]"`), or None where some size has no such name (in `shape`, the
    entry: the rank is known even where a size has no name)."""

    shape: tuple[int | str | None, ...] | None
    strides: tuple[int | str, ...] | None
    offset: int | str | None
    assumes: tuple[str, ...] = ()
    # False when a condition of the layout verdicts cannot be written in the user's names:
    # then strides, offset and contiguity are not stated.
    layout_ok: bool = True


def join_rendered(a: Any, b: Any) -> Any:
    """The rendering true of both facts: written out now when both are, else on first use
    (a function body called from many sites joins its facts at every node, and most joined
    facts are never shown)."""
    if a is None or b is None:
        return None
    if isinstance(a, RenderedLayout) and isinstance(b, RenderedLayout):
        return _join_written(a, b)
    return _JoinedRendering(a, b)


def _written(x: Any) -> RenderedLayout | None:
    return x if x is None or isinstance(x, RenderedLayout) else x.resolve()  # type: ignore[no-any-return]


def _join_written(a: RenderedLayout | None, b: RenderedLayout | None) -> RenderedLayout | None:
    if a is None or b is None:
        return None
    if a == b:
        return a
    return RenderedLayout(
        _join_shape(a.shape, b.shape),
        a.strides if a.strides == b.strides else None,
        a.offset if a.offset == b.offset else None,
        tuple(sorted(set(a.assumes) | set(b.assumes))),
        a.layout_ok and b.layout_ok and a.strides == b.strides,
    )


def _join_shape(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """Two written shapes of one rank: the sizes both say, None (unstated) where they differ."""
    if a is None or b is None or len(a) != len(b):
        return None
    if a == b:
        return a
    return tuple(x if x == y else None for x, y in zip(a, b, strict=True))


class _JoinedRendering:
    """`join_rendered` of two renderings, at least one not yet written out."""

    __slots__ = ("_parts", "_value")

    def __init__(self, a: Any, b: Any) -> None:
        self._parts: tuple[Any, Any] | None = (a, b)
        self._value: RenderedLayout | None = None

    def resolve(self) -> RenderedLayout | None:
        if self._parts is not None:
            a, b = self._parts
            self._value = _join_written(_written(a), _written(b))
            self._parts = None
        return self._value


@dataclass(frozen=True)
class TensorFact:
    shape: tuple[int, ...] | None = None
    dtype: str | None = None  # "float32", ...
    device: str | None = None  # "cpu", "cuda", ...
    strides: tuple[int, ...] | None = None
    storage_offset: int | None = None
    contiguous: bool | None = None
    is_view: bool | None = None
    # The variable (as written in the source) whose storage this tensor shares.
    view_of: str | None = None
    # Number of elements of the storage this tensor looks into, when known.
    storage_numel: int | None = None
    element_size: int | None = None
    requires_grad: bool | None = None
    carries_graph: bool | None = None
    detached_from: str | None = None
    # Set when a permute/transpose-like op reordered dims (kept even when sizes are
    # unknown): "permute(0, 2, 1)".
    permuted_by: str | None = None
    provenance: tuple[Provenance, ...] = ()
    # Identity of the abstract storage: tensors with equal keys share memory.
    storage_key: int | None = None
    # The replayed meta tensor, when there is one (never leaves the engine's process).
    meta: Any = field(default=None, compare=False, repr=False)
    # Symbolic sizes (`layouts.Layout`) where the file does not spell them out, with the
    # conditions (`conditions.Condition`) its layout verdicts hold under.
    sym: Any = None
    assumes: frozenset[Any] = frozenset()
    # The symbolic fields written in the user's names at the node it was recorded for.
    # (A `LazyRendering` until first asked: see `layout_text`.)
    rendered: Any = field(default=None, compare=False)
    # Set where requires_grad/carries_graph came from the default grad mode of a function
    # body: rules may use them, users are not told them (a caller may run it under no_grad).
    grad_unknown: bool = field(default=False, compare=False)
    # The grad facts hold when autograd is on (a forward whose callers may run it under
    # no_grad): the condition, in the file's names (`"torch.is_grad_enabled()"`), else None.
    grad_assumed: str | None = field(default=None, compare=False)
    # The view/copy verdict itself holds under `assumes` (a reshape of permuted symbolic
    # sizes copies unless one is 1): stated only where they can all be written.
    view_conditional: bool = field(default=False, compare=False)

    @property
    def known_layout(self) -> bool:
        return self.shape is not None and self.strides is not None

    @property
    def numel(self) -> int | None:
        if self.shape is None:
            return None
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        if n is None or self.element_size is None:
            return None
        return n * self.element_size

    @property
    def storage_nbytes(self) -> int | None:
        if self.storage_numel is None or self.element_size is None:
            return None
        return self.storage_numel * self.element_size

    def with_note(self, what: str, because: str, line: int) -> TensorFact:
        return with_fields(self, provenance=(*self.provenance, Provenance(what, because, line)))

    def notes(self, moved: Callable[[Provenance], Provenance] | None = None) -> list[str]:
        """The "why" notes as text; `moved` relocates each first (a notebook cell's lines)."""
        return [(moved(p) if moved is not None else p).render() for p in self.provenance]

    @property
    def layout_text(self) -> RenderedLayout | None:
        """`rendered`, written out on first use."""
        return _written(self.rendered)

    @property
    def known_shape(self) -> tuple[Size, ...] | None:
        """The shape as sizes: the symbolic layout's where the fact has one, else the exact one."""
        return self.sym.shape if self.sym is not None else self.shape  # type: ignore[no-any-return]

    @property
    def display_shape(self) -> tuple[int | str | None, ...] | None:
        """The shape, with symbolic sizes as expressions over the user's names; an entry is
        None where that size has no name here (the rank is still known)."""
        if self.shape is not None:
            return self.shape
        text = self.layout_text
        return text.shape if text is not None else None

    @property
    def full_display_shape(self) -> tuple[int | str, ...] | None:
        """`display_shape` when every size in it has a name, else None."""
        shape = self.display_shape
        return None if shape is None or None in shape else shape  # type: ignore[return-value]

    @property
    def display_strides(self) -> tuple[int | str, ...] | None:
        if self.strides is not None:
            return self.strides
        text = self.layout_text
        return text.strides if text is not None else None

    @property
    def display_offset(self) -> int | str | None:
        if self.storage_offset is not None:
            return self.storage_offset
        text = self.layout_text
        return text.offset if text is not None else None

    @property
    def stated_contiguous(self) -> bool | None:
        """`contiguous` as stated to users: a symbolic verdict needs its conditions named."""
        if self.meta is None and self.assumes:
            # The verdict holds under its conditions (`x.is_contiguous()`: a channels_last
            # input gives a channels_last conv output): stated only where they can be written.
            text = self.layout_text
            if text is None or not text.layout_ok:
                return None
        return self.contiguous

    @property
    def stated_is_view(self) -> bool | None:
        """`is_view` as stated to users: a symbolic view/copy verdict holds under the same
        conditions as the layout (`b != 1` for a merge of permuted dims), so it is stated only
        where they can be written."""
        if self.view_conditional and self.meta is None and self.assumes and self.is_view is not None:
            text = self.layout_text
            if text is None or not text.layout_ok:
                return None
        return self.is_view

    @property
    def stated_carries_graph(self) -> bool:
        """Whether users are told it carries an autograd graph: not where that came from the
        default grad mode, stated or only assumed (`grad_assumed`)."""
        return bool(self.carries_graph) and not self.grad_unknown and self.grad_assumed is None

    @property
    def stated_requires_grad(self) -> bool | None:
        return None if self.grad_unknown else self.requires_grad

    @property
    def assumes_text(self) -> tuple[str, ...]:
        text = self.layout_text
        return text.assumes if text is not None else ()

    def to_json(self, expr: str) -> dict[str, Any]:
        """The `stridelens explain --format json` schema of DESIGN.md."""
        shape, strides = self.display_shape, self.display_strides
        out = {
            "expr": expr,
            "shape": list(shape) if shape is not None else None,
            "dtype": self.dtype,
            "device": self.device,
            "strides": list(strides) if strides is not None else None,
            "storage_offset": self.display_offset,
            "contiguous": self.stated_contiguous,
            "is_view": self.stated_is_view,
            "view_of": self.view_of,
            "requires_grad": self.stated_requires_grad,
            "notes": self.notes(),
        }
        assumes = list(self.assumes_text)
        if self.grad_assumed is not None and self.stated_requires_grad is not None and self.grad_assumed not in assumes:
            assumes.append(self.grad_assumed)
        if assumes:
            out["assumes"] = assumes
        return out


UNKNOWN = TensorFact()


def with_fields(fact: TensorFact, **changes: Any) -> TensorFact:
    """`dataclasses.replace` without re-running `__init__` (10x cheaper; nothing here has
    a `__post_init__`): the interpreter restates facts at every node."""
    new = object.__new__(TensorFact)
    new.__dict__.update(fact.__dict__)
    new.__dict__.update(changes)
    return new


def new_fact(**fields: Any) -> TensorFact:
    """`TensorFact(**fields)` at half the cost (a frozen dataclass's `__init__` sets its 22
    fields one `object.__setattr__` at a time): for the engine's hottest constructors."""
    return with_fields(UNKNOWN, **fields)


def format_sizes(items: tuple[int | str | None, ...], pretty: bool = True) -> str:
    """`(B, T, 3·C)` for hovers and hints (`pretty`), `(B, T, 3 * C)` as Python; `?` for a
    size without a name."""
    parts = [
        "?" if i is None else str(i) if isinstance(i, int) else (i.replace(" * ", "·") if pretty else i) for i in items
    ]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


@dataclass(frozen=True)
class ReplayEvent:
    """Something torch said while replaying an op: a raise, or a hidden copy."""

    kind: str  # "view-incompatible" | "reshape-copies" | "replay-error"
    line: int
    col: int  # 0-based, in UTF-8 bytes as `ast` reports them (see positions.py)
    end_line: int
    end_col: int
    message: str
    # Bytes copied by a reshape, when known.
    nbytes: int | None = None
    # For verdicts over symbolic sizes: the sizes for which it does not hold, and what it
    # assumed (" unless `T == 1` (assuming `x.is_contiguous()`)").
    detail: str | None = None
