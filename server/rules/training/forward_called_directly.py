"""SL217 forward-called-directly: `module.forward(x)` instead of `module(x)` skips the hooks."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import (
    ClassInfo,
    InstanceValue,
    ModuleValue,
    Opaque,
    TorchRef,
    Unknown,
)
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import dotted, index_of, torch_path
from stridelens.server.rules.shared.edits import (
    dot_attr_range,
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
)

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


_HOOK_METHODS = frozenset(
    {"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
     "register_full_backward_pre_hook", "register_backward_hook"}
)  # fmt: skip
# Hooks on every module (torch.nn.modules.module.register_module_forward_hook & co.).
_GLOBAL_HOOKS = frozenset(
    {"register_module_forward_hook", "register_module_forward_pre_hook", "register_module_full_backward_hook",
     "register_module_full_backward_pre_hook", "register_module_backward_hook"}
)  # fmt: skip
# torch functions that install hooks on the module they are given (torch 2.13): the old
# weight/spectral norm recompute the weight in a forward pre-hook, pruning applies its mask in
# one, FSDP2 / replicate / composable checkpoint all-gather or checkpoint in them,
# quantization's prepare attaches its observers as forward hooks.
_HOOKING_FUNCTIONS = frozenset(
    {"torch.nn.utils.weight_norm", "torch.nn.utils.weight_norm.weight_norm", "torch.nn.utils.spectral_norm",
     "torch.nn.utils.spectral_norm.spectral_norm", "torch.ao.quantization.prepare", "torch.ao.quantization.prepare_qat",
     "torch.quantization.prepare", "torch.quantization.prepare_qat"}
)  # fmt: skip
_HOOKING_NAMES = frozenset({"fully_shard", "replicate"})  # torch.distributed's, under any path
_MODULE_WALKS = frozenset({"modules", "named_modules", "children", "named_children"})


@dataclass
class _Hooks:
    """Where the file makes calling a module differ from calling its `forward`: the
    receivers (as written; `self.<attr>` per class) given hooks or a hook-installing
    wrapper, the prefixes of loops over `X.modules()` that hook every submodule, the classes
    that hook `self` (every instance), the receivers of `.compile()`, hooks on every
    module, and what did each (for the message)."""

    texts: dict[str, tuple[str, int]] = field(default_factory=dict)
    prefixes: dict[str, tuple[str, int]] = field(default_factory=dict)
    classes: dict[int, tuple[str, int]] = field(default_factory=dict)
    compiled: dict[str, tuple[str, int]] = field(default_factory=dict)
    everywhere: tuple[str, int] | None = None


def _walked_module(analysis: Analysis, name: ast.expr, node: ast.AST) -> ast.expr | None:
    """`X` when `name` is the target of an enclosing `for m in X.modules()` (or
    `named_modules()`, `children()`...)."""
    if not isinstance(name, ast.Name):
        return None
    index = index_of(analysis)
    parent = index.parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.For, ast.AsyncFor)):
            it, target = parent.iter, parent.target
            if isinstance(target, ast.Tuple) and target.elts:
                target = target.elts[-1]
            if (
                isinstance(target, ast.Name)
                and target.id == name.id
                and isinstance(it, ast.Call)
                and isinstance(it.func, ast.Attribute)
                and it.func.attr in _MODULE_WALKS
            ):
                return it.func.value
        parent = index.parents.get(parent)
    return None


def _mark(analysis: Analysis, hooks: _Hooks, target: ast.expr, node: ast.AST, how: str) -> None:
    where = (how, getattr(node, "lineno", 0))
    walked = _walked_module(analysis, target, node)
    if walked is not None:
        target = walked  # every module under it, itself included
        text = dotted(target)
        if text is not None:
            hooks.prefixes.setdefault(_text_key(analysis, text, node), where)
    else:
        text = dotted(target)
    if text is None:
        return
    if text == "self":
        cls = _class_of(analysis, node)
        if cls is not None:
            hooks.classes.setdefault(id(cls), where)
    elif walked is None:
        hooks.texts.setdefault(_text_key(analysis, text, node), where)


def _text_key(analysis: Analysis, text: str, node: ast.AST) -> str:
    """`text`, qualified by its class where it starts with `self.` (the same words mean
    another module in another class)."""
    if text.split(".", 1)[0] != "self":
        return text
    cls = _class_of(analysis, node)
    return f"{id(cls)}:{text}"


def _class_of(analysis: Analysis, node: ast.AST) -> ast.ClassDef | None:
    index = index_of(analysis)
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, ast.ClassDef):
        parent = index.parents.get(parent)
    return parent


def _hooks_of(analysis: Analysis) -> _Hooks:
    index = index_of(analysis)
    cached = getattr(index, "_sl217_hooks", None)
    if isinstance(cached, _Hooks):
        return cached
    hooks = _Hooks()
    for call in index.calls:
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        path = torch_path(analysis, func) or ""
        if name in _GLOBAL_HOOKS:
            hooks.everywhere = hooks.everywhere or (segment(analysis, func), call.lineno)
        elif name in _HOOK_METHODS and isinstance(func, ast.Attribute):
            _mark(analysis, hooks, func.value, call, segment(analysis, func))
        elif (path in _HOOKING_FUNCTIONS or name in _HOOKING_NAMES or path.startswith("torch.nn.utils.prune.")
              or (path.startswith("torch.distributed.") and name == "checkpoint")) and call.args:
            if path.endswith(("prune.remove", "prune.is_pruned")):
                continue
            how = short(segment(analysis, func))
            targets = [call.args[0]]
            if path.endswith("global_unstructured") and isinstance(call.args[0], (ast.List, ast.Tuple)):
                targets = [e.elts[0] for e in call.args[0].elts if isinstance(e, ast.Tuple) and e.elts]
            for target in targets:
                _mark(analysis, hooks, target, call, how)
            stmt = index.parents.get(call)
            if isinstance(stmt, ast.Assign) and stmt.value is call:  # `self.conv = weight_norm(nn.Conv1d(...))`
                for target in stmt.targets:
                    _mark(analysis, hooks, target, call, how)
        elif name == "compile" and isinstance(func, ast.Attribute) and not call.args[:1] and path == "":
            text = dotted(func.value)
            if text is not None:  # `model.compile()`: compiles `__call__`, not `forward`
                hooks.compiled.setdefault(text, (segment(analysis, func), call.lineno))
    index._sl217_hooks = hooks  # type: ignore[attr-defined]
    return hooks


def _skipped(analysis: Analysis, hooks: _Hooks, receiver: ast.expr, call: ast.Call) -> tuple[str, tuple[str, int]] | None:
    """What calling `receiver.forward(...)` skips that calling `receiver(...)` would run:
    ("hooks", (how, line)) or ("compiled", (how, line)); None when the file installs nothing."""
    if hooks.everywhere is not None:
        return "hooks", hooks.everywhere
    text = _text_key(analysis, dotted(receiver) or segment(analysis, receiver), call)
    if text in hooks.texts:
        return "hooks", hooks.texts[text]
    for prefix, where in hooks.prefixes.items():
        if text == prefix or text.startswith((prefix + ".", prefix + "[")):
            return "hooks", where
    value = analysis.values.get(receiver)
    if isinstance(value, InstanceValue) and id(value.cls.node) in hooks.classes:
        return "hooks", hooks.classes[id(value.cls.node)]  # the class hooks every instance
    if text == "self":
        cls = _class_of(analysis, call)
        if cls is not None and id(cls) in hooks.classes:
            return "hooks", hooks.classes[id(cls)]
    if text in hooks.compiled:
        return "compiled", hooks.compiled[text]
    return None


def check_forward_called_directly(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    calls = index.by_name.get("forward", ())
    hooks = _hooks_of(analysis) if calls else _Hooks()
    for call in calls:
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
        skipped = _skipped(analysis, hooks, receiver, call)
        if skipped is None:
            continue  # nothing in the file hooks it: `module(x)` would run the same code
        value = analysis.values.get(receiver)
        if isinstance(value, ModuleValue) or (isinstance(value, InstanceValue) and value.cls.is_module):
            if isinstance(value, InstanceValue) and _overrides_call(value.cls.node):
                continue  # its own `__call__` decides what calling it does
        elif isinstance(cls, ast.ClassDef) and _is_module_class(analysis, cls):
            pass
        elif value is not None and not isinstance(value, Unknown | Opaque):
            continue  # known to be something else
        elif isinstance(receiver, ast.Subscript) and isinstance(analysis.values.get(receiver.value), ModuleValue):
            pass  # `model[0]` of an `nn.Sequential` / `nn.ModuleList`
        elif skipped[0] != "hooks" or dotted(receiver) is None:
            continue
        # else: given module hooks (`register_forward_hook`, `weight_norm(...)`), so a module
        kind, (how, line) = skipped
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
        if kind == "compiled":
            message = tr(
                "`.forward(...)` called directly ({what}): `{how}` at line {line} compiled the "
                "module's `__call__`, so this call runs the uncompiled forward; call `{module}(...)`"
            ).format(what=what, how=how, line=line, module=short(name))
        else:
            message = tr(
                "`.forward(...)` called directly ({what}): it skips the module's own forward hooks "
                "and pre-hooks (its children's still fire), and `{how}` at line {line} installs "
                "such hooks on it; call `{module}(...)`"
            ).format(what=what, how=how, line=line, module=short(name))
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
            "`torch.nn.Module`, `Module`, or a module class of the file), only where the file "
            "makes calling the module differ from calling its `forward`: it registers hooks on "
            "that module (`m.register_forward_hook` / `register_forward_pre_hook` / "
            "`register_full_backward_hook` / `register_full_backward_pre_hook` on the same "
            "receiver as written, on `self` in the class, or on every module of a loop over "
            "`X.modules()` / `named_modules()` / `children()` for the modules under `X`), on "
            "every module (`torch.nn.modules.module.register_module_forward_hook` & co.), or "
            "applies a function that installs hooks on it (`torch.nn.utils.weight_norm` / "
            "`spectral_norm`, `torch.nn.utils.prune.*`, `fully_shard`, `replicate`, the "
            "composable `checkpoint`, quantization's `prepare`), or compiles it in place with "
            "`m.compile()` (which compiles `__call__`, not `forward`). A module so hooked counts "
            "as a module even where the analysis does not know its value. Where nothing in the "
            "file hooks the module, `.forward(x)` runs exactly what `m(x)` would, and the rule is "
            "silent. Also silent for "
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
            "either way; `torch.compile(m)` returns a module whose `forward` is the compiled "
            "`__call__`, so neither is flagged. Hooks a file does not install (another module's, "
            "a tool's at run time) are not seen: the rule stays silent there rather than guess.",
            example="layer = weight_norm(nn.Linear(4, 4))\nout = layer.forward(x)  # SL217",
            fix="Call the module: `model(x)` (the quick fix removes `.forward`; it is not applied "
            "by `--fix`, since the hooks then run, which is the point but changes behaviour).",
        ),
        check=check_forward_called_directly,
    )
)
