"""One walk of the tree for every rule (`index_of`: parents, calls by name, attributes,
loops, functions), the walks that skip nested scopes, and small AST queries (the called
name, a dotted name, the enclosing statement or function). Syntax only: the engine's facts
are in `analysis.values`."""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import cast

from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import TorchRef

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


# Tensor methods that read only metadata and return a Python value (`x.size(1)`, `x.dim()`).
METADATA_METHODS = frozenset(
    {"size", "dim", "ndimension", "numel", "nelement", "element_size", "stride", "storage_offset", "is_contiguous",
     "get_device", "data_ptr", "is_floating_point", "is_complex", "is_pinned"}
)  # fmt: skip


def stores_name(node: ast.AST, name: str) -> bool:
    """Whether `node` (re)binds `name` anywhere outside nested scopes."""
    for sub in [node, *walk_scope(node)]:
        if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, (ast.Store, ast.Del)):
            return True
    return False


def torch_alias(analysis: Analysis) -> str | None:
    """The name `torch` itself is bound to at module level (`import torch` -> "torch")."""
    for stmt in analysis.tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == "torch":
                    return alias.asname or "torch"
    return None




def call_at_event(analysis: Analysis, line: int, col: int, end_line: int, end_col: int, name: str) -> ast.Call | None:
    """The call named `name` at exactly the `ast` position a replay event reports."""
    for call in index_of(analysis).by_name.get(name, ()):
        if (call.lineno, call.col_offset, call.end_lineno, call.end_col_offset) == (line, col, end_line, end_col):
            return call
    return None
