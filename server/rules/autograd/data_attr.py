"""SL204 data-attr: `.data` on a tensor, where it can hide a write from autograd.

`.data` is everywhere in released model code, nearly always where it is harmless: weight
init, checkpoint loading and conversion, re-parameterisation, optimizer steps under
`@torch.no_grad()`, and `.data = other` swaps to another shape or dtype (for which no
`detach()`/`no_grad` spelling exists). The rule speaks only where `.data` runs on a training
or runtime path (forward, step or update code, or code that trains) with grad on or
unknown there: see `grad_mode`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit
from stridelens.server.rules.shared.ast_index import (
    LOOP_NODES,
    METADATA_METHODS,
    SCOPE_NODES,
    enclosing,
    enclosing_stmt,
    index_of,
    inside,
    is_inplace_method,
    torch_alias,
    torch_path,
)
from stridelens.server.rules.shared.edits import (
    dot_attr_range,
    line_indent,
    make_finding,
    replace_range,
)
from stridelens.server.rules.shared.grad_mode import GradMode, mode_at
from stridelens.server.rules.shared.parameters import is_tensor_expr
from stridelens.server.rules.shared.training_loops import loop_trains

# Functions that run once, outside training: init, load/convert/export, re-parameterise.
_SETUP_FUNCTION = re.compile(
    r"(^__init__$|init|reset|load|convert|checkpoint|state_dict|pretrained|remap|filter_fn|reparam|fuse|"
    r"^_?(tie|resize|prune|quantize|merge|switch_to_deploy|deploy|export|copy_weights|transfer))",
    re.IGNORECASE,
)
# Forward, step and update code: what runs every iteration.
_RUNTIME_FUNCTION = re.compile(
    r"(^_*forward|forward$|^__call__$|^step$|_step$|^update|_update$|^train|^fit$|_epoch$)",
    re.IGNORECASE,
)
_FORWARD_FUNCTION = re.compile(r"forward|__call__", re.IGNORECASE)
# Functions that drive a training loop: what runs before their loop is set-up.
_DRIVER_FUNCTION = re.compile(r"(^train|^fit$|_epoch$)", re.IGNORECASE)
# What reads only a tensor's metadata: `p.data.shape`, `p.data.size()`, `p.data.device`.
_METADATA_ATTRS = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "is_sparse", "is_quantized", "is_meta", "layout", "names",
     "itemsize", "nbytes", "requires_grad", "is_leaf"}
)  # fmt: skip
# Methods whose result shares no storage with the tensor (a Python value, a copy, a
# reduction or a comparison): no later write can reach it, and since `.data` needs no grad no
# graph saves anything of it.
_FRESH_VALUE_METHODS = frozenset(
    {"item", "tolist", "clone", "norm", "sum", "mean", "max", "min", "amax", "amin", "std", "var", "abs", "sign",
     "ne", "eq", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "any", "all", "count_nonzero", "argmax",
     "argmin", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "sqrt", "square", "pow", "exp",
     "log", "neg"}
)  # fmt: skip
# Functions of a tensor that read only its metadata (`torch.zeros_like(p.data)`), or give a
# Python value.
_METADATA_FUNCTIONS = frozenset({"len", "isinstance", "type", "id", "float", "int", "bool", "hash"})

# Reads whose `.detach()` replacement computes the same thing (nothing can write through it).
_PURE_READ_METHODS = frozenset(
    {"item", "tolist", "cpu", "numpy", "clone", "norm", "abs", "sum", "mean", "max", "min", "float",
     "double", "half", "size", "dim", "numel", "to", "detach", "ne", "eq", "std", "var", "sign"}
)


def data_use(parents: dict[ast.AST, ast.AST], node: ast.Attribute) -> str:
    """"assign" (`x.data = y`), "inplace" (`x.data.add_(1)`, `x.data[i] = v`, `x.data += v`),
    else "read"."""
    if isinstance(node.ctx, ast.Store):
        return "assign"
    parent = parents.get(node)
    if isinstance(parent, ast.Attribute) and isinstance(parents.get(parent), ast.Call):
        call = parents[parent]
        if isinstance(call, ast.Call) and call.func is parent and is_inplace_method(parent.attr):
            return "inplace"
    if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
        return "inplace"
    if isinstance(parent, ast.AugAssign) and parent.target is node:
        return "inplace"
    return "read"


def _pure_read(parents: dict[ast.AST, ast.AST], node: ast.Attribute) -> bool:
    """The value read is only consumed (an argument, an operand, a non-mutating method), so
    `.detach()` gives the same result and cannot change what later code writes."""
    parent = parents.get(node)
    if isinstance(parent, (ast.BinOp, ast.Compare, ast.UnaryOp)):
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        return not (isinstance(parent.func, ast.Attribute) and parent.func.attr.endswith("_"))
    if isinstance(parent, ast.Attribute) and parent.attr in _PURE_READ_METHODS:
        return isinstance(parents.get(parent), ast.Call)
    return False


def harmless_read(analysis: Analysis, parents: dict[ast.AST, ast.AST], node: ast.Attribute) -> bool:
    """A read of `x.data` that `.detach()` would not change in any way: only metadata is read
    (`.shape`, `.size()`, `torch.zeros_like(x.data)`), or the value read is a Python value, a
    copy, a reduction or a comparison of it: nothing aliases the storage afterwards, so no
    write can go unchecked through it."""
    parent = parents.get(node)
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.Attribute):
        if parent.attr in _METADATA_ATTRS:
            return True
        call = parents.get(parent)
        return (
            isinstance(call, ast.Call)
            and call.func is parent
            and (parent.attr in METADATA_METHODS or parent.attr in _FRESH_VALUE_METHODS)
        )
    if isinstance(parent, ast.Call) and node in parent.args:
        path = torch_path(analysis, parent.func)
        if path is not None and path.startswith("torch.") and path.endswith("_like"):
            return True  # `torch.zeros_like(p.data)`: a new tensor of its shape
        return isinstance(parent.func, ast.Name) and parent.func.id in _METADATA_FUNCTIONS
    return False


def _before_training_loop(analysis: Analysis, fn: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.AST) -> bool:
    """In a driver function (`train`, `fit`), a statement outside its training loops and
    before the first one: set-up (`m.weight.data.normal_(0, 0.02)` before the epochs)."""
    index = index_of(analysis)
    loops = [loop for loop in index.loops if enclosing(index, loop, SCOPE_NODES) is fn and loop_trains(index, loop)]
    if not loops:
        return False
    first = min(loop.lineno for loop in loops)
    return getattr(node, "lineno", 0) < first and all(not inside(index, node, loop) for loop in loops)


def _function_of(analysis: Analysis, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    scope = enclosing(index_of(analysis), node, SCOPE_NODES)
    return scope if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def runtime_path(analysis: Analysis, node: ast.AST) -> str | None:
    """Why `node` runs every training iteration ("in `forward`", "in training code"), or
    None for setup code and code whose role is unknown."""
    index = index_of(analysis)
    fn = _function_of(analysis, node)
    if fn is None:
        if enclosing(index, node, (ast.ClassDef, ast.Lambda)) is not None:
            return None
        return "in the training loop" if _in_training_loop(analysis, node) else None
    outer: ast.AST | None = fn
    while isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if _SETUP_FUNCTION.search(outer.name):
            return None
        outer = _function_of(analysis, outer)
    if _RUNTIME_FUNCTION.search(fn.name):
        if _DRIVER_FUNCTION.search(fn.name) and _before_training_loop(analysis, fn, node):
            return None
        return f"in `{fn.name}`"
    return "in the training loop" if _in_training_loop(analysis, node) else None


def _where_text(where_run: str) -> str:
    """`runtime_path`'s answer in the user's language (the English one is matched on)."""
    if where_run == "in the training loop":
        return tr("in the training loop")
    return tr("in `{function}`").format(function=where_run[len("in `") : -1])


def _in_training_loop(analysis: Analysis, node: ast.AST) -> bool:
    """Inside a loop (of the same function) that calls `backward()` or an optimizer step:
    the lines before that loop are set-up (loading embeddings, casting weights)."""
    index = index_of(analysis)
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, SCOPE_NODES):
        if isinstance(parent, LOOP_NODES) and loop_trains(index, parent):
            return True
        parent = index.parents.get(parent)
    return False


_ELEMENTWISE_METHODS = frozenset({"clamp", "clamp_min", "clamp_max", "abs", "neg", "mul", "add", "sub", "div", "sign"})


def _same_layout(analysis: Analysis, target: ast.expr, value: ast.expr) -> bool:
    """`x.data = y` with `y` known to have `x`'s shape and dtype (an in-place copy would do):
    from the facts, or `y` is `x` (or `x.data`) scaled by a number (`p.data = p.data * 2`)."""
    a, b = analysis.fact_of(target), analysis.fact_of(value)
    if a is not None and b is not None and a.shape is not None and a.shape == b.shape:
        return a.dtype is not None and a.dtype == b.dtype
    return _scaled_copy(value, ast.dump(target))


def _scaled_copy(value: ast.expr, target: str) -> bool:
    def same(node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "data":
            node = node.value
        return ast.dump(node) == target

    def number(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)

    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        return (same(value.left) and number(value.right)) or (number(value.left) and same(value.right))
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        return same(value.operand)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _ELEMENTWISE_METHODS:
        return same(value.func.value) and all(number(arg) for arg in value.args)
    return False


def check_data_attr(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    if not any(a.attr == "data" for a in index.attributes):
        return out
    torch_name = torch_alias(analysis)
    for attr in index.attributes:
        if attr.attr != "data" or not is_tensor_expr(analysis, attr.value):
            continue
        stmt = enclosing_stmt(index, attr)
        if stmt is None or mode_at(analysis, stmt) is GradMode.OFF:
            continue
        where_run = runtime_path(analysis, stmt)
        if where_run is None:
            continue
        # Forward code: a graph will use the value (warning). Else an update between steps.
        in_forward = bool(_FORWARD_FUNCTION.search(where_run))
        use = data_use(index.parents, attr)
        if use == "read" and harmless_read(analysis, index.parents, attr):
            continue  # metadata, a copy or a Python value: `.detach()` would change nothing
        if use == "assign" and not (isinstance(stmt, ast.Assign) and _same_layout(analysis, attr.value, stmt.value)):
            continue  # a swap to another shape/dtype: `.data =` is the only spelling
        where = dot_attr_range(analysis, attr)
        fix: Fix | None = None
        if use == "read":
            parent = index.parents.get(attr)
            if isinstance(parent, ast.Attribute) and parent.attr == "detach":
                fix = Fix(tr("Remove `.data` (`.detach()` follows)"), (replace_range(where, ""),))
            elif _pure_read(index.parents, attr):
                fix = Fix(tr("Use `.detach()`"), (replace_range(where, ".detach()"),))
            message = tr(
                "`.data` {where} bypasses autograd: the result shares storage but the version "
                "counter does not see later writes, so wrong gradients go unnoticed; use `.detach()`"
            ).format(where=_where_text(where_run))
        else:
            if in_forward:
                message = tr(
                    "in-place update through `.data` {where} is invisible to autograd (gradients "
                    "are silently computed from the changed value); do it on the tensor itself under "
                    "`torch.no_grad()`"
                ).format(where=_where_text(where_run))
            else:
                message = tr(
                    "in-place update through `.data` {where} is invisible to autograd's version "
                    "check: a graph that still saved this tensor would silently use the new value; "
                    "do it on the tensor itself under `torch.no_grad()`, which autograd can check"
                ).format(where=_where_text(where_run))
            if use == "inplace" and torch_name is not None and isinstance(stmt, (ast.Expr, ast.AugAssign, ast.Assign)):
                fix = _no_grad_fix(analysis, stmt, attr, torch_name)
        finding = make_finding(analysis, SL204, where, message, fix)
        if not in_forward:
            # EMA, a hand-written SGD, grad scaling: no graph is waiting on the value, so
            # the cost is a check autograd cannot make.
            finding = replace(finding, severity=Severity.INFORMATION)
        out.append(finding)
    return out


def _no_grad_fix(analysis: Analysis, stmt: ast.stmt, attr: ast.Attribute, torch_name: str) -> Fix | None:
    if stmt.lineno != stmt.end_lineno:
        return None
    line = stmt.lineno
    text = analysis.lines[line - 1]
    indent = line_indent(analysis, line)
    start = analysis.char_col(line, stmt.col_offset)
    end = analysis.char_col(line, stmt.end_col_offset or 0)
    if start != len(indent) or (text[end:].strip() and not text[end:].strip().startswith("#")):
        return None
    d_line, d_col, _, d_end = dot_attr_range(analysis, attr)
    if d_line != line:
        return None
    body = text[start : d_col - 1] + text[d_end - 1 : end]
    new = f"{indent}with {torch_name}.no_grad():\n{indent}    {body}"
    title = tr("Update under `torch.no_grad()` instead of through `.data`")
    return Fix(title, (TextEdit(line, 1, line, end + 1, new),))


SL204 = register(
    Rule(
        code="SL204",
        name="data-attr",
        severity=Severity.WARNING,
        summary="`.data` on a tensor in forward, step, update or training code with grad on",
        doc=RuleDoc(
            what="What it promises: a finding only where `.data` behaves differently from "
            "`.detach()` / `torch.no_grad()` in a way that can change results unnoticed: an "
            "in-place write through `.data` (autograd's version check never sees it), or a read "
            "whose result still shares the tensor's storage (kept in a name, an operand or "
            "argument a graph may save), which a later in-place write, through either, changes "
            "unchecked. "
            "Flags `.data` on something the analysis knows is a tensor or parameter (a "
            "tensor fact, `.weight`/`.bias`/`.grad`, a loop over `parameters()`, "
            "`named_parameters()`, `buffers()`, `state_dict().items()`, an optimizer's "
            "`group[\"params\"]` or a `zip` of those, `state_dict()[k]`) when all of these hold: "
            "(1) it runs on a training or runtime path: a function named like forward "
            "(`forward`, `_forward_impl`, `__call__`), a step or update (`step`, `training_step`, "
            "`update_parameters`), `train*`/`fit`/`*_epoch`, or any function or script that "
            "calls `backward()` or an optimizer step; "
            "(2) grad mode there is on or unknown: not inside `torch.no_grad()`/`inference_mode()` "
            "(blocks, decorators, `stack.enter_context(...)`), not in a function only called "
            "under no_grad, not in a framework hook that runs without grad; "
            "(3) it is not setup code: nothing inside a function named like init, load, convert, "
            "checkpoint, state_dict, pretrained, remap, reparam, fuse, reset "
            "(`reset_parameters`), tie/resize/prune/export, and nothing in a `train*` / `fit` / "
            "`*_epoch` function before and outside its training loops (weight init before the "
            "epochs); "
            "(4) for `x.data = y`: only when `y` is known to have `x`'s shape and dtype. A swap "
            "to another shape or dtype has no safe replacement and is left alone; "
            "(5) for a read: not one that only reads metadata (`.shape`, `.dtype`, `.device`, "
            "`.size()`, `.dim()`, `.numel()`, `len(...)`, `torch.zeros_like(p.data)` and the "
            "other `*_like` factories, `p.data.new_zeros(...)`), nor one whose result shares no "
            "storage with the tensor (`.item()`, `.tolist()`, `.clone()`, reductions such as "
            "`.norm()` / `.sum()`, comparisons): nothing aliases the storage afterwards, so "
            "nothing can be hidden. A warning "
            "in forward code, where a graph will use the value; information in step, update "
            "and training-loop code (EMA updates, hand-written SGD), where the cost is a check "
            "autograd cannot make.",
            why="`.data` is a pre-0.4 leftover: it returns a tensor sharing storage but outside "
            "autograd's version tracking, so an in-place change through it is silent and the "
            "gradients are computed from the changed value. `.detach()` shares storage too but "
            "makes such a bug raise at backward instead.",
            example="def forward(self, x):\n    w = self.weight.data  # SL204\n    return x @ w",
            fix="For reads consumed on the spot (an argument, an operand), `.detach()` "
            "(the quick fix; none is offered where the result is kept and could be written "
            "later). For in-place updates, do them on the tensor itself inside `with "
            "torch.no_grad():` (the quick fix wraps the statement).",
        ),
        check=check_data_attr,
    )
)
