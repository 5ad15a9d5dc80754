"""The conditions that decide whether code runs: the tests of the `if`/`while` around it
and the earlier `if`s that leave the block (`if torch.is_tensor(t): return t`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from stridelens.server.rules.shared.ast_index import SCOPE_NODES, Index

_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def never_falls_through(body: list[ast.stmt]) -> bool:
    """`body` always leaves its block: it ends in `return`, `raise`, `continue` or `break`
    (or in an `if` both of whose branches do)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, _EXITS):
        return True
    if isinstance(last, ast.If):
        return never_falls_through(last.body) and never_falls_through(last.orelse)
    return False


def guarding_tests(index: Index, node: ast.AST) -> Iterator[tuple[ast.expr, ast.stmt | None]]:
    """The conditions that decide whether `node` runs, within its function (or module):
    the tests of the `if` / conditional expressions / `while` loops around it, and of the
    earlier `if`s of an enclosing block one of whose branches always leaves the block
    (`if torch.is_tensor(t): return t` before it). Each comes with the statement holding
    the test and, for an early exit, that `if` (else None): what lies between it and `node`
    may rebind what it tested."""
    child: ast.AST = node
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, SCOPE_NODES):
        if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and child is not parent.test:
            yield parent.test, None
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and child in block:
                for earlier in block[: block.index(child)]:
                    if isinstance(earlier, ast.If) and (
                        never_falls_through(earlier.body) or never_falls_through(earlier.orelse)
                    ):
                        yield earlier.test, earlier
        child, parent = parent, index.parents.get(parent)
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) or parent is None:
        body = parent.body if parent is not None else None
        if body is not None and child in body:
            for earlier in body[: body.index(child)]:
                if isinstance(earlier, ast.If) and (never_falls_through(earlier.body) or never_falls_through(earlier.orelse)):
                    yield earlier.test, earlier
