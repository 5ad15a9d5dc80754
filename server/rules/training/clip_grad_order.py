"""SL209 clip-grad-order: gradient clipping not between `backward()` and the optimizer step."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    LOOP_NODES,
    call_name,
    enclosing,
    index_of,
    walk_body,
)
from stridelens.server.rules.shared.edits import (
    make_finding,
    node_range,
)
from stridelens.server.rules.shared.training_loops import (
    is_backward_call,
    is_optimizer_step,
)

_CLIP_NAMES = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads")


def _events(body: list[ast.stmt]) -> list[tuple[str, ast.AST]]:
    """backward / clip / step calls in execution (source) order within `body`."""
    events: list[tuple[str, ast.AST]] = []
    for node in walk_body(body):
        if isinstance(node, LOOP_NODES):
            continue
        if is_backward_call(node):
            events.append(("backward", node))
        elif is_optimizer_step(node):
            events.append(("step", node))
        elif isinstance(node, ast.Call) and call_name(node) in ("clip_grad_norm_", "clip_grad_value_"):
            events.append(("clip", node))
    events.sort(key=lambda e: (getattr(e[1], "lineno", 0), getattr(e[1], "col_offset", 0)))
    return events


def check_clip_grad_order(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    reported: set[ast.AST] = set()
    for clip in [*index.by_name.get("clip_grad_norm_", ()), *index.by_name.get("clip_grad_value_", ())]:
        if clip in reported:
            continue
        holder = enclosing(index, clip, (*LOOP_NODES, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(holder, ast.Lambda):
            continue
        body: list[ast.stmt] = (
            holder.body
            if isinstance(holder, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef))
            else analysis.tree.body
        )
        events = [e for e in _events(body) if enclosing(index, e[1], (*LOOP_NODES, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) is holder]
        kinds = [k for k, _ in events]
        if "step" not in kinds or "backward" not in kinds:
            continue
        at = next(i for i, (_, n) in enumerate(events) if n is clip)
        before, after = kinds[:at], kinds[at + 1 :]
        last_backward = max((i for i, k in enumerate(before) if k == "backward"), default=None)
        problem = None
        if last_backward is None and "backward" in after and "step" in after:
            if after.index("backward") < after.index("step"):
                problem = tr("before `backward()`: it clips the previous step's gradients (or zeros), not this step's")
        elif last_backward is not None and "step" in before[last_backward:] and "step" not in after:
            problem = tr("after the optimizer step: the step already used the unclipped gradients")
        if problem is None:
            continue
        reported.add(clip)
        message = tr("`{clip}` runs {problem}; call it between `backward()` and the optimizer step").format(
            clip=call_name(clip), problem=problem
        )
        out.append(make_finding(analysis, SL209, node_range(analysis, clip), message))
    return out


SL209 = register(
    Rule(
        code="SL209",
        name="clip-grad-order",
        severity=Severity.ERROR,
        summary="`clip_grad_norm_`/`clip_grad_value_` not between `backward()` and the optimizer step",
        doc=RuleDoc(
            what="Flags gradient clipping placed before the `backward()` or after the optimizer "
            "`step()` (including `scaler.step(optimizer)`) of the same loop body or function, "
            "when both the backward and the step are there to compare with.",
            why="Clipping must act on the gradients the step is about to use. Before backward "
            "it clips stale (or zeroed) gradients; after the step it changes nothing that "
            "matters. Either way training runs unclipped, silently.",
            example="loss.backward()\noptimizer.step()\nclip_grad_norm_(model.parameters(), 1.0)  # SL209",
            fix="Move the clip call between `backward()` and `step()` (with AMP: after "
            "`scaler.unscale_(optimizer)`, before `scaler.step(optimizer)`).",
        ),
        check=check_clip_grad_order,
    )
)


