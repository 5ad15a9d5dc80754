"""Training-loop rules: inference without no_grad, clip order, zero_grad (SL206, SL209, SL211)."""

from __future__ import annotations

import ast
import re

from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import ClassInfo, InstanceValue, ModuleValue
from stridelens.server.rules import register
from stridelens.server.rules._helpers import (
    LOOP_NODES,
    call_name,
    dotted,
    enclosing,
    enclosing_stmt,
    index_of,
    is_backward_call,
    is_optimizer_step,
    line_indent,
    make_finding,
    node_range,
    step_optimizer_text,
    torch_alias,
    walk_body,
    walk_scope,
    wrap_statement_edit,
)
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit

# ----------------------------------------------------------------------------- SL206
_INFERENCE_FUNCTION = re.compile(r"^_*(evaluate|eval|validate|validation|predict|infer|inference)(_|$)", re.IGNORECASE)
_MODEL_NAME = re.compile(r"(^|_)(model|net|network)$", re.IGNORECASE)
# Helpers named after what they do to a model: `is_peft_model(m)`, `load_model(path)`.
_PREDICATE = re.compile(r"^_*(is|has|get|load|build|create|make|init|wrap|unwrap|prepare|save|to)_", re.IGNORECASE)


def _model_key(analysis: Analysis, callee: ast.expr) -> str | None:
    """A stable name for a model-like callee: `model`, `self.model`, or a known module."""
    name = dotted(callee)
    if name is None:
        return None
    value = analysis.values.get(callee)
    if isinstance(value, InstanceValue) and value.cls.is_module:
        return name
    if isinstance(value, ModuleValue):
        return name
    last = name.rsplit(".", 1)[-1]
    if not _MODEL_NAME.search(last) or _PREDICATE.match(last) or isinstance(value, ClassInfo):
        return None  # `class TinyModel` builds one rather than running it
    if isinstance(callee, ast.Name) and callee.id in _module_functions(analysis):
        return None  # `def _is_peft_model(m)` in this file: a helper named after a model
    return name


def _module_functions(analysis: Analysis) -> set[str]:
    return {s.name for s in analysis.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _trains(body: list[ast.stmt]) -> bool:
    return any(is_backward_call(node) or is_optimizer_step(node) for node in walk_body(body))


def _called_without_grad(analysis: Analysis, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """`fn` is called somewhere in the file only from code where grad is off."""
    index = index_of(analysis)
    calls = [c for c in index.by_name.get(fn.name, ()) if call_name(c) == fn.name]
    if not calls:
        return False
    for call in calls:
        stmt = enclosing_stmt(index, call)
        if stmt is None or analysis.grad_enabled_at(stmt) is not False:
            return False
    return True


def _submodule_of_self(fn: ast.AST | None, callee: ast.expr) -> bool:
    """`self.head(x)` in a method: a layer of the model this method belongs to. A model's own
    `predict` / `_inference_forward` is a step of its forward; its caller picks the grad mode.
    (`self.model(x)` in a trainer's `evaluate` stays an inference call.)"""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
        return False
    self_name = fn.args.args[0].arg
    return (
        isinstance(callee, ast.Attribute)
        and isinstance(callee.value, ast.Name)
        and callee.value.id == self_name
        and not _MODEL_NAME.search(callee.attr)
    )


def check_inference_without_no_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    if not index.by_name.get("eval") and not any(_INFERENCE_FUNCTION.search(fn.name) for fn in index.functions):
        return out
    torch_name = torch_alias(analysis)
    scopes: list[tuple[ast.AST | None, list[ast.stmt]]] = [(None, analysis.tree.body)]
    scopes += [(fn, fn.body) for fn in index.functions]
    for fn, body in scopes:
        if _trains(body):
            continue
        inference_fn = (
            isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            and bool(_INFERENCE_FUNCTION.search(fn.name))
            and not _called_without_grad(analysis, fn)
        )
        evaluated: set[str] = set()
        for node in walk_body(body):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("eval", "train") and not node.args[1:]:
                key = _model_key(analysis, func.value)
                if key is not None:
                    if func.attr == "eval" and not node.args:
                        evaluated.add(key)
                    elif func.attr == "train" and not (
                        node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is False
                    ):
                        evaluated.discard(key)
                continue
            key = _model_key(analysis, func)
            if key is None or not (key in evaluated or inference_fn):
                continue
            if key not in evaluated and _submodule_of_self(fn, func):
                continue
            if not node.args and not node.keywords:
                continue
            stmt = enclosing_stmt(index, node)
            if stmt is None or analysis.grad_enabled_at(stmt) is not True:
                continue
            if enclosing(index, node, (ast.Lambda,)) is not None:
                continue
            why = f"after `{key}.eval()`" if key in evaluated else f"in `{getattr(fn, 'name', '?')}`"
            fix = None
            if torch_name is not None and isinstance(stmt, (ast.Assign, ast.Expr, ast.Return, ast.AnnAssign)):
                edit = wrap_statement_edit(analysis, stmt, f"with {torch_name}.inference_mode()")
                if edit is not None:
                    fix = Fix("Wrap in `with torch.inference_mode():`", (edit,))
            message = (
                f"forward of `{key}` {why} runs with autograd on: it records a graph and keeps "
                "every activation for a backward that never comes; wrap it in "
                "`torch.inference_mode()` or `torch.no_grad()`"
            )
            out.append(make_finding(analysis, SL206, node_range(analysis, node), message, fix))
    return out


SL206 = register(
    Rule(
        code="SL206",
        name="inference-without-no-grad",
        severity=Severity.WARNING,
        summary="model forward after `.eval()` or in evaluate/predict/infer functions with autograd on",
        doc=RuleDoc(
            what="Flags a model forward (`model(x)`, `self.model(x)`, a known `nn.Module`) after "
            "`model.eval()`, or inside a function named evaluate/validate/predict/infer..., when "
            "it runs outside `torch.no_grad()`, `torch.inference_mode()` and "
            "`set_grad_enabled(False)` (blocks and decorators). Functions that also call "
            "`backward()` or `optimizer.step()`, functions only ever called under no_grad "
            "in the same file, and a method's calls of its own layers (`self.head(x)` in a "
            "model's `predict`: a step of its forward) are left alone.",
            why="`.eval()` only switches dropout and batch-norm behaviour; it does not turn "
            "autograd off. Without no_grad every forward records a graph and keeps its "
            "activations: several times the memory, and slower.",
            example="model.eval()\nfor x in loader:\n    preds = model(x)  # SL206",
            fix="Wrap the forward in `with torch.inference_mode():` (the quick fix wraps the "
            "statement) or decorate the function with `@torch.no_grad()`.",
        ),
        check=check_inference_without_no_grad,
    )
)


# ----------------------------------------------------------------------------- SL209
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
                problem = "before `backward()`: it clips the previous step's gradients (or zeros), not this step's"
        elif last_backward is not None and "step" in before[last_backward:] and "step" not in after:
            problem = "after the optimizer step: the step already used the unclipped gradients"
        if problem is None:
            continue
        reported.add(clip)
        message = f"`{call_name(clip)}` runs {problem}; call it between `backward()` and the optimizer step"
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


# ----------------------------------------------------------------------------- SL211
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


def check_missing_zero_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    reported: set[ast.AST] = set()
    for loop in index.loops:
        if not index.backward_calls_in(loop):
            continue
        nodes = list(walk_scope(loop))
        steps = [n for n in nodes if is_optimizer_step(n)]
        if not steps or _zeroes_grads(loop):
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
                    f"Insert `{optimizer}.zero_grad()` after the step",
                    (TextEdit(end_line, len(text) + 1, end_line, len(text) + 1, f"\n{indent}{optimizer}.zero_grad()"),),
                )
            message = (
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
            "`.grad` itself.",
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

