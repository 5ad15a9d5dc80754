"""Shared plumbing for rules: positions, a one-walk index of the tree, small AST queries.

Rules consume the engine's facts (`analysis.values`, `analysis.events`); this module only
answers syntax/flow questions (where is the `.view` name, which loop holds this call, is
this name stored between two statements) and converts `ast` byte columns to the 1-based
character columns of `Finding`.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import cast

from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis.values import InstanceValue, ModuleValue, TorchRef
from stridelens.server.rules.base import Finding, Fix, Rule, TextEdit

Range = tuple[int, int, int, int]  # line, col, end_line, end_col (1-based chars, end exclusive)

SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
LOOP_NODES = (ast.For, ast.AsyncFor, ast.While)


@dataclass
class Index:
    """Everything rules iterate over, gathered in one walk of the tree."""

    calls: list[ast.Call] = field(default_factory=list)
    attributes: list[ast.Attribute] = field(default_factory=list)
    loops: list[ast.For | ast.AsyncFor | ast.While] = field(default_factory=list)
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=list)
    # In-place statement forms: `x += y` and `x[i] = y` (SL213's candidates).
    aug_assigns: list[ast.AugAssign] = field(default_factory=list)
    subscript_stores: list[ast.Subscript] = field(default_factory=list)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    # Calls by method/function name (`backward`, `step`, `view`...).
    by_name: dict[str, list[ast.Call]] = field(default_factory=dict)
    imports_torch: bool = False
    # Memo of SL201: whether a function (or the module) runs backward / an optimizer step.
    training_scopes: dict[ast.AST, bool] = field(default_factory=dict)
    # Memo of `loop_trains`: whether a loop's body calls backward / an optimizer step.
    training_loops: dict[ast.AST, bool] = field(default_factory=dict)
    _backward_by_loop: dict[ast.AST, list[ast.Call]] | None = None

    def backward_calls_in(self, loop: ast.AST) -> list[ast.Call]:
        """`x.backward()` calls inside `loop` (outside nested functions), from the parent
        links of the (few) backward calls rather than a walk of every loop."""
        if self._backward_by_loop is None:
            self._backward_by_loop = {}
            for call in self.by_name.get("backward", ()):
                if not isinstance(call.func, ast.Attribute):
                    continue
                node = self.parents.get(call)
                while node is not None and not isinstance(node, SCOPE_NODES):
                    if isinstance(node, LOOP_NODES):
                        self._backward_by_loop.setdefault(node, []).append(call)
                    node = self.parents.get(node)
        return self._backward_by_loop.get(loop, [])


# Fields that never hold child nodes worth indexing: strings, and the shared ctx/operator
# singletons (`Load()`, `Add()`), which are not positions in the file.
_LEAF_FIELDS = frozenset({"ctx", "id", "attr", "arg", "name", "kind", "op", "ops", "level"})


_GETTERS: dict[type, Callable[[ast.AST], tuple[object, ...]]] = {}
_SOURCE_ORDER = attrgetter("lineno", "col_offset")


def _getter(kind: type) -> Callable[[ast.AST], tuple[object, ...]]:
    """A C-level getter of the fields of `kind` that may hold child nodes (not ctx, names,
    ops...), always returning a tuple; made once per node type."""
    fields = tuple(f for f in getattr(kind, "_fields", ()) if f not in _LEAF_FIELDS)
    if len(fields) == 1:
        one = attrgetter(fields[0])
        getter: Callable[[ast.AST], tuple[object, ...]] = lambda node: (one(node),)  # noqa: E731
    elif fields:
        getter = attrgetter(*fields)
    else:
        getter = lambda node: ()  # noqa: E731
    _GETTERS[kind] = getter
    return getter


# Node types with no child nodes: recorded as children, never pushed to be walked.
_LEAF_TYPES = frozenset({ast.Name, ast.Constant})


def index_of(analysis: Analysis) -> Index:
    cached = getattr(analysis, "_rules_index", None)
    if isinstance(cached, Index):
        return cached
    index = Index()
    parents = index.parents
    calls = index.calls
    attributes = index.attributes
    stack: list[ast.AST] = [analysis.tree]
    push = stack.append
    pop = stack.pop
    getters = _GETTERS
    leaves = _LEAF_TYPES
    AST = ast.AST
    while stack:
        node = pop()
        kind = type(node)
        getter = getters.get(kind)
        if getter is None:
            getter = _getter(kind)
        # `ast.iter_child_nodes`, inlined, one C call per node for its fields, and leaves
        # never walked: this walk is most of a file's rule time.
        for value in getter(node):
            if value.__class__ is list:
                for child in value:
                    if isinstance(child, AST):
                        parents[child] = node
                        if child.__class__ not in leaves:
                            push(child)
            elif isinstance(value, AST):
                parents[value] = node
                if value.__class__ not in leaves:
                    push(value)
        kind_index = _KIND_OF.get(kind)
        if kind_index is None:
            continue
        if kind_index == _CALL:
            calls.append(node)  # type: ignore[arg-type]
            called = call_name(node)  # type: ignore[arg-type]
            if called:
                index.by_name.setdefault(called, []).append(node)  # type: ignore[arg-type]
        elif kind_index == _ATTRIBUTE:
            attributes.append(node)  # type: ignore[arg-type]
        elif kind_index == _SUBSCRIPT:
            if isinstance(node.ctx, ast.Store):  # type: ignore[attr-defined]
                index.subscript_stores.append(node)  # type: ignore[arg-type]
        elif kind_index == _AUG_ASSIGN:
            index.aug_assigns.append(node)  # type: ignore[arg-type]
        elif kind_index == _LOOP:
            index.loops.append(node)  # type: ignore[arg-type]
        elif kind_index == _FUNCTION:
            index.functions.append(node)  # type: ignore[arg-type]
        elif kind_index == _IMPORT:
            if any(a.name == "torch" or a.name.startswith("torch.") for a in node.names):  # type: ignore[attr-defined]
                index.imports_torch = True
        elif kind_index == _IMPORT_FROM:
            module = node.module  # type: ignore[attr-defined]
            if node.level == 0 and module and (module == "torch" or module.startswith("torch.")):  # type: ignore[attr-defined]
                index.imports_torch = True
    # Source order for stable output and order-sensitive rules (all of these have positions).
    key = _SOURCE_ORDER
    index.calls.sort(key=key)
    index.attributes.sort(key=key)
    index.loops.sort(key=key)
    index.functions.sort(key=key)
    for by_name in index.by_name.values():
        by_name.sort(key=key)
    analysis._rules_index = index  # type: ignore[attr-defined]
    return index


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`'s nodes in its order (breadth first), less the shared ctx/operator
    singletons (`Load()`, `Add()`), at a fraction of its cost: one C getter per node and no
    generator per child list."""
    getters = _GETTERS
    leaves = _LEAF_TYPES
    AST = ast.AST
    todo = deque([node])
    pop = todo.popleft
    push = todo.append
    while todo:
        node = pop()
        yield node
        kind = node.__class__
        if kind in leaves:
            continue
        getter = getters.get(kind) or _getter(kind)
        for value in getter(node):
            if value.__class__ is list:
                for child in value:
                    if isinstance(child, AST):
                        push(child)
            elif isinstance(value, AST):
                push(value)


_CALL, _ATTRIBUTE, _SUBSCRIPT, _AUG_ASSIGN, _LOOP, _FUNCTION, _IMPORT, _IMPORT_FROM = range(8)
# What the index keeps of each node type (a dict lookup instead of a chain of isinstance).
_KIND_OF: dict[type, int] = {
    ast.Call: _CALL,
    ast.Attribute: _ATTRIBUTE,
    ast.Subscript: _SUBSCRIPT,
    ast.AugAssign: _AUG_ASSIGN,
    ast.For: _LOOP,
    ast.AsyncFor: _LOOP,
    ast.While: _LOOP,
    ast.FunctionDef: _FUNCTION,
    ast.AsyncFunctionDef: _FUNCTION,
    ast.Import: _IMPORT,
    ast.ImportFrom: _IMPORT_FROM,
}


def _pos_key(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


# ----------------------------------------------------------------------------- positions
def node_range(analysis: Analysis, node: ast.AST) -> Range:
    line = getattr(node, "lineno", 1)
    end_line = getattr(node, "end_lineno", None) or line
    col = analysis.char_col(line, getattr(node, "col_offset", 0))
    end_col = analysis.char_col(end_line, getattr(node, "end_col_offset", None) or 0)
    return line, col + 1, end_line, end_col + 1


def attr_name_range(analysis: Analysis, node: ast.Attribute) -> Range:
    """The range of the attribute name itself (`view` in `x.t().view(-1)`)."""
    end_line = node.end_lineno or node.lineno
    end_byte = node.end_col_offset or 0
    start_byte = end_byte - len(node.attr.encode("utf-8"))
    return (
        end_line,
        analysis.char_col(end_line, start_byte) + 1,
        end_line,
        analysis.char_col(end_line, end_byte) + 1,
    )


def dot_attr_range(analysis: Analysis, node: ast.Attribute) -> Range:
    """From the `.` before the attribute name to its end (`.view`), when on one line."""
    line, col, end_line, end_col = attr_name_range(analysis, node)
    text = analysis.lines[line - 1] if 0 < line <= len(analysis.lines) else ""
    i = col - 2  # 0-based index just before the name
    while i >= 0 and text[i] in " \t":
        i -= 1
    if i >= 0 and text[i] == ".":
        return line, i + 1, end_line, end_col
    return line, col, end_line, end_col


def call_from_attr_range(analysis: Analysis, call: ast.Call) -> Range:
    """`.view(-1)` of `x.t().view(-1)`: from the method's dot to the end of the call."""
    assert isinstance(call.func, ast.Attribute)
    line, col, _, _ = dot_attr_range(analysis, call.func)
    _, _, end_line, end_col = node_range(analysis, call)
    return line, col, end_line, end_col


def make_finding(
    analysis: Analysis, rule: Rule, where: Range, message: str, fix: Fix | None = None
) -> Finding:
    line, col, end_line, end_col = where
    return Finding(analysis.path, line, col, end_line, end_col, rule.code, message, rule.severity, fix)


def insert_at(line: int, col: int, text: str) -> TextEdit:
    return TextEdit(line, col, line, col, text)


def replace_range(where: Range, text: str) -> TextEdit:
    return TextEdit(where[0], where[1], where[2], where[3], text)


def segment(analysis: Analysis, node: ast.AST) -> str:
    try:
        return analysis.segment(node)
    except Exception:  # noqa: BLE001 - ast.unparse of an odd node
        return "?"


def short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def append_edit(analysis: Analysis, expr: ast.expr, suffix: str) -> list[TextEdit]:
    """Edits turning `expr` into `expr<suffix>` (wrapping it in parentheses when needed)."""
    line, col, end_line, end_col = node_range(analysis, expr)
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return [insert_at(end_line, end_col, suffix)]
    return [insert_at(line, col, "("), insert_at(end_line, end_col, ")" + suffix)]


# --------------------------------------------------------------------------- AST queries
def call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def dotted(node: ast.AST) -> str | None:
    """`self.optimizer` -> "self.optimizer"; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def torch_path(analysis: Analysis, func: ast.expr) -> str | None:
    value = analysis.values.get(func)
    return value.path if isinstance(value, TorchRef) else None


def keyword_true(call: ast.Call, name: str) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            return kw
    return None


def enclosing(index: Index, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, kinds):
        parent = index.parents.get(parent)
    return parent


def inside(index: Index, node: ast.AST, outer: ast.AST) -> bool:
    """Whether `outer` is a proper ancestor of `node`."""
    parent = index.parents.get(node)
    while parent is not None:
        if parent is outer:
            return True
        parent = index.parents.get(parent)
    return False


def enclosing_stmt(index: Index, node: ast.AST) -> ast.stmt | None:
    current: ast.AST | None = node
    while current is not None and not isinstance(current, ast.stmt):
        current = index.parents.get(current)
    return current


def enclosing_scope(index: Index, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    """The function (or None for module level) whose body holds `node`."""
    found = enclosing(index, node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    return cast("ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None", found)  # one of those kinds


def walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes under `node` in source order, not descending into nested defs/classes/lambdas."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, SCOPE_NODES):
            yield from walk_scope(child)


def walk_body(body: list[ast.stmt]) -> Iterator[ast.AST]:
    for stmt in body:
        yield stmt
        if not isinstance(stmt, SCOPE_NODES):
            yield from walk_scope(stmt)


# Trailing-underscore methods that write no tensor data (flags, memory placement).
NOT_DATA_WRITES = frozenset({"requires_grad_", "retain_grad", "share_memory_", "pin_memory_", "record_stream_"})
# Statements that only hold others: rules walking statements one by one skip them.
BLOCK_STATEMENTS = (ast.If, ast.With, ast.AsyncWith, ast.Try, ast.While, ast.Match)


def is_inplace_method(name: str) -> bool:
    """`add_`, `zero_`, `copy_`: a method that writes its receiver's data in place."""
    return name.endswith("_") and not name.endswith("__") and name not in NOT_DATA_WRITES


# In source order: a `try`'s handlers come before its `else` and `finally`.
_BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody", "cases")


def walk_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of `body` in source order, nested blocks included, nested defs and
    classes not entered (and no expressions: much cheaper than `walk_body`)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, SCOPE_NODES):
            continue
        for name in _BLOCK_FIELDS:
            block = getattr(stmt, name, None)
            if block:
                for child in block:
                    if isinstance(child, ast.stmt):
                        yield from walk_statements([child])
                    else:  # except handlers, match cases
                        yield from walk_statements(getattr(child, "body", []))


def stores_name(node: ast.AST, name: str) -> bool:
    """Whether `node` (re)binds `name` anywhere outside nested scopes."""
    for sub in [node, *walk_scope(node)]:
        if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, (ast.Store, ast.Del)):
            return True
    return False


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


# ------------------------------------------------------------------------ tensor-ness
PARAM_ATTRS = frozenset({"weight", "bias", "grad"})


_PARAM_METHODS = frozenset({"parameters", "buffers"})
_NAMED_PARAM_METHODS = frozenset({"named_parameters", "named_buffers"})


def _param_source(node: ast.expr, dicts: set[str]) -> str | None:
    """What iterating `node` gives: "tensor" (`m.parameters()`, `group["params"]`), "named"
    ((name, tensor) pairs: `m.named_parameters()`, `m.state_dict().items()`), or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in _PARAM_METHODS:
            return "tensor"
        if method in _NAMED_PARAM_METHODS:
            return "named"
        if method == "items" and _is_param_dict(node.func.value, dicts):
            return "named"
        if method == "values" and _is_param_dict(node.func.value, dicts):
            return "tensor"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "params":
        return "tensor"  # an optimizer's `for p in group["params"]`
    return None


def _is_param_dict(node: ast.expr, dicts: set[str]) -> bool:
    """`m.state_dict()`, `dict(m.named_parameters())`, or a name/attribute bound to one."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict":
            return True
        if isinstance(node.func, ast.Name) and node.func.id == "dict" and len(node.args) == 1:
            return _param_source(node.args[0], dicts) == "named"
        return False
    if isinstance(node, ast.IfExp):
        return _is_param_dict(node.body, dicts) and _is_param_dict(node.orelse, dicts)
    name = dotted(node)
    return name is not None and name in dicts


def _bind_param_target(target: ast.expr, source: str | None, names: set[str]) -> None:
    if source == "tensor" and isinstance(target, ast.Name):
        names.add(target.id)
    elif source == "named" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
        if isinstance(target.elts[1], ast.Name):
            names.add(target.elts[1].id)


def _loop_param_names(loop: ast.For | ast.AsyncFor, dicts: set[str]) -> set[str]:
    """The names this one loop binds to parameters or buffers (see `param_loop_names`)."""
    names: set[str] = set()
    it, target = loop.iter, loop.target
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:
            it, target = it.args[0], target.elts[1]
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip":
        if isinstance(target, ast.Tuple) and len(target.elts) == len(it.args):
            for arg, sub in zip(it.args, target.elts, strict=True):
                _bind_param_target(sub, _param_source(arg, dicts), names)
        return names
    _bind_param_target(target, _param_source(it, dicts), names)
    return names


def _binds(target: ast.expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))


def param_loop_names(analysis: Analysis) -> set[str]:
    """Names bound to parameters or buffers by a loop: `for p in m.parameters()`, `for n, p in
    m.named_parameters()`, `for k, v in m.state_dict().items()`, `for p in group["params"]`,
    and `zip(...)` of those (`for a, b in zip(m.parameters(), ema.parameters())`)."""
    index = index_of(analysis)
    cached = getattr(index, "_param_names", None)
    if isinstance(cached, set):
        return cached
    dicts = param_dict_names(analysis)
    names: set[str] = set()
    for loop in index.loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            names |= _loop_param_names(loop, dicts)
    index._param_names = names  # type: ignore[attr-defined]
    return names


def is_param_loop_name(analysis: Analysis, node: ast.expr) -> bool:
    """`node` is a name a parameter loop binds *here*: the innermost enclosing `for` that binds
    the name is a parameter loop, or (no enclosing loop binds it) one in the same function
    does. A name is not one file-wide: `for param in m.parameters()` in one method says
    nothing of `for param in m.named_parameters()` (a `(name, param)` tuple) in another."""
    if not isinstance(node, ast.Name) or node.id not in param_loop_names(analysis):
        return False
    index = index_of(analysis)
    dicts = param_dict_names(analysis)
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(parent, (ast.For, ast.AsyncFor)) and _binds(parent.target, node.id):
            return node.id in _loop_param_names(parent, dicts)
        parent = index.parents.get(parent)
    scope = enclosing_scope(index, node)
    return any(
        isinstance(loop, (ast.For, ast.AsyncFor)) and node.id in _loop_param_names(loop, dicts) and enclosing_scope(index, loop) is scope
        for loop in index.loops
    )


def param_dict_names(analysis: Analysis) -> set[str]:
    """Names and `self.` attributes bound to a dict of parameters (`sd = m.state_dict()`)."""
    index = index_of(analysis)
    cached = getattr(index, "_param_dicts", None)
    if isinstance(cached, set):
        return cached
    dicts: set[str] = set()
    # From the (few) calls that build one up to their statement: no walk of the tree.
    for call in [*index.by_name.get("state_dict", ()), *index.by_name.get("dict", ())]:
        stmt = enclosing_stmt(index, call)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            name = dotted(stmt.targets[0])
            if name is not None and _is_param_dict(stmt.value, dicts):
                dicts.add(name)
    index._param_dicts = dicts  # type: ignore[attr-defined]
    return dicts


def is_tensor_expr(analysis: Analysis, node: ast.expr) -> bool:
    """Certainly a tensor: the engine says so, or it is a parameter-like attribute."""
    value = analysis.values.get(node)
    if isinstance(value, TensorFact):
        return True
    if isinstance(value, (InstanceValue, ModuleValue, TorchRef)):
        return False
    if isinstance(node, ast.Attribute) and node.attr in PARAM_ATTRS:
        return True
    if isinstance(node, ast.Subscript) and _is_param_dict(node.value, param_dict_names(analysis)):
        return True  # `state_dict[k]`, `src_parameters[k]`
    return is_param_loop_name(analysis, node)


def torch_alias(analysis: Analysis) -> str | None:
    """The name `torch` itself is bound to at module level (`import torch` -> "torch")."""
    for stmt in analysis.tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == "torch":
                    return alias.asname or "torch"
    return None


def line_indent(analysis: Analysis, line: int) -> str:
    text = analysis.lines[line - 1] if 0 < line <= len(analysis.lines) else ""
    return text[: len(text) - len(text.lstrip())]


def wrap_statement_edit(analysis: Analysis, stmt: ast.stmt, header: str) -> TextEdit | None:
    """Edit wrapping a simple statement alone on its lines in `header:` (a `with` block)."""
    end_line = stmt.end_lineno or stmt.lineno
    first = analysis.lines[stmt.lineno - 1]
    indent = line_indent(analysis, stmt.lineno)
    if first[len(indent) :].startswith(("@",)) or len(first) - len(first.lstrip()) != analysis.char_col(
        stmt.lineno, stmt.col_offset
    ):
        return None  # not alone at the start of its line (e.g. `x = 1; y = f()`)
    last = analysis.lines[end_line - 1]
    tail = last[analysis.char_col(end_line, stmt.end_col_offset or 0) :].strip()
    if tail and not tail.startswith("#"):
        return None
    body = analysis.lines[stmt.lineno - 1 : end_line]
    unit = "    "
    new = [f"{indent}{header}:"] + [unit + text if text.strip() else text for text in body]
    return TextEdit(stmt.lineno, 1, end_line, len(last) + 1, "\n".join(new))


# ------------------------------------------------------------------------------ guards
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def never_falls_through(body: list[ast.stmt]) -> bool:
    """`body` always leaves its block: it ends in `return`, `raise`, `continue` or `break`
    (or in an `if` both of whose branches do)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, _EXITS):
        return True
    if isinstance(last, ast.If):
        return never_falls_through(last.body) and never_falls_through(last.orelse)
    return False


def guarding_tests(index: Index, node: ast.AST) -> Iterator[tuple[ast.expr, ast.stmt | None]]:
    """The conditions that decide whether `node` runs, within its function (or module):
    the tests of the `if` / conditional expressions / `while` loops around it, and of the
    earlier `if`s of an enclosing block one of whose branches always leaves the block
    (`if torch.is_tensor(t): return t` before it). Each comes with the statement holding
    the test and, for an early exit, that `if` (else None): what lies between it and `node`
    may rebind what it tested."""
    child: ast.AST = node
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, SCOPE_NODES):
        if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and child is not parent.test:
            yield parent.test, None
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and child in block:
                for earlier in block[: block.index(child)]:
                    if isinstance(earlier, ast.If) and (
                        never_falls_through(earlier.body) or never_falls_through(earlier.orelse)
                    ):
                        yield earlier.test, earlier
        child, parent = parent, index.parents.get(parent)
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) or parent is None:
        body = parent.body if parent is not None else None
        if body is not None and child in body:
            for earlier in body[: body.index(child)]:
                if isinstance(earlier, ast.If) and (never_falls_through(earlier.body) or never_falls_through(earlier.orelse)):
                    yield earlier.test, earlier
