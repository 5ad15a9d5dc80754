"""Module-call rules: `module.forward(x)` instead of `module(x)` (SL217)."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import ClassInfo, InstanceValue, ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules._helpers import (
    dot_attr_range,
    dotted,
    index_of,
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
)
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity

_MODULE_BASES = frozenset({"nn.Module", "torch.nn.Module", "Module"})


def _is_module_class(analysis: Analysis, cls: ast.ClassDef) -> bool:
    for base in cls.bases:
        value = analysis.values.get(base)
        if isinstance(value, TorchRef) and value.path == "torch.nn.Module":
            return True
        if isinstance(value, ClassInfo) and value.is_module:
            return True
        if dotted(base) in _MODULE_BASES:
            return True
    return False


def _own_method(analysis: Analysis, call: ast.Call, receiver: ast.expr) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The method (of a class) whose first parameter `receiver` is: `self` of `self.forward`."""
    if not isinstance(receiver, ast.Name):
        return None
    index = index_of(analysis)
    node = index.parents.get(call)
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node = index.parents.get(node)
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    args = [*node.args.posonlyargs, *node.args.args]
    if not args or args[0].arg != receiver.id:
        return None
    if any(dotted(d) in ("staticmethod", "classmethod") for d in node.decorator_list):
        return None
    return node if isinstance(index.parents.get(node), ast.ClassDef) else None


def _overrides_call(cls: ast.AST | None) -> bool:
    return isinstance(cls, ast.ClassDef) and any(
        isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "__call__" for s in cls.body
    )


def check_forward_called_directly(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for call in index.by_name.get("forward", ()):
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        receiver = func.value
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            continue  # `super().forward(x)`: the parent's forward, from inside this one
        method = _own_method(analysis, call, receiver)
        cls = index.parents.get(method) if method is not None else None
        if method is not None and (method.name in ("forward", "__call__") or _overrides_call(cls)):
            # Inside its own `forward`: a recursive call on part of the input (the loss of each
            # auxiliary output in Mask2Former-style losses); the outer call already ran the hooks.
            # In `__call__` or next to one: the class routes calls to forward itself.
            continue
        value = analysis.values.get(receiver)
        if isinstance(value, ModuleValue) or (isinstance(value, InstanceValue) and value.cls.is_module):
            if isinstance(value, InstanceValue) and _overrides_call(value.cls.node):
                continue  # its own `__call__` decides what calling it does
        elif not (isinstance(cls, ast.ClassDef) and _is_module_class(analysis, cls)):
            continue
        if method is not None:
            what = tr("`{receiver}` is the module itself, in `{method}`").format(
                receiver=segment(analysis, receiver), method=method.name
            )
        else:
            what = tr("`{receiver}` is an nn.Module").format(receiver=short(segment(analysis, receiver)))
        name = segment(analysis, receiver)
        fix = None
        where = dot_attr_range(analysis, func)
        text = analysis.lines[where[0] - 1] if 0 < where[0] <= len(analysis.lines) else ""
        if where[0] == where[2] and text[where[1] - 1 : where[1]] == ".":
            title = tr("Call `{module}(...)` instead of `.forward(...)`").format(module=short(name))
            fix = Fix(title, (replace_range(where, ""),))
        message = tr(
            "`.forward(...)` called directly ({what}): it skips the module's own forward hooks "
            "and pre-hooks (its children's still fire), and with them what wrappers attach as hooks "
            "(FSDP2 `fully_shard`'s parameter all-gather, `replicate`, composable `checkpoint`); "
            "call `{module}(...)`"
        ).format(what=what, module=short(name))
        out.append(make_finding(analysis, SL217, node_range(analysis, call), message, fix))
    return out


SL217 = register(
    Rule(
        code="SL217",
        name="forward-called-directly",
        severity=Severity.WARNING,
        summary="`module.forward(x)` instead of `module(x)`",
        doc=RuleDoc(
            what="Flags `m.forward(...)` where the analysis knows `m` is an nn.Module instance (an "
            "`nn` layer or an instance of one of the file's nn.Module subclasses), and "
            "`self.forward(...)` in a method of an nn.Module subclass (bases `nn.Module`, "
            "`torch.nn.Module`, `Module`, or a module class of the file). Silent for "
            "`super().forward(...)`, for `Class.forward(self, x)`, for `.forward` of anything not "
            "known to be a module, in classes that define their own `__call__`, and for "
            "`self.forward(...)` inside the class's own `forward`: that is a recursion on part of "
            "the input (transformers' Mask2Former / MaskFormer / OneFormer / EoMT losses compute "
            "each auxiliary output's loss that way), whose outer call already ran the hooks once; "
            "`self(...)` there would run them again per auxiliary output.",
            why="`module(x)` runs `nn.Module.__call__`: forward pre-hooks, `forward`, forward "
            "hooks, and backward-hook setup. `module.forward(x)` skips all of that for this module "
            "(its children are still called through `__call__`, so their hooks fire), so hook-based "
            "tools (pruning, quantization observers, activation capture, `torch.utils.hooks`) see "
            "nothing, and neither do wrappers that work through hooks: FSDP2's `fully_shard` "
            "all-gathers a module's sharded parameters in a forward pre-hook (torch 2.13, "
            "`_fsdp_state.py`), as do `replicate` and the composable `checkpoint`. (The classic "
            "`DistributedDataParallel` / `FullyShardedDataParallel` wrapper classes do their work "
            "inside their own `forward`, so `ddp.forward(x)` still syncs; `ddp.module.forward(x)` "
            "does not, nor does `ddp.module(x)`.) accelerate's `add_hook_to_module` (device "
            "placement, offloading) replaces the `forward` attribute itself, so those hooks run "
            "either way.",
            example="out = model.forward(x)  # SL217",
            fix="Call the module: `model(x)` (the quick fix removes `.forward`).",
        ),
        check=check_forward_called_directly,
        safe_fix=True,
    )
)
