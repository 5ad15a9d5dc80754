"""SL215 clip-before-unscale: gradient clipping of still-scaled AMP gradients."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit
from stridelens.server.rules.shared.ast_index import (
    call_name,
    dotted,
    enclosing_scope,
    enclosing_stmt,
    index_of,
    torch_path,
    walk_body,
)
from stridelens.server.rules.shared.edits import line_indent, make_finding, node_range

_CLIPS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})
# Scaler classes whose `scale(loss).backward()` leaves scaled gradients in `.grad`.
_SCALER_CLASSES = ("GradScaler", "ShardedGradScaler")

Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _is_scaler_constructor(analysis: Analysis, value: ast.expr) -> bool:
    if not isinstance(value, ast.Call):
        return False
    path = torch_path(analysis, value.func) or dotted(value.func) or ""
    return path.rsplit(".", 1)[-1] in _SCALER_CLASSES


def _constructed_scalers(analysis: Analysis) -> dict[tuple[Scope, str], bool]:
    """(function, name) and (None, attribute) bound to a `GradScaler(...)` in the file -> whether
    it may be enabled (False for a literal `enabled=False`: `scale()` and `unscale_()` then do
    nothing). Plain names count in the function that binds them; `self.scaler` file-wide."""
    index = index_of(analysis)
    cached = getattr(index, "_grad_scalers", None)
    if isinstance(cached, dict):
        return cached
    found: dict[tuple[Scope, str], bool] = {}
    for call in index.calls:
        if not _is_scaler_constructor(analysis, call):
            continue
        stmt = enclosing_stmt(index, call)
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign) and stmt.value is call:
            targets = list(stmt.targets)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is call:
            targets = [stmt.target]
        enabled = not any(
            kw.arg == "enabled" and isinstance(kw.value, ast.Constant) and kw.value.value is False
            for kw in call.keywords
        )
        for target in targets:
            name = dotted(target)
            if name is None:
                continue
            scope = enclosing_scope(index, call) if isinstance(target, ast.Name) else None
            key = (scope if not isinstance(scope, ast.Lambda) else None, name)
            found[key] = found.get(key, False) or enabled
    index._grad_scalers = found  # type: ignore[attr-defined]
    return found


def _is_torch_clip(analysis: Analysis, call: ast.Call) -> bool:
    """`clip_grad_norm_(...)`, `torch.nn.utils.clip_grad_norm_(...)`, `nn.utils.clip_grad_value_`:
    not `accelerator.clip_grad_norm_` / `fabric.clip_gradients` / an FSDP module's method,
    which unscale (or shard) themselves."""
    if call_name(call) not in _CLIPS:
        return False
    path = torch_path(analysis, call.func)
    if path is not None:
        return path.startswith("torch.")
    if isinstance(call.func, ast.Name):
        return True
    if isinstance(call.func, ast.Attribute):
        receiver = dotted(call.func.value)
        return receiver is not None and receiver.rsplit(".", 1)[-1] in ("utils", "clip_grad")
    return False


def _scaled_backward_receiver(node: ast.AST) -> str | None:
    """`S` of `S.scale(loss).backward()`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"):
        return None
    inner = node.func.value
    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "scale":
        return dotted(inner.func.value)
    return None


def _method_receiver(node: ast.AST, method: str) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
        return dotted(node.func.value)
    return None


def _exclusive(index_parents: dict[ast.AST, ast.AST], a: ast.AST, b: ast.AST) -> bool:
    """`a` and `b` lie in different branches of one `if`/`match`: never both run."""
    chain_a: dict[ast.AST, ast.AST] = {}
    child: ast.AST = a
    parent = index_parents.get(a)
    while parent is not None:
        chain_a[parent] = child
        child, parent = parent, index_parents.get(parent)
    child, parent = b, index_parents.get(b)
    while parent is not None:
        if parent in chain_a:
            from_a, from_b = chain_a[parent], child
            if isinstance(parent, ast.If):
                return (from_a in parent.body) != (from_b in parent.body) and from_a is not parent.test and from_b is not parent.test
            if isinstance(parent, ast.Match):
                return from_a is not from_b and isinstance(from_a, ast.match_case) and isinstance(from_b, ast.match_case)
            return False
        child, parent = parent, index_parents.get(parent)
    return False


def _stmt_alone_on_line(analysis: Analysis, stmt: ast.stmt) -> bool:
    text = analysis.lines[stmt.lineno - 1] if 0 < stmt.lineno <= len(analysis.lines) else ""
    return text[: analysis.char_col(stmt.lineno, stmt.col_offset)].strip() == ""


def check_clip_before_unscale(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    clips = [c for name in _CLIPS for c in index.by_name.get(name, ())]
    if not clips:
        return out
    scalers = _constructed_scalers(analysis)
    by_scope: dict[Scope, list[ast.AST]] = {}
    for clip in sorted(clips, key=_pos):
        if not _is_torch_clip(analysis, clip):
            continue
        scope = enclosing_scope(index, clip)
        if isinstance(scope, ast.Lambda):
            continue
        if scope not in by_scope:
            body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
            by_scope[scope] = list(walk_body(body))
        nodes = by_scope[scope]
        steps: dict[str, list[ast.Call]] = {}
        updated: set[str] = set()
        for node in nodes:
            receiver = _method_receiver(node, "step")
            if receiver is not None:
                assert isinstance(node, ast.Call)
                steps.setdefault(receiver, []).append(node)
            receiver = _method_receiver(node, "update")
            if receiver is not None:
                updated.add(receiver)
        unscales = [
            n for n in nodes if isinstance(n, ast.Call) and "unscale" in call_name(n)
        ]
        backward = None
        for node in nodes:
            if _pos(node) >= _pos(clip):
                break
            scaler = _scaled_backward_receiver(node)
            if scaler is None:
                continue
            key = (scope if "." not in scaler else None, scaler)
            if scalers.get(key) is False:
                continue  # GradScaler(enabled=False): nothing is scaled
            if key not in scalers and scaler not in steps and scaler not in updated:
                continue  # `.scale(...)` of something not shown to be a scaler
            if _exclusive(index.parents, node, clip):
                continue
            backward = (node, scaler)
        if backward is None:
            continue
        scaler = backward[1]
        if any(_pos(u) < _pos(clip) for u in unscales):
            continue  # unscaled before the clip (in this function)
        fix = _fix(analysis, clip, scaler, steps.get(scaler, []), later_unscale=any(_pos(u) > _pos(clip) for u in unscales))
        message = tr(
            "`{clip}` runs after `{scaler}.scale(...).backward()` with no "
            "`{scaler}.unscale_(optimizer)` before it: it clips the scaled gradients (multiplied by "
            "the loss scale, 65536 at start), so once unscaled they end up clipped to the "
            "threshold divided by the scale, far too hard; call `{scaler}.unscale_(optimizer)` "
            "right before clipping"
        ).format(clip=call_name(clip), scaler=scaler)
        out.append(make_finding(analysis, SL215, node_range(analysis, clip), message, fix))
    return out


def _fix(analysis: Analysis, clip: ast.Call, scaler: str, steps: list[ast.Call], later_unscale: bool) -> Fix | None:
    """Insert `scaler.unscale_(opt)` on its own line before the clip, the optimizer taken from
    the scaler's `step(opt)` calls (one optimizer only; none when another `unscale_` follows:
    a second unscale_ before `update()` raises)."""
    if later_unscale:
        return None
    optimizers = {dotted(s.args[0]) for s in steps if s.args}
    if len(optimizers) != 1:
        return None
    optimizer = optimizers.pop()
    if optimizer is None:
        return None
    stmt = enclosing_stmt(index_of(analysis), clip)
    if stmt is None or not _stmt_alone_on_line(analysis, stmt):
        return None
    indent = line_indent(analysis, stmt.lineno)
    edit = TextEdit(stmt.lineno, 1, stmt.lineno, 1, f"{indent}{scaler}.unscale_({optimizer})\n")
    return Fix(tr("Insert `{scaler}.unscale_({optimizer})` before the clip").format(scaler=scaler, optimizer=optimizer), (edit,))


SL215 = register(
    Rule(
        code="SL215",
        name="clip-before-unscale",
        severity=Severity.ERROR,
        summary="gradient clipping after `scaler.scale(loss).backward()` without `scaler.unscale_(optimizer)` first",
        doc=RuleDoc(
            what="Flags `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` (also imported bare, "
            "or through `nn.utils`) that runs after a `S.scale(loss).backward()` of the same "
            "function, with no `unscale_` call before it in that function. `S` must be a grad "
            "scaler: bound in the file to `torch.amp.GradScaler(...)`, `torch.cuda.amp.GradScaler()`, "
            "`GradScaler()` or `ShardedGradScaler()` (not with a literal `enabled=False`), or a "
            "name/attribute with `S.step(...)` or `S.update()` calls in the same function. Silent "
            "when an `unscale_` (or a call whose name contains `unscale`) precedes the clip, when "
            "the clip and the scaled backward are in different branches of one `if`, and for "
            "`accelerator.clip_grad_norm_` / Lightning's clipping, which unscale themselves.",
            why="`scaler.scale(loss).backward()` leaves gradients multiplied by the loss scale "
            "(65536 at start, adjusted every step). Clipping them before `unscale_` compares the "
            "scaled norm with `max_norm`: measured on torch 2.13 with `GradScaler('cpu', "
            "init_scale=1024)`, a 12285 scaled norm is clipped to 1.0, leaving real gradients of "
            "norm 0.001 after unscaling, a thousand times smaller than the threshold asked for. "
            "Training silently runs with a far smaller effective learning rate.",
            example="scaler.scale(loss).backward()\n"
            "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # SL215\n"
            "scaler.step(optimizer)\nscaler.update()",
            fix="Call `scaler.unscale_(optimizer)` right before the clip (the quick fix inserts it, "
            "with the optimizer of the function's `scaler.step(optimizer)`, when there is exactly "
            "one); `scaler.step` then knows the gradients are unscaled and does not unscale again.",
        ),
        check=check_clip_before_unscale,
    )
)
