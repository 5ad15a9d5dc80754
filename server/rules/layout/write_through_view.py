"""SL104 write-through-view: an in-place write through a named view whose base is read afterwards."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    enclosing,
    index_of,
    is_inplace_method,
    stores_name,
    walk,
    walk_statements,
)
from stridelens.server.rules.shared.edits import (
    make_finding,
    node_range,
)


def _write_target(stmt: ast.stmt) -> tuple[ast.Name, ast.AST] | None:
    """The named tensor written in place by `stmt`, and the node to report."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if (
            isinstance(func, ast.Attribute)
            and is_inplace_method(func.attr)
            and isinstance(func.value, ast.Name)
        ):
            return func.value, stmt.value
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target, stmt
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Subscript):
        if isinstance(stmt.target.value, ast.Name):
            return stmt.target.value, stmt
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        if isinstance(stmt.targets[0].value, ast.Name):
            return stmt.targets[0].value, stmt
    return None


def check_write_through_view(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    scopes: set[ast.AST | None] = set()
    for node, value in analysis.values.items():
        if isinstance(node, ast.Name) and isinstance(value, TensorFact) and value.view_of and value.view_of != node.id:
            scopes.add(enclosing(index, node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    if not scopes:
        return out
    bodies = [fn.body for fn in index.functions if fn in scopes]
    if None in scopes:
        bodies.append(analysis.tree.body)
    for body in bodies:
        statements = list(walk_statements(body))
        last_fact: dict[str, TensorFact] = {}
        aliases: set[str] = set()  # names last bound by `a = b`: not a view, the tensor itself
        for i, stmt in enumerate(statements):
            write = _write_target(stmt)
            if write is not None:
                name, report = write
                fact = last_fact.get(name.id)
                base = fact.view_of if fact is not None and fact.is_view is not False else None
                if fact is not None and base and base != name.id:
                    reader = _later_read(statements[i + 1 :], base, name.id)
                    if reader is not None:
                        what = (
                            tr("the same tensor as `{base}`") if name.id in aliases else tr("a view of `{base}`")
                        ).format(base=base)
                        message = tr(
                            "in-place write through `{name}`, {what}: it also changes "
                            "`{base}`, which is read afterwards (line {line})"
                        ).format(name=name.id, what=what, base=base, line=reader)
                        out.append(make_finding(analysis, SL104, node_range(analysis, report), message))
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        if isinstance(stmt.value, ast.Name):
                            aliases.add(target.id)
                        else:
                            aliases.discard(target.id)
                        fact = analysis.fact_of(target)
                        if fact is not None:
                            last_fact[target.id] = fact
                        else:
                            last_fact.pop(target.id, None)
    return out


def _later_read(statements: list[ast.stmt], base: str, view: str) -> int | None:
    for stmt in statements:
        if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)):
            continue  # their bodies are visited as statements of their own
        for node in walk(stmt):
            if isinstance(node, ast.Name) and node.id == base and isinstance(node.ctx, ast.Load):
                return stmt.lineno
        if stores_name(stmt, base) or stores_name(stmt, view):
            return None
    return None


SL104 = register(
    Rule(
        code="SL104",
        name="write-through-view",
        severity=Severity.INFORMATION,
        summary="in-place write through a named view whose base is read afterwards",
        doc=RuleDoc(
            what="Flags an in-place write (`v.add_(...)`, `v += ...`, `v[i] = ...`) through a "
            "name the analysis knows to be a view of another tensor, when that base tensor is "
            "read later in the same function.",
            why="A view shares its base's storage: writing through it changes the base too. "
            "When the base is read afterwards, that is either intended (then say so) or a "
            "hard-to-see bug where a value changed behind your back.",
            example="x = torch.zeros(4, 4)\nrow = x[0]\nrow += 1  # SL104: also changes x\nprint(x.sum())",
            fix="If the base should not change, `.clone()` the view first. If it should, keep "
            "the code and silence the line with `# noqa: SL104`.",
        ),
        check=check_write_through_view,
    )
)
