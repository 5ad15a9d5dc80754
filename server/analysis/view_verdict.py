"""Where `view`, `reshape`, `flatten` and `is_contiguous()` are decided over symbolic sizes.

A verdict is the generic one (every size >= 2, `layouts.py`) plus the sizes whose being 1
would change it (`conditions.flip_conditions`). Finding those re-asks the question once per
size, so answers are cached process-wide under a renaming of the atoms: the same attention
block in every layer of a model, or in every model of a library, is solved once.
"""

from __future__ import annotations

from typing import Any

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.conditions import Condition, flip_conditions
from stridelens.server.analysis.layouts import Layout, Undecided
from stridelens.server.analysis.sizes import Size, SymExpr

CACHE_LIMIT = 50_000
_cache: dict[Any, Any] = {}
# The same question with the very same atoms (a tensor used many times): no renaming at all.
_direct: dict[Any, Any] = {}

# (kind, layout) after `view`/`reshape`/`flatten`: ("view", Layout) | ("copy", Layout) | ("raises",)
Outcome = tuple[Any, ...]


def _atoms(items: tuple[Any, ...]) -> list[int]:
    found: set[int] = set()
    for x in items:
        if isinstance(x, SymExpr):
            found |= x.atoms()
    return sorted(found)


def _rename_layout(layout: Layout, mapping: dict[int, int]) -> Layout:
    return Layout(
        tuple(sz.rename(s, mapping) for s in layout.shape),
        None if layout.strides is None else tuple(sz.rename(s, mapping) for s in layout.strides),
        None if layout.offset is None else sz.rename(layout.offset, mapping),
    )


def _rename_outcome(outcome: Outcome, mapping: dict[int, int]) -> Outcome:
    return tuple(_rename_layout(o, mapping) if isinstance(o, Layout) else o for o in outcome)


def _rename_condition(cond: Condition, mapping: dict[int, int]) -> Condition:
    a = None if cond.a is None else sz.rename(cond.a, mapping)
    b = None if cond.b is None else sz.rename(cond.b, mapping)
    return Condition(cond.kind, a, b, cond.tensor_key, cond.tensor_layout, cond.tensor_name, cond.layout_only)


def _cached(key_parts: tuple[Any, ...], layouts: list[Layout], sizes: tuple[Size, ...], solve: Any) -> tuple[Outcome, frozenset[Condition]]:
    """`solve(layouts, sizes)` for a problem renamed to atoms 0..n, mapped back."""
    direct_key = (key_parts, tuple(layouts), sizes)
    found = _direct.get(direct_key)
    if found is not None:
        return found  # type: ignore[no-any-return]
    flat = [x for lt in layouts for x in (*lt.shape, *(lt.strides or ()), lt.offset)] + list(sizes)
    atoms = _atoms(tuple(flat))
    to_canon = {a: i for i, a in enumerate(atoms)}
    canon_layouts = [_rename_layout(lt, to_canon) for lt in layouts]
    canon_sizes = tuple(sz.rename(s, to_canon) for s in sizes)
    key = (key_parts, tuple(canon_layouts), canon_sizes)
    hit = _cache.get(key)
    if hit is None:
        hit = solve(canon_layouts, canon_sizes)
        if len(_cache) < CACHE_LIMIT:
            _cache[key] = hit
    outcome, flips = hit
    back = dict(enumerate(atoms))
    answer = _rename_outcome(outcome, back), frozenset(_rename_condition(c, back) for c in flips)
    if len(_direct) < CACHE_LIMIT:
        _direct[direct_key] = answer
    return answer


def reshape_verdict(layout: Layout, shape: tuple[Size, ...], flatten: tuple[int, int] | None) -> tuple[Outcome, frozenset[Condition]]:
    """What `view(shape)` / `reshape(shape)` / `flatten(*flatten)` does to `layout` (raises
    Undecided where even the generic answer depends on the sizes)."""

    def solve(layouts: list[Layout], sizes: tuple[Size, ...]) -> tuple[Outcome, frozenset[Condition]]:
        (base,) = layouts

        def run(values: dict[int, Size]) -> Outcome:
            sub = base.substitute(values)
            wanted = tuple(sz.substitute(s, values) if isinstance(s, SymExpr) else s for s in sizes)
            if sub is None or any(w is None for w in wanted):
                raise Undecided
            if flatten is not None:
                out, is_view = lay.flatten(sub, *flatten)
                return ("view" if is_view else "copy", out)
            new = lay.infer_shape(wanted, lay.numel(sub.shape))  # type: ignore[arg-type]
            strides = lay.view_strides(sub, new)
            if strides is None:
                return ("raises",)
            return ("view", Layout(new, strides, sub.offset))

        outcome = run({})
        if outcome[0] == "view" and base.strides == lay.contiguous_strides(base.shape) and base.offset == 0:
            return outcome, frozenset()  # a row-major input views as row-major, for every size
        involved = (*base.shape, *(s for s in sizes if isinstance(s, SymExpr)), *_stride_atoms(base))
        return outcome, flip_conditions(involved, run, outcome)

    return _cached(("reshape", flatten), [layout], shape, solve)


def contiguity_verdict(layout: Layout) -> tuple[bool | None, frozenset[Condition]]:
    """`is_contiguous()` for every size, and the sizes that must not be 1 for it."""

    def solve(layouts: list[Layout], _: tuple[Size, ...]) -> tuple[Outcome, frozenset[Condition]]:
        (base,) = layouts
        try:
            verdict = lay.is_contiguous(base)
        except Undecided:
            return (None,), frozenset()
        if verdict:
            return (True,), frozenset()  # row-major strides stay row-major whatever the sizes

        def run(values: dict[int, Size]) -> Any:
            sub = base.substitute(values)
            if sub is None:
                raise Undecided
            return lay.is_contiguous(sub)

        # A size only the strides hold matters too: `x[:, 0]` of a (B, T, C) tensor has strides
        # (T * C, 1) and is contiguous when T == 1.
        return (False,), flip_conditions((*base.shape, *_stride_atoms(base)), run, False)

    outcome, flips = _cached(("contiguous",), [layout], (), solve)
    return outcome[0], flips


def _stride_atoms(layout: Layout) -> tuple[SymExpr, ...]:
    """Each size (atom) that appears in the strides or the offset, as a size of its own."""
    found: set[int] = set()
    for x in (*(layout.strides or ()), layout.offset):
        if isinstance(x, SymExpr):
            found |= x.atoms()
    return tuple(sz.atom(a) for a in sorted(found))
