"""Conditions a symbolic fact holds under: the `assumes` of `explain`.

A layout verdict over symbolic sizes is generic (every size >= 2). Where a size of 1 would
change it, the verdict carries the condition `size != 1`; where `C // n` stands for an exact
quotient, `C % n == 0`; where a function's tensor parameter was taken as contiguous, that.
`flip_conditions` finds the first kind by asking the same question again with one size (or
one factor of a size) set to 1 and comparing the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.layouts import Layout, Undecided
from stridelens.server.analysis.sizes import Size, SymExpr


@dataclass(frozen=True)
class Condition:
    kind: str  # "ne" (a != b) | "divides" (a % b == 0) | "le" / "ge" | "contiguous" (a parameter)
    a: Size | None = None
    b: Size | None = None
    # "contiguous": the parameter's storage key and layout, to find a name for it later.
    tensor_key: int | None = None
    tensor_layout: Layout | None = None
    tensor_name: str | None = None  # the parameter's name, for messages once it is rebound
    # True when only strides/contiguity/view-ness depend on it, not the shape.
    layout_only: bool = True


def divisible(a: Size, b: Size) -> Condition:
    """`a % b == 0`, written with common factors cancelled: `(C * T) % (n * T)` is `C % n`."""
    q = sz.exact_div(a, b)
    if isinstance(q, SymExpr) and len(q.terms) == 1:
        m, c = q.terms[0]
        num = sz.product([c.numerator, *(sz.atom(x) for x, e in m for _ in range(e) if e > 0)])
        den = sz.product([c.denominator, *(sz.atom(x) for x, e in m for _ in range(-e) if e < 0)])
        if num is not None and den is not None:
            return Condition("divides", num, den, layout_only=False)
    return Condition("divides", a, b, layout_only=False)


def not_one(size: Size) -> Condition:
    return Condition("ne", size, 1)


def shape_conditions(conditions: Iterable[Condition]) -> frozenset[Condition]:
    """What still matters for a tensor that gets a fresh (contiguous) layout."""
    return frozenset(c for c in conditions if not c.layout_only)


def flip_conditions(sizes: Iterable[Size], run: Callable[[dict[int, Size]], Any], generic: Any) -> frozenset[Condition]:
    """`size != 1` for each size of `sizes`, and each factor of one (`n` of `n * B`), whose
    being 1 changes the answer (a product is 1 when each of its factors is).

    `run(values)` answers the question with atoms substituted (`{}`: as is); `generic` is
    `run({})`, comparable after substitution through `substitute_outcome`."""
    out: set[Condition] = set()
    seen: set[SymExpr] = set()
    sizes = list(sizes)
    lone = {a for s in sizes if isinstance(s, SymExpr) for a in _lone_atom(s)}
    # A factor no dim holds alone is asked too: `(n * B, d, N)` reshaped to `(B, n * d, N)`
    # is a view when n == 1 even with B >= 2, which `n * B == 1` alone never asks.
    factors = sorted({a for s in sizes if isinstance(s, SymExpr) for a in _product_atoms(s)} - lone)
    sizes += [sz.atom(a) for a in factors]
    for size in sizes:
        if not isinstance(size, SymExpr) or size in seen:
            continue
        seen.add(size)
        values = sz.solve_equal_one(size)
        if values is None and size.terms[0][1] == 1 and _product_atoms(size):
            values = {a: 1 for a in _product_atoms(size)}  # `H * W == 1`: both are 1
        if values is None:
            if not _certainly_not_one(size):
                out.add(not_one(size))  # cannot check it: say it is assumed
            continue
        try:
            flipped = run(values)
        except (Undecided, ValueError, TypeError, IndexError):
            out.add(not_one(size))  # cannot tell what happens at 1: say it is assumed
            continue
        if flipped != substitute_outcome(generic, values):
            out.add(not_one(size))
    # `n * B != 1` says nothing more once `n != 1` is there: n * B == 1 needs n == 1.
    alone = {a for c in out if isinstance(c.a, SymExpr) for a in _lone_atom(c.a)}
    return frozenset(c for c in out if not (isinstance(c.a, SymExpr) and not _lone_atom(c.a) and set(_product_atoms(c.a)) & alone))


def _product_atoms(size: SymExpr) -> tuple[int, ...]:
    """The atoms of a single product of positive powers (`n * B`, `h * d ** 2`)."""
    if len(size.terms) == 1:
        m, c = size.terms[0]
        if c > 0 and all(e > 0 for _, e in m):
            return tuple(a for a, _ in m)
    return ()


def _lone_atom(size: SymExpr) -> tuple[int, ...]:
    if len(size.terms) == 1 and size.terms[0][1] == 1 and len(size.terms[0][0]) == 1 and size.terms[0][0][0][1] == 1:
        return (size.terms[0][0][0][0],)
    return ()


def _certainly_not_one(size: SymExpr) -> bool:
    # `3 * C` (an integer factor >= 2 of positive atoms) or `T + 1` (all positive, a constant
    # >= 1 besides) is never 1.
    if len(size.terms) == 1:
        m, c = size.terms[0]
        return c.denominator == 1 and c >= 2 and all(e > 0 for _, e in m)
    constant = dict(size.terms).get((), 0)
    return all(c > 0 for _, c in size.terms) and constant >= 1


def substitute_outcome(outcome: Any, values: dict[int, Size]) -> Any:
    """The same outcome with atoms substituted (tuples, layouts and sizes inside)."""
    if isinstance(outcome, SymExpr):
        return sz.substitute(outcome, values)
    if isinstance(outcome, Layout):
        return outcome.substitute(values)
    if isinstance(outcome, tuple):
        return tuple(substitute_outcome(o, values) for o in outcome)
    return outcome
