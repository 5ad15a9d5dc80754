"""Bounded constant folding: sizes like `B * T` or `2 ** 10` fold, `2 ** 10 ** 10` does not.

Every result is checked against size limits before it is computed, so no expression in
a workspace file can make the analysis hang or eat memory.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

MAX_INT_BITS = 256
MAX_SEQ_LEN = 10_000

_UNSET = object()

_BINOPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}


def _is_number(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or isinstance(x, bool)


def _small(x: Any) -> bool:
    if isinstance(x, int):
        return x.bit_length() <= MAX_INT_BITS
    if isinstance(x, (str, bytes, tuple, list)):
        return len(x) <= MAX_SEQ_LEN
    return True


def fold_binop(op: ast.operator, left: Any, right: Any) -> Any:
    """The folded value, or `_UNSET` (exposed as `NOT_FOLDED`) when it is not safe or
    not possible."""
    fn = _BINOPS.get(type(op))
    if fn is None:
        return _UNSET
    if isinstance(op, ast.Pow):
        if not (_is_number(left) and _is_number(right)):
            return _UNSET
        if isinstance(left, int) and isinstance(right, int):
            if right < 0 or right * max(abs(left), 1).bit_length() > MAX_INT_BITS:
                return _UNSET
        elif isinstance(right, (int, float)) and abs(right) > 1024:
            return _UNSET
    elif isinstance(op, ast.LShift):
        if not isinstance(right, int) or right > MAX_INT_BITS:
            return _UNSET
    elif isinstance(op, ast.Mult):
        # Sequence repetition: bound the result length before building it.
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, tuple, list)) and isinstance(n, int):
                if len(seq) * max(n, 0) > MAX_SEQ_LEN:
                    return _UNSET
    try:
        result = fn(left, right)
    except Exception:  # noqa: BLE001 - ZeroDivisionError, TypeError, OverflowError...
        return _UNSET
    return result if _small(result) else _UNSET


def fold_unary(op: ast.unaryop, operand: Any) -> Any:
    try:
        if isinstance(op, ast.USub):
            return -operand
        if isinstance(op, ast.UAdd):
            return +operand
        if isinstance(op, ast.Not):
            return not operand
        if isinstance(op, ast.Invert) and isinstance(operand, int):
            return ~operand
    except Exception:  # noqa: BLE001
        return _UNSET
    return _UNSET


NOT_FOLDED = _UNSET
