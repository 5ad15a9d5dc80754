"""SL205 detach-shares-storage: an in-place change of a `.detach()`, which shares storage."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import dotted, index_of, is_inplace_method, walk_body
from stridelens.server.rules.shared.edits import (
    append_edit,
    make_finding,
    node_range,
    segment,
    short,
)
from stridelens.server.rules.shared.parameters import PARAM_ATTRS, is_param_loop_name


def _is_detach_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "detach"
        and not node.args
    )


def _mutated(analysis: Analysis, index_parents: dict[ast.AST, ast.AST], stmt: ast.stmt) -> tuple[ast.expr, ast.AST] | None:
    """The expression mutated in place by `stmt` and the node to report."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and is_inplace_method(func.attr):
            return func.value, stmt.value
    if isinstance(stmt, ast.AugAssign):
        target = stmt.target.value if isinstance(stmt.target, ast.Subscript) else stmt.target
        return target, stmt
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        return stmt.targets[0].value, stmt
    return None


def check_detach_shares_storage(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    if not index.by_name.get("detach"):
        return out
    bodies = [analysis.tree.body, *[fn.body for fn in index.functions]]
    for body in bodies:
        for stmt in walk_body(body):
            if not isinstance(stmt, ast.stmt):
                continue
            hit = _mutated(analysis, index.parents, stmt)
            if hit is None:
                continue
            target, report = hit
            if _is_detach_call(target):
                assert isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute)
                if not _activation(analysis, target.func.value):
                    continue
                source = segment(analysis, target.func.value)
                fix = Fix(tr("Use `.detach().clone()`"), tuple(append_edit(analysis, target, ".clone()")))
                out.append(_sl205(analysis, report, source, fix))
                continue
            if not isinstance(target, ast.Name):
                continue
            fact = analysis.fact_of(target)
            if not isinstance(stmt, ast.AugAssign) and (fact is None or not fact.detached_from):
                continue
            definition = _detach_definition(analysis, body, target.id, stmt)
            if definition is None:
                continue  # e.g. bound from `.data`: SL204's business
            if isinstance(definition.func, ast.Attribute) and not _activation(analysis, definition.func.value):
                continue
            fix = Fix(tr("Use `.detach().clone()`"), tuple(append_edit(analysis, definition, ".clone()")))
            source = segment(analysis, definition.func.value) if isinstance(definition.func, ast.Attribute) else "?"
            out.append(_sl205(analysis, report, source, fix))
    return out


def _activation(analysis: Analysis, source: ast.expr) -> bool:
    """Whether the detached tensor may be an activation. Writes into a `.grad`, a parameter
    or buffer (`.weight`, `self.<attr>`, a loop over `parameters()`) are deliberate updates
    of state nobody saved for backward: timm's `p.grad.detach().copy_(...)`, Lightning's
    `dst_param.detach().copy_(src)`."""
    node = source
    while isinstance(node, ast.Subscript):
        node = node.value
    chain = dotted(node) or ""
    parts = chain.split(".")
    if any(part in PARAM_ATTRS for part in parts[1:]):
        return False
    if len(parts) > 1 and parts[0] == "self":
        return False
    return not (isinstance(node, ast.Name) and is_param_loop_name(analysis, node))


def _detach_definition(analysis: Analysis, body: list[ast.stmt], name: str, before: ast.stmt) -> ast.Call | None:
    found: ast.Call | None = None
    for node in walk_body(body):
        if node is before:
            break
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value if _is_detach_call(node.value) else None  # type: ignore[assignment]
    return found


def _sl205(analysis: Analysis, report: ast.AST, source: str, fix: Fix | None) -> Finding:
    message = tr(
        "in-place change of a `.detach()` of `{source}`: it shares `{source}`'s storage, "
        "so the original changes too (and backward raises if autograd saved it); use "
        "`.detach().clone()` for an independent copy"
    ).format(source=short(source))
    return make_finding(analysis, SL205, node_range(analysis, report), message, fix)


SL205 = register(
    Rule(
        code="SL205",
        name="detach-shares-storage",
        severity=Severity.WARNING,
        summary="in-place mutation of a `.detach()` result (it shares storage)",
        doc=RuleDoc(
            what="Flags an in-place mutation (`add_()`, `zero_()`, `copy_()`, `+=`, `t[i] = ...`) "
            "of a `.detach()` result, inline (`x.detach().zero_()`) or through a name bound to "
            "it, when the detached tensor may be an activation: a local name or expression. "
            "Silent when it is a `.grad` (`p.grad.detach().copy_(g)`), a parameter or buffer "
            "(`.weight`, `.bias`, `self.<attr>`, a loop over `parameters()`/`buffers()`/"
            "`state_dict()` or a `zip` of those): writing into those is a deliberate update of "
            "state no graph saved.",
            why="`.detach()` does not copy: it is a new tensor over the same storage, without "
            "the graph. Mutating it changes the original; if autograd saved the original for "
            "backward, backward later raises a version-counter error far from this line.",
            example="y = x.detach()\ny.add_(1)  # SL205: x changes too",
            fix="`.detach().clone()` (the quick fix) when you want an independent copy.",
        ),
        check=check_detach_shares_storage,
    )
)
