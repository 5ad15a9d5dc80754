"""Symbolic sizes: integer expressions over sizes the file does not spell out.

A size is an `int` when known, or a `SymExpr`: a sum of terms `coefficient * atoms`, where an
atom is one unknown integer (`x.shape[0]`, `self.n_head`, `config.n_embd`) and may carry a
negative power (`C // n_head` is `C * n_head**-1`, under the condition `C % n_head == 0`).
The form is canonical, so two sizes are the same expression exactly when they compare equal.

Verdicts about layouts are *generic*: they hold when every atom is at least 2, the same
assumption torch's size-oblivious reasoning makes. Where a verdict changes when an atom is 1,
the caller finds out by substituting 1 (`substitute`) and says so as a condition.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Union

# (atom id, exponent) pairs, sorted by atom id; exponents are never 0.
Monomial = tuple[tuple[int, int], ...]
# A coefficient: an int where it can be, else a Fraction (`C // 4` is C * 1/4).
Coef = Union[int, Fraction]  # noqa: UP007 - a runtime alias

MAX_TERMS = 32  # bigger expressions are not worth tracking (and would cost)


class SymExpr:
    """A canonical Laurent polynomial with rational coefficients over integer atoms."""

    __slots__ = ("_atoms", "_hash", "terms")

    def __init__(self, terms: dict[Monomial, Coef]) -> None:
        self.terms: tuple[tuple[Monomial, Coef], ...] = tuple(
            sorted((m, c) for m, c in terms.items() if c != 0)
        )
        self._hash = hash(self.terms)
        self._atoms: frozenset[int] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SymExpr) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"SymExpr({render(self, lambda a: f'a{a}')})"

    def atoms(self) -> frozenset[int]:
        found = self._atoms
        if found is None:  # asked of the same expression many times (every layout it is in)
            found = self._atoms = frozenset(a for m, _ in self.terms for a, _ in m)
        return found


Size = Union[int, SymExpr]  # noqa: UP007 - a runtime alias


def atom(atom_id: int) -> SymExpr:
    return SymExpr({((atom_id, 1),): 1})


_ANONYMOUS = itertools.count(1 << 40)


def anonymous() -> SymExpr:
    """A size nobody can name (one that differs between two paths, a conv's output size of
    unknown stride): its tensor's rank stays a fact, the entry renders as `null`. Ids far above
    `naming.Names`' own, which count up from 1."""
    return atom(next(_ANONYMOUS))


def _terms(x: Size) -> dict[Monomial, Coef]:
    if isinstance(x, SymExpr):
        return dict(x.terms)
    return {(): x} if x else {}


def _norm(terms: dict[Monomial, Coef]) -> Size | None:
    # Coefficients are ints where they can be (Fraction arithmetic is 10x slower).
    terms = {m: (c.numerator if c.denominator == 1 else c) for m, c in terms.items() if c != 0}
    if len(terms) > MAX_TERMS:
        return None
    if not terms:
        return 0
    if len(terms) == 1 and () in terms and terms[()].denominator == 1:
        return int(terms[()])
    return SymExpr(terms)


def is_symbolic(x: object) -> bool:
    return isinstance(x, SymExpr)


def add(a: Size, b: Size) -> Size | None:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    terms = _terms(a)
    for m, c in _terms(b).items():
        terms[m] = terms.get(m, 0) + c
    return _norm(terms)


def neg(a: Size) -> Size:
    if isinstance(a, int):
        return -a
    return SymExpr({m: -c for m, c in a.terms})


def sub(a: Size, b: Size) -> Size | None:
    return add(a, neg(b))


def _mul_monomials(m1: Monomial, m2: Monomial) -> Monomial:
    if not m1:
        return m2
    if not m2:
        return m1
    powers = dict(m1)
    for a, e in m2:
        powers[a] = powers.get(a, 0) + e
    return tuple(sorted((a, e) for a, e in powers.items() if e))


def mul(a: Size, b: Size) -> Size | None:
    if isinstance(a, int):
        if isinstance(b, int):
            return a * b
        a, b = b, a
    if isinstance(b, int):  # a scaled expression (strides, `3 * C`): no monomials to multiply
        if b == 0:
            return 0
        if b == 1:
            return a
        return _norm({m: c * b for m, c in a.terms})
    out: dict[Monomial, Coef] = {}
    ta, tb = _terms(a), _terms(b)
    if len(ta) * len(tb) > MAX_TERMS:
        return None
    for m1, c1 in ta.items():
        for m2, c2 in tb.items():
            m = _mul_monomials(m1, m2)
            out[m] = out.get(m, 0) + c1 * c2
    return _norm(out)


def product(items: Iterable[Size]) -> Size | None:
    result: Size | None = 1
    for item in items:
        if result is None:
            return None
        result = mul(result, item)
    return result


def _monomial_inverse(x: Size) -> Size | None:
    """1 / x when x is one term (a monomial times a number), else None."""
    if isinstance(x, int):
        return None if x == 0 else _norm({(): Fraction(1, x)})
    if len(x.terms) != 1:
        return None
    m, c = x.terms[0]
    return _norm({tuple((a, -e) for a, e in m): Fraction(1) / c})


def exact_div(a: Size, b: Size) -> Size | None:
    """a / b as an expression, when b is a single term (no condition attached)."""
    if isinstance(a, int) and isinstance(b, int):
        return None if b == 0 else (a // b if a % b == 0 else _norm({(): Fraction(a, b)}))
    inverse = _monomial_inverse(b)
    return None if inverse is None else mul(a, inverse)


def floordiv(a: Size, b: Size) -> tuple[Size | None, bool]:
    """`a // b`: the quotient, and whether it needs `a % b == 0` (the caller's condition).

    The quotient is exact when b is a number dividing every coefficient of a, or when both
    are numbers; otherwise it is `a / b`, true only when b divides a."""
    if isinstance(a, int) and isinstance(b, int):
        return (a // b if b else None), False
    q = exact_div(a, b)
    if q is None:
        return None, False
    if isinstance(q, int):
        return q, False
    # Exact when a number divides every coefficient and no power turned negative: (4*C)//2.
    exact = isinstance(b, int) and all(
        c.denominator == 1 and all(e > 0 for _, e in m) for m, c in q.terms
    )
    return q, not exact


def as_int(x: Size) -> int | None:
    return x if isinstance(x, int) else None


def substitute(x: Size, values: dict[int, Size]) -> Size | None:
    """x with some atoms replaced by numbers or by single-term expressions."""
    if isinstance(x, int):
        return x
    if all(isinstance(v, int) for v in values.values()):
        return _substitute_numbers(x, values)  # type: ignore[arg-type]
    total: Size | None = 0
    for m, c in x.terms:
        term: Size | None = _norm({(): c})
        for a, e in m:
            base: Size | None = values.get(a, atom(a))
            if base is None or term is None:
                return None
            if e < 0:
                base = _monomial_inverse(base)
                if base is None:
                    return None
            for _ in range(abs(e)):
                term = None if term is None else mul(term, base)
        if term is None or total is None:
            return None
        total = add(total, term)
    return total


def _substitute_numbers(x: SymExpr, values: dict[int, int]) -> Size | None:
    out: dict[Monomial, Coef] = {}
    for m, c in x.terms:
        coef = c
        kept: list[tuple[int, int]] = []
        for a, e in m:
            if a in values:
                v = values[a]
                if v == 0 and e < 0:
                    return None
                coef = coef * v**e if e > 0 else coef * Fraction(1, v ** (-e))
            else:
                kept.append((a, e))
        key = tuple(kept)
        out[key] = out.get(key, 0) + coef
    return _norm(out)


def solve_equal_one(x: Size) -> dict[int, Size] | None:
    """A substitution making the single-term size x equal to 1 (`T` -> T=1, `C // 4` ->
    C=4, `C // n` -> C=n), or None when x is a number or a sum."""
    if isinstance(x, int) or len(x.terms) != 1:
        return None
    m, c = x.terms[0]
    for a, e in m:
        if abs(e) != 1:
            continue
        rest = _norm({tuple((b, f) for b, f in m if b != a): c})
        if rest is None:
            return None
        # c * rest * a**e == 1  =>  a = (c * rest) ** -e
        value = _monomial_inverse(rest) if e == 1 else rest
        if value is None:
            return None
        if isinstance(value, int) or all(f > 0 for mm, _ in value.terms for _, f in mm):
            if isinstance(value, SymExpr) and any(cc.denominator != 1 for _, cc in value.terms):
                return None
            return {a: value}
    return None


def generic_lt(a: Size, b: Size) -> bool | None:
    """a < b for every assignment of atoms >= 2, or None when that depends on them.

    Only what `view`'s stride computation asks is decided: a and b products of sizes."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    if a == b:
        return False
    ratio = exact_div(b, a)
    if ratio is None:
        return None
    if isinstance(ratio, int):
        return ratio > 1 if _positive(a) else None
    if len(ratio.terms) != 1 or not _positive(a):
        return None
    m, c = ratio.terms[0]
    # Generic: a product of atoms with a positive coefficient is a size (`C // 4` of a
    # `view(B, T, 4, C // 4)`), and sizes are >= 2; the caller checks size 1 separately.
    if all(e > 0 for _, e in m) and c > 0:
        return True
    if all(e < 0 for _, e in m) and c > 0:
        return False
    return None


def _positive(x: Size) -> bool:
    if isinstance(x, int):
        return x > 0
    return len(x.terms) == 1 and x.terms[0][1] > 0


def render(x: Size, name_of: Callable[[int], str | None]) -> str | None:
    """Python source for x, naming atoms with `name_of` (None when an atom has no name)."""
    if isinstance(x, int):
        return str(x)
    parts: list[tuple[bool, str]] = []
    for m, c in x.terms:
        text = _render_term(m, -c if c < 0 else c, name_of, in_sum=len(x.terms) > 1)
        if text is None:
            return None
        parts.append((c < 0, text))
    # Constants last, as people write them: `T - 1`, not `-1 + T`.
    parts.sort(key=lambda p: p[1].lstrip("(").isdigit())
    out = ""
    for i, (negative, text) in enumerate(parts):
        if i == 0:
            out = f"-{text}" if negative else text
        else:
            out += f" - {text}" if negative else f" + {text}"
    return out


def _render_term(
    m: Monomial, c: Coef, name_of: Callable[[int], str | None], in_sum: bool
) -> str | None:
    num: list[str] = [str(c.numerator)] if c.numerator != 1 or not any(e > 0 for _, e in m) else []
    den: list[str] = [str(c.denominator)] if c.denominator != 1 else []
    for a, e in m:
        name = name_of(a)
        if name is None:
            return None
        if " " in name and not name.startswith("("):
            name = f"({name})"
        (num if e > 0 else den).extend([name] * abs(e))
    text = " * ".join(num) if num else "1"
    if den:
        divisor = den[0] if len(den) == 1 else "(" + " * ".join(den) + ")"
        text = f"{text} // {divisor}"
        if in_sum:
            text = f"({text})"
    return text


def rename(x: Size, mapping: dict[int, int]) -> Size:
    """x with atoms renamed; `mapping` must keep their order (then no term moves)."""
    if isinstance(x, int):
        return x
    out = SymExpr.__new__(SymExpr)
    out.terms = tuple((tuple((mapping[a], e) for a, e in m), c) for m, c in x.terms)
    out._hash = hash(out.terms)
    out._atoms = None
    return out
