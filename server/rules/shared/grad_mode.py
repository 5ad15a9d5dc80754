"""Grad mode where a statement runs: set locally, or the join of the callers' modes.

The engine records the mode each statement saw when it was interpreted (`grad_enabled_at`),
with a function body's default taken as "on". Rules that need "grad is on" (SL201, SL204,
SL206, SL213) ask here instead: a `with torch.no_grad():` or a decorator inside the function decides;
otherwise the function runs in its callers' mode, joined over every call site in the file,
and framework conventions count as callers (a Lightning `validation_step` runs under
`no_grad`). No call site known means unknown.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from enum import Enum

from stridelens.server.analysis import Analysis
from stridelens.server.analysis.torch_api import GRAD_CONTEXTS
from stridelens.server.analysis.values import GradContext, TorchRef
from stridelens.server.rules.shared.ast_index import Index, enclosing, index_of, inside


class GradMode(str, Enum):
    ON = "on"
    OFF = "off"
    UNKNOWN = "unknown"


# Methods a framework calls with grad disabled. Extend per project with
# `[tool.stridelens] no-grad-functions = [...]`.
NO_GRAD_CONVENTIONS: dict[str, str] = {
    # Lightning: "the model is put in eval mode and PyTorch gradients are disabled" for the
    # validation, test and predict loops (LightningModule.validation_step / test_step /
    # predict_step docs; loops/evaluation_loop.py and prediction_loop.py run them under
    # `torch.no_grad()` or `inference_mode()`).
    "validation_step": "Lightning runs `validation_step` with gradients disabled",
    "test_step": "Lightning and mmengine run `test_step` with gradients disabled",
    "predict_step": "Lightning runs `predict_step` with gradients disabled",
    # mmengine: ValLoop.run_iter / TestLoop.run_iter are decorated with `@torch.no_grad()`
    # and call `model.val_step(data_batch)` / `model.test_step(data_batch)` (runner/loops.py).
    "val_step": "mmengine runs `val_step` with gradients disabled",
}

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _context_mode(analysis: Analysis, expr: ast.expr) -> GradMode | None:
    """The mode a `with` item or decorator sets, None when it is no grad-mode context."""
    value = analysis.values.get(expr)
    if isinstance(value, GradContext):
        return GradMode.ON if value.enabled else GradMode.OFF
    if isinstance(value, TorchRef) and value.path in GRAD_CONTEXTS:  # `@torch.no_grad` bare
        mode = GRAD_CONTEXTS[value.path]
        return GradMode.UNKNOWN if mode is None else GradMode.ON if mode else GradMode.OFF
    if isinstance(expr, ast.Call):
        func = analysis.values.get(expr.func)
        if isinstance(func, TorchRef) and func.path in GRAD_CONTEXTS:
            return GradMode.UNKNOWN  # `set_grad_enabled(self.training)`
    return None


def _entered_before(analysis: Analysis, fn: FunctionNode, node: ast.AST) -> GradMode | None:
    """`stack.enter_context(torch.no_grad())` earlier in the function (detectron2's
    `inference_on_dataset`): the mode holds until the stack closes, taken as the rest of
    the function."""
    index = index_of(analysis)
    line = getattr(node, "lineno", 0)
    mode: GradMode | None = None
    for call in index.by_name.get("enter_context", ()):
        if len(call.args) == 1 and call.lineno < line and _function_of(index, call) is fn:
            found = _context_mode(analysis, call.args[0])
            if found is not None:
                mode = found
    return mode


def local_mode(analysis: Analysis, node: ast.AST) -> tuple[GradMode | None, FunctionNode | None]:
    """The mode set around `node` within its own function (with-blocks, `enter_context`,
    decorators), or None when it is inherited; and that function (None at module level)."""
    index = index_of(analysis)
    current: ast.AST | None = node
    parent = index.parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.With, ast.AsyncWith)) and current in parent.body:
            for item in reversed(parent.items):
                mode = _context_mode(analysis, item.context_expr)
                if mode is not None:
                    return mode, _function_of(index, parent)
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            entered = _entered_before(analysis, parent, node)
            if entered is not None:
                return entered, parent
            for deco in reversed(parent.decorator_list):
                mode = _context_mode(analysis, deco)
                if mode is not None:
                    return mode, parent
            return None, parent
        if isinstance(parent, ast.ClassDef):
            return None, None
        current, parent = parent, index.parents.get(parent)
    return None, None


def _function_of(index: Index, node: ast.AST) -> FunctionNode | None:
    """The function `node` runs in; None at module level or directly in a class body."""
    scope = enclosing(index, node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    return scope if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def mode_at(analysis: Analysis, node: ast.AST) -> GradMode:
    """The grad mode `node` runs in, over every way the file reaches it."""
    mode, fn = local_mode(analysis, node)
    if mode is not None:
        return mode
    if fn is None:
        return GradMode.ON  # module-level code runs in the default mode
    return function_mode(analysis, fn)


def function_mode(analysis: Analysis, fn: FunctionNode) -> GradMode:
    """The mode `fn`'s body inherits: a convention, else the join over its call sites."""
    state = _state(analysis)
    if fn in state.modes:
        return state.modes[fn]
    state.modes[fn] = GradMode.UNKNOWN  # recursion: a cycle of callers decides nothing
    result = _function_mode(analysis, fn, state)
    state.modes[fn] = result
    return result


def _function_mode(analysis: Analysis, fn: FunctionNode, state: _GradState) -> GradMode:
    if fn.name in state.conventions and _is_method(analysis, fn):
        return GradMode.OFF
    calls = callers(analysis, fn)
    if not calls:
        return GradMode.UNKNOWN
    modes = {mode_at(analysis, call) for call in calls}
    return modes.pop() if len(modes) == 1 else GradMode.UNKNOWN


def callers(analysis: Analysis, fn: FunctionNode) -> list[ast.Call]:
    """Calls in the file that may run `fn`: `fn(...)` for a function, `obj.fn(...)` for a
    method (by name: the receiver's class is rarely known)."""
    index = index_of(analysis)
    method = _is_method(analysis, fn)
    found = []
    for call in index.by_name.get(fn.name, ()):
        if (method and isinstance(call.func, ast.Attribute)) or (not method and isinstance(call.func, ast.Name)):
            found.append(call)
    return [c for c in found if not inside(index, c, fn)]



def _is_method(analysis: Analysis, fn: FunctionNode) -> bool:
    return isinstance(index_of(analysis).parents.get(fn), ast.ClassDef)


class _GradState:
    def __init__(self, conventions: Iterable[str]) -> None:
        self.conventions = frozenset(conventions)
        self.modes: dict[ast.AST, GradMode] = {}


def _state(analysis: Analysis) -> _GradState:
    index = index_of(analysis)
    conventions = frozenset([*NO_GRAD_CONVENTIONS, *analysis.no_grad_functions])
    state = getattr(index, "_grad_state", None)
    if not isinstance(state, _GradState) or state.conventions != conventions:
        state = _GradState(conventions)
        index._grad_state = state  # type: ignore[attr-defined]
    return state
