"""SL206 inference-without-no-grad: a model forward at inference with autograd on."""

from __future__ import annotations

import ast
import re

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import ClassInfo, InstanceValue, ModuleValue
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared import grad_mode
from stridelens.server.rules.shared.ast_index import (
    dotted,
    enclosing,
    enclosing_stmt,
    index_of,
    torch_alias,
    walk_body,
)
from stridelens.server.rules.shared.edits import (
    make_finding,
    node_range,
    wrap_statement_edit,
)
from stridelens.server.rules.shared.grad_mode import GradMode
from stridelens.server.rules.shared.training_loops import (
    body_trains,
    is_backward_call,
    is_optimizer_step,
)

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


# Methods that run a model's forward by another name (`model.encode(src)`). Not `generate`:
# transformers decorates its `generate` with `torch.no_grad()` itself.
_FORWARD_METHOD = re.compile(
    r"^(forward\w*|encode\w*|decode\w*|greedy_decode|beam_search\w*|predict\w*|infer\w*|sample|translate|"
    r"embed\w*|extract_features)$"
)


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


def _toggle(analysis: Analysis, call: ast.Call) -> tuple[str, bool] | None:
    """`model.eval()` -> ("model", True); `model.train()` -> ("model", False)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("eval", "train") and not call.args[1:]):
        return None
    key = _model_key(analysis, func.value)
    if key is None:
        return None
    if func.attr == "eval":
        return (key, True) if not call.args else None
    off = call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False
    return key, bool(off)


def _scopes(analysis: Analysis) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, list[ast.stmt]]]:
    index = index_of(analysis)
    return [(None, analysis.tree.body), *[(fn, fn.body) for fn in index.functions]]


def _evaluated_at_calls(analysis: Analysis) -> dict[ast.Call, frozenset[str]]:
    """The models in eval mode at each call of the file (for `eval()` in a caller)."""
    at: dict[ast.Call, frozenset[str]] = {}
    for _fn, body in _scopes(analysis):
        evaluated: set[str] = set()
        for node in walk_body(body):
            if isinstance(node, ast.Call):
                toggle = _toggle(analysis, node)
                if toggle is not None:
                    (evaluated.add if toggle[1] else evaluated.discard)(toggle[0])
                elif evaluated:
                    at[node] = frozenset(evaluated)
    return at


def _params_evaluated_by_callers(
    analysis: Analysis, fn: ast.FunctionDef | ast.AsyncFunctionDef, at: dict[ast.Call, frozenset[str]]
) -> dict[str, str]:
    """Parameters every call site of `fn` passes a model in eval mode to: param -> caller."""
    calls = grad_mode.callers(analysis, fn)
    if not calls:
        return {}
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    if params and params[0] in ("self", "cls") and isinstance(index_of(analysis).parents.get(fn), ast.ClassDef):
        params = params[1:]
    found: dict[str, str] | None = None
    for call in calls:
        evaluated = at.get(call, frozenset())
        here: dict[str, str] = {}
        caller = grad_mode.local_mode(analysis, call)[1]
        for param, arg in zip(params, call.args, strict=False):
            key = _model_key(analysis, arg)
            if key is not None and key in evaluated:
                here[param] = getattr(caller, "name", "the caller")
        for kw in call.keywords:
            key = _model_key(analysis, kw.value) if kw.arg in params else None
            if kw.arg is not None and key is not None and key in evaluated:
                here[kw.arg] = getattr(caller, "name", tr("the caller"))
        found = here if found is None else {k: v for k, v in found.items() if k in here}
    return found or {}


def _forward_of(analysis: Analysis, call: ast.Call) -> tuple[str, str] | None:
    """(model key, how it is called) for `model(x)` or `model.encode(x)`."""
    key = _model_key(analysis, call.func)
    if key is not None:
        return key, tr("forward of `{model}`").format(model=key)
    func = call.func
    if isinstance(func, ast.Attribute) and _FORWARD_METHOD.match(func.attr):
        key = _model_key(analysis, func.value)
        if key is not None:
            return key, tr("`{model}.{method}(...)`").format(model=key, method=func.attr)
    return None


def check_inference_without_no_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    if not index.by_name.get("eval") and not any(_INFERENCE_FUNCTION.search(fn.name) for fn in index.functions):
        return out
    torch_name = torch_alias(analysis)
    at = _evaluated_at_calls(analysis) if index.by_name.get("eval") else {}

    def report(node: ast.Call, how: str, why: str) -> None:
        stmt = enclosing_stmt(index, node)
        assert stmt is not None
        fix = None
        if torch_name is not None and isinstance(stmt, (ast.Assign, ast.Expr, ast.Return, ast.AnnAssign)):
            edit = wrap_statement_edit(analysis, stmt, f"with {torch_name}.inference_mode()")
            if edit is not None:
                fix = Fix(tr("Wrap in `with torch.inference_mode():`"), (edit,))
        message = tr(
            "{forward} {why} runs with autograd on: it records a graph and keeps every activation "
            "for a backward that never comes; wrap it in `torch.inference_mode()` or `torch.no_grad()`"
        ).format(forward=how, why=why)
        out.append(make_finding(analysis, SL206, node_range(analysis, node), message, fix))

    for fn, body in _scopes(analysis):
        by_callers = _params_evaluated_by_callers(analysis, fn, at) if fn is not None and at else {}
        evaluated: dict[str, str] = {
            p: tr("after `{model}.eval()` in `{caller}`").format(model=p, caller=caller) for p, caller in by_callers.items()
        }
        named = (
            fn is not None and bool(_INFERENCE_FUNCTION.search(fn.name)) and not body_trains(body)
        )
        # Forwards after `eval()` wait here until the model goes back to `train()` (reported)
        # or a backward / optimizer step uses them (training in eval mode: dropped).
        pending: dict[str, list[tuple[ast.Call, str, str]]] = {}
        for node in walk_body(body):
            if is_backward_call(node) or is_optimizer_step(node):
                for key in evaluated:
                    pending.pop(key, None)
                continue
            if not isinstance(node, ast.Call):
                continue
            toggle = _toggle(analysis, node)
            if toggle is not None:
                key, on = toggle
                if on:
                    evaluated[key] = tr("after `{model}.eval()`").format(model=key)
                else:
                    evaluated.pop(key, None)
                    for hit in pending.pop(key, []):
                        report(*hit)
                continue
            forward = _forward_of(analysis, node)
            if forward is None or (not node.args and not node.keywords):
                continue
            key, how = forward
            if enclosing(index, node, (ast.Lambda,)) is not None:
                continue
            stmt = enclosing_stmt(index, node)
            if stmt is None:
                continue
            mode = grad_mode.mode_at(analysis, stmt)
            if key in evaluated:
                if mode is not GradMode.OFF:  # the eval() is the evidence: unknown callers do not silence it
                    pending.setdefault(key, []).append((node, how, evaluated[key]))
            elif named and mode is GradMode.ON and not _submodule_of_self(fn, node.func) and key == _model_key(analysis, node.func):
                report(node, how, tr("in `{function}`").format(function=getattr(fn, "name", "?")))
        for hits in pending.values():
            for hit in hits:
                report(*hit)
    return out


SL206 = register(
    Rule(
        code="SL206",
        name="inference-without-no-grad",
        severity=Severity.WARNING,
        summary="model forward after `.eval()`, or in an evaluate/predict function known to run with grad on",
        doc=RuleDoc(
            what="Flags a model forward (`model(x)`, `self.model(x)`, a known `nn.Module`, or a "
            "forward by another name: `model.encode(...)`, `.decode`, `.forward_features`, "
            "`.predict`...) that runs with grad on or unknown after the same model's `.eval()`: "
            "in the same function or script, or in a caller that passes the evaluated model in "
            "(`model.eval(); greedy_decode(model, src)`). Also a forward in a function named "
            "evaluate/validate/predict/infer... whose grad mode is known to be on (every caller in "
            "the file runs it with grad). Silent: under `torch.no_grad()`, `inference_mode()`, "
            "`set_grad_enabled(False)` (blocks, decorators, `stack.enter_context(...)`); in a "
            "function only called under no_grad; in framework hooks that run without grad "
            "(Lightning `validation_step`/`test_step`/`predict_step`, mmengine `val_step`/"
            "`test_step`, and `[tool.stridelens] no-grad-functions`); when a `backward()` or "
            "optimizer step follows while the model is still in eval mode (training with frozen "
            "batch norm); for `.generate(...)`, which transformers runs under no_grad itself; "
            "and a model's own layers (`self.head(x)`) in its `predict`.",
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


