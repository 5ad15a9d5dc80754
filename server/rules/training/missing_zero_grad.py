"""SL211 missing-zero-grad: a loop with `backward()` and an optimizer step but no `zero_grad()`."""

from __future__ import annotations

import ast
import re

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit
from stridelens.server.rules.shared.ast_index import (
    call_name,
    dotted,
    enclosing_stmt,
    index_of,
    walk_scope,
)
from stridelens.server.rules.shared.edits import (
    line_indent,
    make_finding,
    node_range,
)
from stridelens.server.rules.shared.training_loops import (
    is_optimizer_step,
    step_optimizer_text,
)

_ZERO_GRAD = re.compile(r"zero_grad|zero_grads|clear_grad")


def _zeroes_grads(loop: ast.AST) -> bool:
    for node in walk_scope(loop):
        if isinstance(node, ast.Call) and _ZERO_GRAD.search(call_name(node)):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "zero_":
            value = node.func.value
            if isinstance(value, ast.Attribute) and value.attr == "grad":
                return True
    return False


def _is_dist_autograd_context(item: ast.withitem) -> bool:
    name = dotted(item.context_expr.func) if isinstance(item.context_expr, ast.Call) else None
    return name is not None and name.endswith("dist_autograd.context")


def _in_dist_autograd_context(analysis: Analysis, loop: ast.AST, nodes: list[ast.AST]) -> bool:
    """The loop's backward runs inside `with dist_autograd.context():` (inside the loop or
    around it): gradients live in that context, a fresh one per iteration, never in `.grad`."""
    if any(isinstance(n, (ast.With, ast.AsyncWith)) and any(_is_dist_autograd_context(i) for i in n.items) for n in nodes):
        return True
    index = index_of(analysis)
    parent = index.parents.get(loop)
    while parent is not None:
        if isinstance(parent, (ast.With, ast.AsyncWith)) and any(_is_dist_autograd_context(i) for i in parent.items):
            return True
        parent = index.parents.get(parent)
    return False


def check_missing_zero_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    reported: set[ast.AST] = set()
    for loop in index.loops:
        if not index.backward_calls_in(loop):
            continue
        nodes = list(walk_scope(loop))
        steps = [n for n in nodes if is_optimizer_step(n)]
        if not steps or _zeroes_grads(loop) or _in_dist_autograd_context(analysis, loop, nodes):
            continue
        # Something outside the loop body's view may zero the grads: a helper taking the
        # optimizer, a closure... Only flag when the loop calls nothing that could.
        for step in steps:
            assert isinstance(step, ast.Call)
            if step in reported:
                continue
            reported.add(step)
            stmt = enclosing_stmt(index, step)
            fix = None
            optimizer = step_optimizer_text(analysis, step)
            if optimizer is not None and isinstance(stmt, ast.Expr) and stmt.value is step:
                end_line = stmt.end_lineno or stmt.lineno
                text = analysis.lines[end_line - 1]
                indent = line_indent(analysis, stmt.lineno)
                fix = Fix(
                    tr("Insert `{optimizer}.zero_grad()` after the step").format(optimizer=optimizer),
                    (TextEdit(end_line, len(text) + 1, end_line, len(text) + 1, f"\n{indent}{optimizer}.zero_grad()"),),
                )
            message = tr(
                "this loop calls `backward()` and the optimizer step but never `zero_grad()`: "
                "gradients accumulate across iterations, so every step uses the sum of all "
                "previous gradients"
            )
            out.append(make_finding(analysis, SL211, node_range(analysis, step), message, fix))
    return out


SL211 = register(
    Rule(
        code="SL211",
        name="missing-zero-grad",
        severity=Severity.WARNING,
        summary="a loop with `backward()` and `optimizer.step()` but no `zero_grad()`",
        doc=RuleDoc(
            what="Flags the optimizer `.step()` of a loop whose body calls `backward()` and "
            "`step()` but never `zero_grad()` (of an optimizer or a model), nor sets or zeroes "
            "`.grad` itself. Loops whose backward runs inside `with dist_autograd.context():` "
            "are left alone: distributed autograd keeps gradients per context, not in `.grad`.",
            why="`backward()` adds into `.grad`; it never overwrites. Without zeroing, each step "
            "uses the running sum of every gradient so far: training diverges or crawls, with "
            "no error.",
            example="for x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
            "    optimizer.step()  # SL211",
            fix="Call `optimizer.zero_grad()` once per step (the quick fix inserts it right after "
            "the step). For deliberate gradient accumulation, zero after the accumulated step.",
        ),
        check=check_missing_zero_grad,
    )
)

