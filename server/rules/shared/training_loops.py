"""What makes code a training step: `backward()` calls, optimizer steps (not scheduler
steps), and loops whose body does either."""

from __future__ import annotations

import ast
import re

from stridelens.server.analysis import Analysis
from stridelens.server.rules.shared.ast_index import LOOP_NODES, Index, dotted, walk_body


def is_backward_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"


_OPTIM_NAME = re.compile(r"(optim|^opt$|^opt_|_opt$|^opt\d|scaler)", re.IGNORECASE)


def is_optimizer_step(node: ast.AST) -> bool:
    """`optimizer.step()`, `self.opt.step()`, `scaler.step(optimizer)` (not schedulers)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"):
        return False
    name = dotted(node.func.value)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1]
    if "sched" in last.lower():
        return False
    return bool(_OPTIM_NAME.search(last))


def body_trains(body: list[ast.stmt]) -> bool:
    """`body` (outside nested defs) calls `backward()` or an optimizer step."""
    return any(is_backward_call(node) or is_optimizer_step(node) for node in walk_body(body))


def loop_trains(index: Index, loop: ast.AST) -> bool:
    """A training loop: a loop whose body calls `backward()` or an optimizer step (memoised)."""
    trains = index.training_loops.get(loop)
    if trains is None:
        trains = index.training_loops[loop] = isinstance(loop, LOOP_NODES) and body_trains(loop.body)
    return trains


def step_optimizer_text(analysis: Analysis, step: ast.Call) -> str | None:
    """The optimizer expression of a step call (`scaler.step(opt)` -> `opt`)."""
    assert isinstance(step.func, ast.Attribute)
    receiver = dotted(step.func.value)
    if receiver is None:
        return None
    if "scaler" in receiver.rsplit(".", 1)[-1].lower():
        if step.args and dotted(step.args[0]) is not None:
            return dotted(step.args[0])
        return None
    return receiver


