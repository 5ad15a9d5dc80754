"""Flow-sensitive abstract interpretation of a module: names -> abstract tensor facts.

The interpreter walks statements in order, evaluating expressions to abstract values
(`values.py`, `facts.py`). Where sizes are literal, ops are replayed on meta tensors
(`replay.py`) and torch's own answer is recorded; where they are not, the facts that hold
for any size (view-of, permuted, graph-carrying, detached) are kept. Branches join,
loop bodies run twice so loop-carried changes are seen, and nothing from the workspace
is ever executed: only whitelisted torch callables, on meta tensors.
"""

from __future__ import annotations

import ast
import operator
import time
from dataclasses import replace
from typing import Any

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import replay as rp
from stridelens.server.analysis import torch_api as api
from stridelens.server.analysis.constfold import NOT_FOLDED, fold_binop, fold_unary
from stridelens.server.analysis.facts import Provenance, ReplayEvent, TensorFact
from stridelens.server.analysis.naming import SizeNames
from stridelens.server.analysis.sizes_interp import SizesMixin, SymSlice, infer_parameter_ranks
from stridelens.server.analysis.symbolic_ops import SymbolicOps
from stridelens.server.analysis.values import (
    NUMBER,
    UNKNOWN,
    ClassInfo,
    Const,
    FunctionValue,
    GradContext,
    InstanceValue,
    ListOf,
    ModuleValue,
    Number,
    Opaque,
    SeqValue,
    SizeValue,
    TorchRef,
    Value,
    forget_layout,
    join_values,
)

MAX_PROVENANCE = 4
MAX_CALL_DEPTH = 4
MAX_LITERAL_ELEMENTS = 4096


# Ops whose result may be a strided view even when every input is contiguous.
_STRIDED_RESULTS = frozenset(
    {"einsum", "broadcast_to", "broadcast_tensors", "meshgrid", "scaled_dot_product_attention", "as_strided", "expand"}
)

_ROW_MAJOR_RESULTS = frozenset({"matmul", "mm", "bmm", "linear"})

_LIST_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"})

# Values worth remembering per node: what rules and hover ask about.
_RECORDED = (TensorFact, SeqValue, ListOf, TorchRef, ModuleValue, GradContext, InstanceValue, ClassInfo)


CALLS_DIFFER = "shape differs between calls"


class BudgetExceeded(Exception):
    pass


class Scope:
    """Names of one function or module body, with the module's names as fallback."""

    __slots__ = ("env", "grad_assumed", "grad_enabled", "parent")

    def __init__(self, parent: Scope | None, grad_enabled: bool = True, grad_assumed: bool = False) -> None:
        self.env: dict[str, Value] = {}
        self.parent = parent
        self.grad_enabled = grad_enabled
        # True in a function body whose grad mode is its callers' (taken as on for the rules,
        # never stated as a fact: a caller may run it under `no_grad`).
        self.grad_assumed = grad_assumed

    def lookup(self, name: str) -> Value | None:
        scope: Scope | None = self
        while scope is not None:
            value = scope.env.get(name)
            if value is not None:
                return value
            scope = scope.parent
        return None


def _is_tensorish(value: Value) -> bool:
    return isinstance(value, TensorFact)


def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _format_args(node: ast.Call) -> str:
    try:
        return ", ".join(ast.unparse(a) for a in [*node.args, *node.keywords])
    except Exception:  # noqa: BLE001
        return "..."


class Interpreter(SizesMixin):
    def __init__(self, tree: ast.Module, *, replay: bool, budget_s: float) -> None:
        self.tree = tree
        self.names = SizeNames()
        self.symops = SymbolicOps(self)
        self._current_node: ast.AST | None = None
        self._keep_alive: list[Any] = []
        self._opaque_tensors: dict[int, TensorFact] = {}
        self._current_scope: Scope | None = None
        self.replay = replay
        self.deadline = time.monotonic() + budget_s
        self.facts: dict[ast.AST, Value] = {}
        # Whether autograd records at each statement (False under no_grad & co.).
        self.grad_enabled: dict[ast.stmt, bool] = {}
        self.events: list[ReplayEvent] = []
        self.timed_out = False
        self.storage_owner: dict[int, str] = {}
        self._symbolic_storage = 0
        self._steps = 0
        self._pending_functions: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Scope, ClassInfo | None]] = []
        self._torch_ready = False
        # Symbolic pass only: storages made by factories whose sizes are all literal, i.e.
        # where an exact (replayed) pass would know the layout.
        self.sized_storages: set[int] = set()
        # Functions being interpreted for a concrete call (arguments with known sizes).
        self._call_stack: list[ast.AST] = []
        # Node -> the call site (outermost concrete call) that recorded its fact. A call from
        # another site joins with it: a function called with two shapes states only what holds
        # for both. The same site evaluated again (a loop's second pass) overwrites, as in loops.
        self._concrete: dict[ast.AST, ast.AST] = {}
        self._outer_site: ast.AST | None = None
        self._returns: list[list[Value]] = []

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        module_scope = Scope(None)
        try:
            self.exec_block(self.tree.body, module_scope)
            # Function bodies see the module's names as they are at the end of the module.
            while self._pending_functions:
                fn, parent, cls = self._pending_functions.pop(0)
                self.exec_function(fn, parent, cls)
        except BudgetExceeded:
            self.timed_out = True
        except RecursionError:
            self.timed_out = True

    def _tick(self) -> None:
        self._steps += 1
        if self._steps & 63 == 0 and time.monotonic() > self.deadline:
            raise BudgetExceeded

    def _torch(self) -> Any:
        if not self.replay:
            raise rp.CannotReplay
        if not self._torch_ready:
            # Importing torch (seconds, once per process) is not this file's analysis time.
            started = time.monotonic()
            torch = rp.load_torch()
            self.deadline += time.monotonic() - started
            self._torch_ready = True
            return torch
        return rp.load_torch()

    def fresh_storage(self) -> int:
        self._symbolic_storage -= 1
        return self._symbolic_storage

    def record(self, node: ast.AST, value: Value, scope: Scope | None = None) -> Value:
        if isinstance(value, _RECORDED):
            if isinstance(value, TensorFact) and scope is not None:
                value = self.stated(value, scope)
            if self._call_stack:
                previous = self._concrete.get(node)
                joined = previous is not None and previous is not self._outer_site and node in self.facts
                self.facts[node] = self._join_call_sites(self.facts[node], value) if joined else value
                if self._outer_site is not None:
                    self._concrete[node] = self._outer_site
                return value
            if node in self._concrete:
                # A concrete call already recorded sharper facts here; but this function may
                # also be called from elsewhere, in another grad mode.
                old = self.facts.get(node)
                if isinstance(old, TensorFact) and isinstance(value, TensorFact) and old.requires_grad != value.requires_grad:
                    self.facts[node] = replace(old, grad_unknown=True)
                return value
            self.facts[node] = value
        return value

    def _join_call_sites(self, old: Value, new: Value) -> Value:
        """The fact of a node in a function body called from two sites, with a note saying
        why a shape is no longer stated."""
        joined = join_values(old, new)
        if not (isinstance(joined, TensorFact) and isinstance(old, TensorFact) and isinstance(new, TensorFact)):
            return joined
        notes = tuple(p for p in old.provenance if p.what == CALLS_DIFFER and p not in joined.provenance)
        site = self._outer_site
        if old.shape is not None and new.shape is not None and old.shape != new.shape and site is not None:
            because = f"{tuple(old.shape)} vs {tuple(new.shape)} from the call"
            notes += (Provenance(CALLS_DIFFER, because, getattr(site, "lineno", 0)),)
        return replace(joined, provenance=joined.provenance + notes) if notes else joined

    # -------------------------------------------------------------- statements
    def exec_block(self, body: list[ast.stmt], scope: Scope) -> None:
        for stmt in body:
            self._tick()
            self.grad_enabled[stmt] = scope.grad_enabled
            self.exec_stmt(stmt, scope)

    def exec_stmt(self, stmt: ast.stmt, scope: Scope) -> None:
        handler = _STMT_HANDLERS.get(type(stmt))
        if handler is not None:
            handler(self, stmt, scope)
            return
        # Anything else: evaluate the expressions it contains, for their facts.
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                self.eval(child, scope)

    def stmt_Expr(self, stmt: ast.Expr, scope: Scope) -> None:
        self.eval(stmt.value, scope)

    def stmt_Assign(self, stmt: ast.Assign, scope: Scope) -> None:
        target = stmt.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            self._rank_from_unpacking(stmt.value, len(target.elts), scope)
        value = self.eval(stmt.value, scope)
        for target in stmt.targets:
            self.bind(target, value, scope)

    def _rank_from_unpacking(self, value: ast.expr, rank: int, scope: Scope) -> None:
        """`B, C, T = x.shape` says x has 3 dims: give x one size per dim, if it has none."""
        subject: ast.expr | None = None
        if isinstance(value, ast.Attribute) and value.attr == "shape":
            subject = value.value
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "size" and not value.args:
            subject = value.func.value
        if not isinstance(subject, ast.Name):
            return
        fact = scope.lookup(subject.id)
        if isinstance(fact, TensorFact) and fact.shape is None and fact.sym is None and fact.meta is None:
            self._rebind_in_place(subject.id, self.with_rank(fact, rank, subject.id), scope)

    def _rebind_in_place(self, name: str, fact: TensorFact, scope: Scope) -> None:
        holder: Scope | None = scope
        while holder is not None and name not in holder.env:
            holder = holder.parent
        (holder or scope).env[name] = fact

    def stmt_AnnAssign(self, stmt: ast.AnnAssign, scope: Scope) -> None:
        if stmt.value is not None:
            value = self.eval(stmt.value, scope)
        elif self._annotation_is_tensor(stmt.annotation):
            value = TensorFact(storage_key=self.fresh_storage())
        else:
            return
        self.bind(stmt.target, value, scope)

    def stmt_AugAssign(self, stmt: ast.AugAssign, scope: Scope) -> None:
        current = self.eval_target_value(stmt.target, scope)
        right = self.eval(stmt.value, scope)
        result = self.binop(stmt.op, current, right, stmt, scope, inplace=True)
        if isinstance(stmt.target, ast.Name):
            self.bind(stmt.target, result, scope)
        else:
            self.record(stmt.target, result)

    def stmt_Import(self, stmt: ast.Import, scope: Scope) -> None:
        for alias in stmt.names:
            if alias.name == "torch" or alias.name.startswith("torch."):
                if alias.asname:
                    scope.env[alias.asname] = TorchRef(alias.name)
                else:
                    scope.env["torch"] = TorchRef("torch")
            elif alias.name == "math":
                scope.env[alias.asname or "math"] = TorchRef("math")  # its functions give numbers
            else:
                scope.env[alias.asname or alias.name.split(".")[0]] = UNKNOWN

    def stmt_ImportFrom(self, stmt: ast.ImportFrom, scope: Scope) -> None:
        module = stmt.module or ""
        for alias in stmt.names:
            if alias.name == "*":
                continue
            bound = alias.asname or alias.name
            if stmt.level == 0 and (module in ("torch", "math") or module.startswith("torch.")):
                scope.env[bound] = TorchRef(f"{module}.{alias.name}")
            else:
                scope.env[bound] = UNKNOWN

    def stmt_If(self, stmt: ast.If, scope: Scope) -> None:
        test = self.eval(stmt.test, scope)
        if isinstance(test, Const) and isinstance(test.value, (bool, int)):
            self.exec_block(stmt.body if test.value else stmt.orelse, scope)
            return
        self._branches([stmt.body, stmt.orelse], scope)

    def _branches(self, bodies: list[list[ast.stmt]], scope: Scope) -> None:
        before = dict(scope.env)
        results: list[dict[str, Value]] = []
        for body in bodies:
            scope.env = dict(before)
            self.exec_block(body, scope)
            results.append(scope.env)
        scope.env = self._join_envs(results)

    def _join_envs(self, envs: list[dict[str, Value]]) -> dict[str, Value]:
        joined = dict(envs[0])
        for other in envs[1:]:
            for name in set(joined) | set(other):
                a, b = joined.get(name), other.get(name)
                if a is None or b is None:
                    joined[name] = UNKNOWN
                elif a is not b:
                    joined[name] = join_values(a, b)
        return joined

    def _loop(self, body: list[ast.stmt], orelse: list[ast.stmt], scope: Scope, bind: Any) -> None:
        before = dict(scope.env)
        bind()
        self.exec_block(body, scope)
        # Second pass from the join of entry and end-of-body: loop-carried changes show.
        scope.env = self._join_envs([before, scope.env])
        bind()
        self.exec_block(body, scope)
        scope.env = self._join_envs([before, scope.env])
        self.exec_block(orelse, scope)

    def stmt_For(self, stmt: ast.For | ast.AsyncFor, scope: Scope) -> None:
        iterable = self.eval(stmt.iter, scope)
        item = self._element_of(iterable)
        self._loop(stmt.body, stmt.orelse, scope, lambda: self.bind(stmt.target, item, scope))

    stmt_AsyncFor = stmt_For

    def stmt_While(self, stmt: ast.While, scope: Scope) -> None:
        self.eval(stmt.test, scope)
        self._loop(stmt.body, stmt.orelse, scope, lambda: None)

    def stmt_With(self, stmt: ast.With | ast.AsyncWith, scope: Scope) -> None:
        saved = scope.grad_enabled
        for item in stmt.items:
            value = self.eval(item.context_expr, scope)
            if isinstance(value, GradContext):
                scope.grad_enabled = value.enabled
            if item.optional_vars is not None:
                self.bind(item.optional_vars, UNKNOWN, scope)
        try:
            self.exec_block(stmt.body, scope)
        finally:
            scope.grad_enabled = saved

    stmt_AsyncWith = stmt_With

    def stmt_Try(self, stmt: ast.Try, scope: Scope) -> None:
        before = dict(scope.env)
        self.exec_block(stmt.body, scope)
        after_body = scope.env
        outcomes = [after_body]
        for handler in stmt.handlers:
            scope.env = self._join_envs([before, after_body])
            if handler.name:
                scope.env[handler.name] = UNKNOWN
            self.exec_block(handler.body, scope)
            outcomes.append(scope.env)
        scope.env = self._join_envs(outcomes)
        self.exec_block(stmt.orelse, scope)
        self.exec_block(stmt.finalbody, scope)

    stmt_TryStar = stmt_Try

    def stmt_Match(self, stmt: Any, scope: Scope) -> None:
        self.eval(stmt.subject, scope)
        self._branches([case.body for case in stmt.cases] + [[]], scope)

    def stmt_Delete(self, stmt: ast.Delete, scope: Scope) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                scope.env[target.id] = UNKNOWN

    def stmt_Return(self, stmt: ast.Return, scope: Scope) -> None:
        value = self.eval(stmt.value, scope) if stmt.value is not None else Const(None)
        if self._returns:
            self._returns[-1].append(value)

    def stmt_FunctionDef(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        for deco in stmt.decorator_list:
            self.eval(deco, scope)
        scope.env[stmt.name] = FunctionValue(stmt)
        self._pending_functions.append((stmt, scope, None))

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self, stmt: ast.ClassDef, scope: Scope) -> None:
        methods = {
            s.name: s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        is_module = False
        for base in stmt.bases:
            value = self.eval(base, scope)
            if isinstance(value, TorchRef) and value.path in ("torch.nn.Module", "torch.nn.modules.module.Module"):
                is_module = True
        info = ClassInfo(stmt, methods, is_module=is_module)
        scope.env[stmt.name] = info
        class_scope = Scope(scope, scope.grad_enabled)
        for s in stmt.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for deco in s.decorator_list:
                    self.eval(deco, class_scope)
                continue
            self.exec_stmt(s, class_scope)
        # __init__ first, so the other methods see what it assigned to `self`.
        init = methods.get("__init__")
        if init is not None:
            self.exec_function(init, scope, info)
        for name, fn in methods.items():
            if name != "__init__":
                self._pending_functions.append((fn, scope, info))

    # --------------------------------------------------------------- functions
    def _annotation_is_tensor(self, annotation: ast.expr | None) -> bool:
        if annotation is None:
            return False
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            return annotation.value.split(".")[-1] in ("Tensor", "FloatTensor", "LongTensor")
        if isinstance(annotation, ast.Subscript):  # jaxtyping: Float[Tensor, "B C"]
            return self._annotation_is_tensor(annotation.slice) or (
                isinstance(annotation.slice, ast.Tuple)
                and any(self._annotation_is_tensor(e) for e in annotation.slice.elts)
            )
        name = _call_name(annotation)
        return name in ("Tensor", "FloatTensor", "LongTensor")

    def _explicit_grad_mode(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> bool | None:
        """The grad mode a decorator sets (`@torch.no_grad()`), or None: the caller's."""
        if not fn.decorator_list:
            return None
        mode = self._grad_mode_of_decorators(fn, scope, None)
        return mode

    def _grad_mode_of_decorators(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope, default: bool | None = True) -> Any:
        enabled = default
        for deco in fn.decorator_list:
            value = self.eval(deco, scope)
            if isinstance(value, GradContext):
                enabled = value.enabled
            elif isinstance(value, TorchRef) and value.path in api.GRAD_CONTEXTS:
                mode = api.GRAD_CONTEXTS[value.path]
                enabled = bool(mode) if mode is not None else enabled
        return enabled

    def exec_function(
        self, fn: ast.FunctionDef | ast.AsyncFunctionDef, parent: Scope, cls: ClassInfo | None
    ) -> None:
        explicit = self._explicit_grad_mode(fn, parent)
        scope = Scope(parent, True if explicit is None else explicit, grad_assumed=explicit is None)
        args = fn.args
        positional = [*args.posonlyargs, *args.args]
        ranks = infer_parameter_ranks(fn)
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults, strict=True))
        for i, arg in enumerate(positional):
            if i == 0 and cls is not None and not any(
                _call_name(d) in ("staticmethod",) for d in fn.decorator_list
            ):
                scope.env[arg.arg] = InstanceValue(cls)
                continue
            scope.env[arg.arg] = self._param_value(arg, ranks, defaults.get(arg.arg), parent)
        for arg in args.kwonlyargs:
            scope.env[arg.arg] = self._param_value(arg, ranks, None, parent)
        if args.vararg:
            scope.env[args.vararg.arg] = UNKNOWN
        if args.kwarg:
            scope.env[args.kwarg.arg] = UNKNOWN
        self._claim_parameters(scope)
        self.exec_block(fn.body, scope)

    def _claim_parameters(self, scope: Scope) -> None:
        for name, value in scope.env.items():
            if isinstance(value, TensorFact) and value.storage_key is not None:
                self.storage_owner.setdefault(value.storage_key, name)

    def call_concrete(
        self,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        instance: InstanceValue | None,
        args: list[Value],
        kwargs: dict[str, Value],
        scope: Scope,
        site: ast.AST,
    ) -> Value | None:
        """Interpret `fn` for this call (at `site`) when an argument has known sizes, so shapes flow
        through user functions and `forward` methods. None when not worth it."""
        if isinstance(fn, ast.AsyncFunctionDef) or fn in self._call_stack or len(self._call_stack) >= MAX_CALL_DEPTH:
            return None
        has_params = bool(fn.args.args or fn.args.posonlyargs or fn.args.kwonlyargs or fn.args.vararg)
        known = any(
            isinstance(a, TensorFact) and (a.meta is not None or a.sym is not None) for a in [*args, *kwargs.values()]
        )
        if not known and ((has_params and instance is None) or len(fn.args.args) > 1):
            return None
        if not known and instance is not None and fn.name != "forward":
            return None
        root = scope
        while root.parent is not None:
            root = root.parent
        inner = Scope(root, scope.grad_enabled and self._grad_mode_of_decorators(fn, root))
        spec = fn.args
        params = [*spec.posonlyargs, *spec.args]
        if instance is not None and params:
            inner.env[params[0].arg] = instance
            params = params[1:]
        for param in [*params, *spec.kwonlyargs]:
            inner.env[param.arg] = self._param_value(param)
        inner.grad_assumed = scope.grad_assumed
        defaults = spec.defaults
        for param, default in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            inner.env[param.arg] = self.eval(default, root)
        for param, kw_default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if kw_default is not None:
                inner.env[param.arg] = self.eval(kw_default, root)
        for param, value in zip(params, args, strict=False):
            inner.env[param.arg] = value
        if spec.vararg is not None:
            inner.env[spec.vararg.arg] = SeqValue(tuple(args[len(params) :]))
        names = {p.arg for p in [*params, *spec.kwonlyargs]}
        for name, value in kwargs.items():
            if name in names:
                inner.env[name] = value
        self._claim_parameters(inner)
        if not self._call_stack:
            self._outer_site = site
        self._call_stack.append(fn)
        self._returns.append([])
        try:
            self.exec_block(fn.body, inner)
        finally:
            self._call_stack.pop()
            returned = self._returns.pop()
        if not returned:
            return Const(None)
        result = returned[0]
        for other in returned[1:]:
            result = join_values(result, other)
        return result

    def _param_value(
        self, arg: ast.arg, ranks: dict[str, int] | None = None, default: ast.expr | None = None, scope: Scope | None = None
    ) -> Value:
        rank = (ranks or {}).get(arg.arg)
        if rank is not None:
            return self.record(arg, self.tensor_parameter(arg.arg, rank))
        if self._annotation_is_tensor(arg.annotation):
            return self.record(arg, TensorFact(storage_key=self.fresh_storage()))
        # Unknown, but nameable: a size if the body uses it as one (`n_head=12` too: a caller
        # may pass another value).
        return Opaque(id(arg), (arg.arg,))

    # ------------------------------------------------------------------ binding
    def bind(self, target: ast.expr, value: Value, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, TensorFact):
                value = self._claim_storage(target.id, value)
            # Stated "as the line starts": `x.shape[0]` of `x = f(x)` is the input's.
            self.record(target, value, scope)
            scope.env[target.id] = value
            self.name_size(value, (target.id,))
        elif isinstance(target, (ast.Tuple, ast.List)):
            items: list[Value]
            if isinstance(value, SeqValue) and len(value.items) == len(target.elts) and not any(
                isinstance(e, ast.Starred) for e in target.elts
            ):
                items = list(value.items)
            elif isinstance(value, ListOf):
                items = [value.item] * len(target.elts)
            elif isinstance(value, TensorFact) and not any(isinstance(e, ast.Starred) for e in target.elts):
                items = self._unpack_tensor(value, len(target.elts), scope)
            elif (
                isinstance(value, Const)
                and isinstance(value.value, (tuple, list))
                and len(value.value) == len(target.elts)
            ):
                items = [Const(v) for v in value.value]
            else:
                items = [UNKNOWN] * len(target.elts)
            for elt, item in zip(target.elts, items, strict=False):
                if isinstance(elt, ast.Starred):
                    self.bind(elt.value, UNKNOWN, scope)
                else:
                    self.bind(elt, item, scope)
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value, scope)
            if isinstance(owner, InstanceValue) and isinstance(target.value, ast.Name):
                self.name_size(value, (target.value.id, target.attr))
            if isinstance(owner, InstanceValue):
                # `self.x = ...` outside __init__ makes the attribute path-dependent.
                old = owner.cls.attributes.get(target.attr)
                owner.cls.attributes[target.attr] = value if old is None else join_values(old, value)
            self.record(target, value)
        elif isinstance(target, ast.Subscript):
            self.eval(target.value, scope)
            self.eval(target.slice, scope)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, UNKNOWN, scope)

    def _unpack_tensor(self, tensor: TensorFact, count: int, scope: Scope) -> list[Value]:
        """`q, k, v = qkv`: iterating a tensor selects along dim 0."""
        first = tensor.shape[0] if tensor.shape else (tensor.sym.shape[0] if tensor.sym is not None and tensor.sym.shape else None)
        if first != count:
            return [UNKNOWN] * count
        if tensor.meta is not None and self.replay:
            try:
                return [
                    replace(rp.fact_from_meta(tensor.meta[i], tensor.device), view_of=tensor.view_of)
                    for i in range(count)
                ]
            except Exception:  # noqa: BLE001 - torch said no: nothing known
                return [UNKNOWN] * count
        items: list[Value] = []
        for i in range(count):
            item = self.symops.index(tensor, [i], scope)
            items.append(item if item is not None else UNKNOWN)
        return items

    def _claim_storage(self, name: str, fact: TensorFact) -> TensorFact:
        """The first name bound to a storage owns it; later names are views of it."""
        key = fact.storage_key
        if key is None:
            return fact
        owner = self.storage_owner.get(key)
        if fact.meta is not None:
            # A storage key is the meta storage's address: keep it alive, or a later storage
            # gets the same address and reads as "a view of" this name.
            self._keep_alive.append(fact.meta)
        if owner is None and fact.is_view is True and not _covers_its_storage(fact):
            # q, k, v of one `split`: none is the others' base. Name no owner.
            return replace(fact, view_of=None) if fact.view_of is not None else fact
        if owner is None:
            self.storage_owner[key] = name
            if fact.view_of is not None and fact.is_view is not True:
                return replace(fact, view_of=None)
            return fact
        if owner != name and fact.view_of != owner:
            return replace(fact, view_of=owner)
        return fact

    def eval_target_value(self, target: ast.expr, scope: Scope) -> Value:
        if isinstance(target, ast.Name):
            value = scope.lookup(target.id)
            return value if value is not None else UNKNOWN
        return self.eval(target, scope)

    def _element_of(self, iterable: Value) -> Value:
        if isinstance(iterable, SeqValue) and iterable.items:
            item = iterable.items[0]
            for other in iterable.items[1:]:
                item = join_values(item, other)
            return item
        if isinstance(iterable, ListOf):
            return iterable.item
        if isinstance(iterable, TensorFact):
            return forget_layout(replace(iterable, is_view=True))
        return UNKNOWN

    # ------------------------------------------------------------- expressions
    def eval(self, node: ast.expr, scope: Scope) -> Value:
        kind = type(node)
        if kind is ast.Constant:
            return Const(node.value)  # type: ignore[attr-defined]
        handler = _EXPR_HANDLERS.get(kind)
        if handler is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child, scope)
            return UNKNOWN
        value: Value = handler(self, node, scope)
        if value is UNKNOWN or type(value) is Const:
            return value
        self.record(node, value, scope)
        return value

    def expr_Constant(self, node: ast.Constant, scope: Scope) -> Value:
        return Const(node.value)

    def expr_Name(self, node: ast.Name, scope: Scope) -> Value:
        value = scope.lookup(node.id)
        if value is None:
            if node.id in ("True", "False", "None"):
                return Const({"True": True, "False": False, "None": None}[node.id])
            return UNKNOWN
        return value

    def expr_Tuple(self, node: ast.Tuple | ast.List, scope: Scope) -> Value:
        items = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                self.eval(elt.value, scope)
                return UNKNOWN
            items.append(self.eval(elt, scope))
        kind = "tuple" if isinstance(node, ast.Tuple) else "list"
        if all(isinstance(i, Const) for i in items):
            consts = tuple(i.value for i in items if isinstance(i, Const))
            return Const(consts if kind == "tuple" else list(consts))
        return SeqValue(tuple(items), kind)

    expr_List = expr_Tuple

    def expr_Slice(self, node: ast.Slice, scope: Scope) -> Value:
        parts: list[Any] = []
        symbolic: list[Value] = []
        for part in (node.lower, node.upper, node.step):
            if part is None:
                parts.append(None)
                symbolic.append(Const(None))
                continue
            value = self.eval(part, scope)
            symbolic.append(value)
            parts.append(value.value if isinstance(value, Const) else None)
        if all(isinstance(v, Const) for v in symbolic):
            return Const(slice(*parts))
        return SymSlice(*symbolic)

    def expr_IfExp(self, node: ast.IfExp, scope: Scope) -> Value:
        test = self.eval(node.test, scope)
        if isinstance(test, Const) and isinstance(test.value, (bool, int)):
            return self.eval(node.body if test.value else node.orelse, scope)
        return join_values(self.eval(node.body, scope), self.eval(node.orelse, scope))

    def expr_NamedExpr(self, node: ast.NamedExpr, scope: Scope) -> Value:
        value = self.eval(node.value, scope)
        self.bind(node.target, value, scope)
        return value

    def expr_Lambda(self, node: ast.Lambda, scope: Scope) -> Value:
        return UNKNOWN

    def _comprehension(self, node: Any, scope: Scope, elts: list[ast.expr]) -> Value:
        inner = Scope(scope, scope.grad_enabled)
        first = node.generators[0]
        iterable = self.eval(first.iter, inner)
        # A short tuple of known tensors (chunk, unbind...): evaluate per item, then join.
        items = (
            list(iterable.items)
            if isinstance(iterable, SeqValue) and len(iterable.items) <= 16 and len(node.generators) == 1
            else [self._element_of(iterable)]
        )
        result: Value | None = None
        for item in items:
            self.bind(first.target, item, inner)
            for gen in node.generators[1:]:
                self.bind(gen.target, self._element_of(self.eval(gen.iter, inner)), inner)
            for gen in node.generators:
                for cond in gen.ifs:
                    self.eval(cond, inner)
            values = [self.eval(e, inner) for e in elts]
            value = values[0] if len(values) == 1 else UNKNOWN
            result = value if result is None else join_values(result, value)
        return ListOf(result) if result is not None and len(elts) == 1 else UNKNOWN

    def expr_ListComp(self, node: ast.ListComp, scope: Scope) -> Value:
        return self._comprehension(node, scope, [node.elt])

    expr_SetComp = expr_ListComp
    expr_GeneratorExp = expr_ListComp

    def expr_DictComp(self, node: ast.DictComp, scope: Scope) -> Value:
        self._comprehension(node, scope, [node.key, node.value])
        return UNKNOWN

    def expr_UnaryOp(self, node: ast.UnaryOp, scope: Scope) -> Value:
        operand = self.eval(node.operand, scope)
        if isinstance(operand, Const):
            folded = fold_unary(node.op, operand.value)
            return UNKNOWN if folded is NOT_FOLDED else Const(folded)
        if isinstance(operand, TensorFact) and not isinstance(node.op, ast.Not):
            fn: Any = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[
                type(node.op)
            ]
            return self.tensor_op(fn, [operand], node, scope, f"unary {type(node.op).__name__}")
        return UNKNOWN

    def expr_BinOp(self, node: ast.BinOp, scope: Scope) -> Value:
        left = self.eval(node.left, scope)
        right = self.eval(node.right, scope)
        return self.binop(node.op, left, right, node, scope)

    def binop(
        self, op: ast.operator, left: Value, right: Value, node: ast.AST, scope: Scope, inplace: bool = False
    ) -> Value:
        if isinstance(left, Const) and isinstance(right, Const):
            folded = fold_binop(op, left.value, right.value)
            return UNKNOWN if folded is NOT_FOLDED else Const(folded)
        if not isinstance(left, TensorFact) and not isinstance(right, TensorFact):
            sized = self.size_binop(op, left, right, node)
            if sized is not None:
                return sized
            if _is_number(left) and _is_number(right):
                atoms = frozenset().union(*(v.atoms for v in (left, right) if isinstance(v, Number)))
                return Number(atoms) if atoms else NUMBER
        if isinstance(left, TensorFact) or isinstance(right, TensorFact):
            fns: dict[type, Any] = {
                ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
                ast.Pow: operator.pow, ast.MatMult: operator.matmul, ast.BitAnd: operator.and_,
                ast.BitOr: operator.or_, ast.BitXor: operator.xor,
            }  # fmt: skip
            fn = fns.get(type(op))
            if fn is None:
                return TensorFact()
            if inplace and isinstance(left, TensorFact):
                # `x += y` writes into x's storage: same tensor, new facts only for grad.
                result = self.tensor_op(fn, [left, right], node, scope, "op")
                if isinstance(result, TensorFact) and left.meta is not None and result.meta is not None:
                    return replace(
                        result,
                        storage_key=left.storage_key,
                        strides=left.strides,
                        storage_offset=left.storage_offset,
                        contiguous=left.contiguous,
                        is_view=left.is_view,
                        view_of=left.view_of,
                        storage_numel=left.storage_numel,
                    )
                return result
            return self.tensor_op(fn, [left, right], node, scope, "matmul" if fn is operator.matmul else "op")
        return UNKNOWN

    def expr_Compare(self, node: ast.Compare, scope: Scope) -> Value:
        left = self.eval(node.left, scope)
        rights = [self.eval(c, scope) for c in node.comparators]
        if len(rights) == 1 and (isinstance(left, TensorFact) or isinstance(rights[0], TensorFact)):
            fns: dict[type, Any] = {
                ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
                ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            }  # fmt: skip
            fn = fns.get(type(node.ops[0]))
            if fn is not None:
                result = self.tensor_op(fn, [left, rights[0]], node, scope, "compare")
                if isinstance(result, TensorFact):
                    return replace(result, requires_grad=False, carries_graph=False)
        return UNKNOWN

    def expr_BoolOp(self, node: ast.BoolOp, scope: Scope) -> Value:
        for value in node.values:
            self.eval(value, scope)
        return UNKNOWN

    def expr_Dict(self, node: ast.Dict, scope: Scope) -> Value:
        for part in [*node.keys, *node.values]:
            if part is not None:
                self.eval(part, scope)
        return UNKNOWN

    def expr_Starred(self, node: ast.Starred, scope: Scope) -> Value:
        self.eval(node.value, scope)
        return UNKNOWN

    def expr_Attribute(self, node: ast.Attribute, scope: Scope) -> Value:
        owner = self.eval(node.value, scope)
        attr = node.attr
        if isinstance(owner, TorchRef):
            return TorchRef(f"{owner.path}.{attr}")
        if isinstance(owner, InstanceValue):
            value = owner.cls.attributes.get(attr)
            if value is not None and value is not UNKNOWN:
                if isinstance(node.value, ast.Name):
                    self.name_size(value, (node.value.id, attr))
                return value
            method = owner.cls.methods.get(attr)
            if method is not None:
                return FunctionValue(method)
            value = self.attribute_value(owner, attr, node.value)
            if isinstance(node.value, ast.Name):
                self.name_size(value, (node.value.id, attr))
            return value
        if isinstance(owner, TensorFact):
            return self.tensor_attribute(owner, attr, node, scope)
        if isinstance(owner, (Opaque, ModuleValue)):
            return self.attribute_value(owner, attr, node.value)
        return UNKNOWN

    def tensor_attribute(self, tensor: TensorFact, attr: str, node: ast.AST, scope: Scope) -> Value:
        if attr in ("T", "mT", "H", "mH"):
            return self.tensor_method(tensor, attr, [], {}, node, scope, as_property=True)
        if attr == "shape" and tensor.shape is not None:
            return Const(tuple(tensor.shape))
        if attr == "ndim" and tensor.shape is not None:
            return Const(len(tensor.shape))
        if attr == "shape" and tensor.sym is not None:
            return self.shape_value(tensor)
        if attr == "ndim" and tensor.sym is not None:
            return Const(tensor.sym.ndim)
        if attr == "dtype" and tensor.dtype is not None:
            return TorchRef(f"torch.{tensor.dtype}")
        if attr == "data":
            # `.data` shares storage and drops the graph, silently.
            line = getattr(node, "lineno", 0)
            fact = replace(
                tensor,
                requires_grad=False,
                carries_graph=False,
                is_view=tensor.is_view if tensor.meta is None else None,
                meta=tensor.meta.detach() if tensor.meta is not None else None,
            )
            if fact.meta is not None:
                fact = replace(rp.fact_from_meta(fact.meta, tensor.device), storage_key=tensor.storage_key, provenance=tensor.provenance)
            fact = replace(fact, detached_from=_source_text(node.value) if isinstance(node, ast.Attribute) else None)
            return fact.with_note("shares storage, no autograd", ".data", line)
        if attr in ("grad",):
            return TensorFact(device=tensor.device, dtype=tensor.dtype, shape=tensor.shape)
        return UNKNOWN

    def expr_Subscript(self, node: ast.Subscript, scope: Scope) -> Value:
        base = self.eval(node.value, scope)
        index = self.eval(node.slice, scope)
        if base is UNKNOWN and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
            # `x.shape[0]` of a tensor whose rank is not known yet: still one size.
            owner = self.facts.get(node.value.value) if isinstance(node.value.value, ast.expr) else None
            if isinstance(owner, TensorFact) and owner.shape is None and owner.sym is None:
                return self.dim_of_unknown_rank(owner, index, node.value)
        if isinstance(base, SeqValue) and isinstance(index, Const) and isinstance(index.value, int):
            try:
                return base.items[index.value]
            except IndexError:
                return UNKNOWN
        if isinstance(base, ListOf) and isinstance(index, Const) and isinstance(index.value, int):
            return base.item
        if isinstance(base, Const) and isinstance(index, Const):
            try:
                value = base.value[index.value]
            except Exception:  # noqa: BLE001
                return UNKNOWN
            return Const(value)
        if isinstance(base, TensorFact):
            return self.index_tensor(base, index, node, scope)
        return UNKNOWN

    def index_tensor(self, base: TensorFact, index: Value, node: ast.Subscript, scope: Scope) -> Value:
        if base.meta is None and base.sym is not None:
            items = self._symbolic_index_items(index)
            if items is not None:
                result = self.symops.index(base, items, scope)
                if result is not None:
                    return result
        basic = self._is_basic_index(index)
        line = node.lineno
        try:
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            text = ", ".join(ast.unparse(p) for p in parts)
        except Exception:  # noqa: BLE001
            text = "..."
        result = self.tensor_op(operator.getitem, [base, index], node, scope, f"[{text}]")
        if isinstance(result, TensorFact) and result.meta is not None and result.storage_key == base.storage_key:
            changed = result.contiguous is False and base.contiguous is not False
            kept = base.provenance if result.contiguous is False and base.contiguous is False else ()
            result = replace(result, provenance=kept, permuted_by=base.permuted_by).with_note(
                "non-contiguous view" if changed else "view (shares storage)", f"indexing [{text}]", line
            )
        if isinstance(result, TensorFact) and result.meta is None and basic:
            # Basic indexing is always a view, whatever the sizes.
            return replace(
                forget_layout(result),
                is_view=True,
                storage_key=base.storage_key,
                view_of=base.view_of,
                dtype=base.dtype,
                device=base.device,
                carries_graph=base.carries_graph,
                requires_grad=base.requires_grad,
            ).with_note("view", f"indexing [{text}]", line)
        return result

    def _symbolic_index_items(self, index: Value) -> list[Any] | None:
        """Basic index items with sizes: ints, ("slice", start, stop, step), None, Ellipsis."""
        raw: list[Value]
        if isinstance(index, Const) and isinstance(index.value, tuple):
            raw = [Const(v) for v in index.value]
        elif isinstance(index, SeqValue) and index.kind == "tuple":
            raw = list(index.items)
        else:
            raw = [index]
        out: list[Any] = []
        for item in raw:
            if isinstance(item, Const):
                v = item.value
                if v is None or v is Ellipsis or (isinstance(v, int) and not isinstance(v, bool)):
                    out.append(v)
                elif isinstance(v, slice):
                    if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in (v.start, v.stop, v.step)):
                        return None
                    out.append(("slice", v.start, v.stop, v.step))
                else:
                    return None
            elif isinstance(item, SymSlice):
                parts: list[Any] = []
                for part in (item.start, item.stop, item.step):
                    if isinstance(part, Const) and part.value is None:
                        parts.append(None)
                        continue
                    size = self.symops.size_of(part)
                    if size is None:
                        return None
                    parts.append(size)
                out.append(("slice", *parts))
            else:
                return None
        return out

    @staticmethod
    def _is_basic_index(index: Value) -> bool:
        def ok(v: Any) -> bool:
            return v is None or v is Ellipsis or (isinstance(v, (int, slice)) and not isinstance(v, bool))

        if isinstance(index, Const):
            value = index.value
            if isinstance(value, tuple):
                return all(ok(v) for v in value)
            return ok(value)
        if isinstance(index, SymSlice):
            return True
        if isinstance(index, SeqValue) and index.kind == "tuple":
            return all(isinstance(i, SymSlice) or (isinstance(i, Const) and ok(i.value)) for i in index.items)
        return False

    # -------------------------------------------------------------------- calls
    def _eval_args(self, node: ast.Call, scope: Scope) -> tuple[list[Value], dict[str, Value], bool]:
        args: list[Value] = []
        kwargs: dict[str, Value] = {}
        exact = True
        for a in node.args:
            if isinstance(a, ast.Starred):
                self.eval(a.value, scope)
                exact = False
                continue
            args.append(self.eval(a, scope))
        for kw in node.keywords:
            value = self.eval(kw.value, scope)
            if kw.arg is None:
                exact = False
            else:
                kwargs[kw.arg] = value
        return args, kwargs, exact

    def expr_Call(self, node: ast.Call, scope: Scope) -> Value:
        func = node.func
        if isinstance(func, ast.Attribute):
            receiver = self.eval(func.value, scope)
            args, kwargs, exact = self._eval_args(node, scope)
            name = func.attr
            if (
                name == "permute"
                and isinstance(receiver, TensorFact)
                and receiver.sym is None
                and receiver.shape is None
                and receiver.meta is None
                and node.args
                and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args)
            ):
                # `x.permute(0, 2, 1)` says x has 3 dims.
                holder = func.value.id if isinstance(func.value, ast.Name) else None
                receiver = self.with_rank(receiver, len(node.args), holder)
                if holder is not None:
                    self._rebind_in_place(holder, receiver, scope)
            if isinstance(receiver, TensorFact) or (
                (receiver is UNKNOWN or isinstance(receiver, Opaque)) and name in api.TENSOR_ONLY_METHODS
            ):
                tensor = receiver if isinstance(receiver, TensorFact) else TensorFact(storage_key=self.fresh_storage())
                if not exact:
                    return self._unknown_result(tensor, name)
                result = self.tensor_method(tensor, name, args, kwargs, node, scope)
                if name in ("detach", "detach_") and isinstance(result, TensorFact):
                    result = replace(result, detached_from=_source_text(func.value))
                return result
            if isinstance(receiver, TorchRef):
                self.record(func, TorchRef(f"{receiver.path}.{name}"))
                return self.call_torch(f"{receiver.path}.{name}", args, kwargs, exact, node, scope)
            if isinstance(receiver, ModuleValue):
                return self.module_method(receiver, name, args, kwargs)
            if name in _LIST_MUTATORS and isinstance(func.value, ast.Name) and isinstance(receiver, (Const, SeqValue)):
                # `sizes.append(4)`: the literal bound to `sizes` is no longer what it holds.
                scope.env[func.value.id] = UNKNOWN
            if isinstance(receiver, InstanceValue):
                callee = receiver.cls.attributes.get(name)
                if callee is not None:
                    self.record(func, callee)
                if isinstance(callee, ModuleValue):
                    return self.call_module(callee, args, kwargs, exact, node, scope)
                if name in ("eval", "train", "to", "cuda", "cpu", "requires_grad_"):
                    return receiver
                method = receiver.cls.methods.get(name)
                if method is not None and exact:
                    result = self.call_concrete(method, receiver, args, kwargs, scope, node)
                    return UNKNOWN if result is None else result
                return UNKNOWN
            return UNKNOWN
        callee = self.eval(func, scope)
        args, kwargs, exact = self._eval_args(node, scope)
        if isinstance(callee, TorchRef):
            return self.call_torch(callee.path, args, kwargs, exact, node, scope)
        if isinstance(callee, ModuleValue):
            return self.call_module(callee, args, kwargs, exact, node, scope)
        if isinstance(callee, ClassInfo):
            return InstanceValue(callee)
        if isinstance(callee, FunctionValue) and exact:
            result = self.call_concrete(callee.node, None, args, kwargs, scope, node)
            return UNKNOWN if result is None else result
        if isinstance(callee, InstanceValue) and callee.cls.is_module:
            forward = callee.cls.methods.get("forward")
            if forward is not None and exact:
                result = self.call_concrete(forward, callee, args, kwargs, scope, node)
                if result is not None:
                    return result
            return self.call_user_module(callee, args, scope)
        if isinstance(func, ast.Name) and callee is UNKNOWN and scope.lookup(func.id) is None:
            return self.call_builtin(func.id, args)
        return UNKNOWN

    def call_builtin(self, name: str, args: list[Value]) -> Value:
        if name == "len" and len(args) == 1:
            arg = args[0]
            if isinstance(arg, TensorFact) and arg.shape:
                return Const(arg.shape[0])
            if isinstance(arg, TensorFact) and arg.sym is not None and arg.sym.shape:
                return self.dim_size(arg, Const(0))
            if isinstance(arg, SeqValue):
                return Const(len(arg.items))
            if isinstance(arg, Const) and isinstance(arg.value, (tuple, list, str)):
                return Const(len(arg.value))
        if name in ("int", "tuple", "list") and len(args) == 1 and isinstance(args[0], Const):
            try:
                return Const({"int": int, "tuple": tuple, "list": list}[name](args[0].value))
            except Exception:  # noqa: BLE001
                return UNKNOWN
        return UNKNOWN

    def _unknown_result(self, tensor: TensorFact, name: str) -> Value:
        if name in api.SCALAR_METHODS:
            return UNKNOWN
        return TensorFact(device=tensor.device)

    # torch.xxx(...) ------------------------------------------------------------
    def call_torch(
        self, path: str, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        if path.startswith("math."):
            return self.math_call(path[5:], args)
        if path in api.GRAD_CONTEXTS:
            mode = api.GRAD_CONTEXTS[path]
            if mode is None:
                flag = args[0] if args else kwargs.get("mode")
                if isinstance(flag, Const) and isinstance(flag.value, bool):
                    return GradContext(flag.value, path)
                return UNKNOWN
            if path == "torch.inference_mode":
                flag = args[0] if args else kwargs.get("mode", Const(True))
                if isinstance(flag, Const) and flag.value is False:
                    return GradContext(True, path)
            return GradContext(mode, path)
        if path == "torch.device" and args and isinstance(args[0], Const):
            return Const(str(args[0].value))
        if path == "torch.Size" and args and isinstance(args[0], Const):
            return Const(tuple(args[0].value)) if isinstance(args[0].value, (tuple, list)) else UNKNOWN
        prefix, _, leaf = path.rpartition(".")
        if prefix in ("torch.nn", "torch.nn.modules") and leaf in api.NN_MODULES:
            return self.make_module(path, leaf, args, kwargs, exact, node)
        if prefix == "torch.nn" and leaf == "Parameter":
            if args and isinstance(args[0], TensorFact):
                tensor = args[0]
                meta = tensor.meta
                if meta is not None:
                    grad = kwargs.get("requires_grad", Const(True))
                    try:
                        param = self._torch().nn.Parameter(meta, requires_grad=bool(to_value(grad)))
                        return replace(rp.fact_from_meta(param, tensor.device), storage_key=tensor.storage_key, view_of=tensor.view_of)
                    except Exception:  # noqa: BLE001
                        pass
                # A Parameter is the same storage and layout, as a leaf that requires grad.
                return replace(tensor, requires_grad=True, carries_graph=False, is_view=False, meta=None)
            return TensorFact(requires_grad=True, carries_graph=False)
        if not exact:
            return self._opaque_result(args, kwargs, scope)
        if prefix == "torch" and leaf in api.FACTORIES:
            return self.factory(leaf, args, kwargs, node, scope)
        if prefix == "torch" and leaf in api.TORCH_FUNCTIONS:
            if leaf in api.VIEW_METHODS | api.MAYBE_COPY | {"clone"} and args and isinstance(args[0], TensorFact):
                # torch.transpose(x, ...) is x.transpose(...): one code path for both.
                return self.tensor_method(args[0], leaf, args[1:], kwargs, node, scope)
            return self.torch_function(path, leaf, args, kwargs, node, scope, functional=False)
        if prefix in ("torch.nn.functional", "torch.functional") and leaf in api.FUNCTIONAL:
            return self.torch_function(path, leaf, args, kwargs, node, scope, functional=True)
        return self._opaque_result(args, kwargs, scope) if prefix.startswith("torch") and leaf[:1].islower() and any(isinstance(a, TensorFact) for a in args) else UNKNOWN

    def _opaque_result(self, args: list[Value], kwargs: dict[str, Value], scope: Scope) -> Value:
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorFact)]
        if not tensors:
            return UNKNOWN
        return TensorFact(
            storage_key=self.fresh_storage(),
            device=tensors[0].device,
            carries_graph=True if scope.grad_enabled and any(t.carries_graph for t in tensors) else None,
        )

    def factory(self, name: str, args: list[Value], kwargs: dict[str, Value], node: ast.Call, scope: Scope) -> Value:
        device_value = kwargs.get("device")
        device: str | None = "cpu"
        if device_value is not None:
            device = str(device_value.value).split(":")[0] if isinstance(device_value, Const) and device_value.value is not None else None
        if name.endswith("_like") and args and isinstance(args[0], TensorFact) and device_value is None:
            device = args[0].device
        requires_grad = kwargs.get("requires_grad")
        # A new tensor from a factory is contiguous whatever its sizes (`*_like` keeps its
        # input's layout, `empty_strided` takes any, `as_tensor` may return its input).
        fresh_layout = not (
            name == "empty_strided"
            or name.endswith("_like")
            or (name == "as_tensor" and args and not isinstance(args[0], (Const, SeqValue)))
        )
        symbolic = TensorFact(
            storage_key=self.fresh_storage(),
            device=device,
            is_view=False,
            contiguous=True if fresh_layout else None,
            requires_grad=to_value(requires_grad) if isinstance(requires_grad, Const) else (False if requires_grad is None else None),
            carries_graph=False,
        )
        if name in ("tensor", "as_tensor") and args:
            data = args[0]
            if not isinstance(data, Const) or _literal_size(data.value) > MAX_LITERAL_ELEMENTS:
                return symbolic
        sym_shape = self.symops.factory(name, args, kwargs, None)
        if sym_shape is not None:
            dtype = kwargs.get("dtype")
            dtype_name = _dtype_of(dtype) if dtype is not None else ("int64" if name == "arange" else ("float32" if name != "full" else None))
            return replace(symbolic, sym=lay.contiguous(sym_shape), dtype=dtype_name, assumes=self.symops.conditions_of([*args, *kwargs.values()]))
        if not self.replay:
            if all(self._sized(v) for v in [*args, *kwargs.values()]):
                self.sized_storages.add(symbolic.storage_key)  # type: ignore[arg-type]
            return symbolic
        try:
            torch = self._torch()
            call_kwargs = {k: rp.to_torch(v) for k, v in kwargs.items()}
            call_args = [rp.to_torch(a) for a in args]
            call_kwargs["device"] = "meta"
            with torch.set_grad_enabled(scope.grad_enabled):
                meta = getattr(torch, name)(*call_args, **call_kwargs)
        except rp.CannotReplay:
            return symbolic
        except Exception as err:  # noqa: BLE001 - torch says these args are invalid
            self._event("replay-error", node, f"torch.{name}: {_first_line(err)}")
            return symbolic
        if not rp.is_meta_tensor(meta):
            return UNKNOWN
        return rp.fact_from_meta(meta, device)

    def _sized(self, value: Value) -> bool:
        """Would replay know this argument? (Only asked in the symbolic pass.)"""
        if isinstance(value, Const):
            return True
        if isinstance(value, TorchRef):
            return _is_torch_constant(value.path)
        if isinstance(value, TensorFact):
            return value.storage_key in self.sized_storages
        if isinstance(value, SeqValue):
            return all(self._sized(v) for v in value.items)
        return False

    def torch_function(
        self, path: str, leaf: str, args: list[Value], kwargs: dict[str, Value], node: ast.Call, scope: Scope, *, functional: bool
    ) -> Value:
        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorFact)]
        seqs = [a for a in args if isinstance(a, (SeqValue, ListOf))]
        for seq in seqs:
            items = seq.items if isinstance(seq, SeqValue) else (seq.item,)
            tensors.extend(i for i in items if isinstance(i, TensorFact))
        if not tensors:
            return UNKNOWN
        try:
            torch = self._torch()
            fn = getattr(torch.nn.functional if functional else torch, leaf)
            call_args = [rp.to_torch(a) for a in args]
            call_kwargs = {k: rp.to_torch(v) for k, v in kwargs.items()}
            with torch.set_grad_enabled(scope.grad_enabled):
                if leaf in api.CONV_FUNCTIONS and any(
                    isinstance(a, torch.Tensor) and not a.is_contiguous() for a in call_args
                ):
                    out = rp.conv_with_device_layout(fn, call_args, call_kwargs)
                else:
                    out = rp.cached_call(path, call_args, call_kwargs, lambda: fn(*call_args, **call_kwargs))
        except rp.CannotReplay:
            self._current_node, self._current_scope = node, scope
            symbolic = self.symops.function(leaf, args, kwargs, scope, functional)
            return symbolic if symbolic is not None else self._symbolic_new(tensors, scope, leaf)
        except Exception as err:  # noqa: BLE001
            self._event("replay-error", node, f"{path}: {_first_line(err)}")
            return self._symbolic_new(tensors, scope, leaf)
        return self._from_output(out, tensors[0], node, f"{leaf}()")

    def _symbolic_new(self, inputs: list[TensorFact], scope: Scope, what: str) -> TensorFact:
        """A fresh tensor computed from `inputs` whose sizes are unknown. Computed only from
        contiguous tensors it is contiguous too (TensorIterator, reductions, matmul and the
        nn kernels keep the inputs' dense layout), except for the ops that return views."""
        graph: bool | None = None
        if not scope.grad_enabled:
            graph = False
        elif any(t.carries_graph or t.requires_grad for t in inputs):
            graph = True
        elif all(t.requires_grad is False for t in inputs):
            graph = False
        key = self.fresh_storage()
        if not self.replay and inputs and all(t.storage_key in self.sized_storages for t in inputs):
            self.sized_storages.add(key)
        # matmul & co. lay their result out afresh whatever their inputs' strides (checked
        # against torch for transposed, broadcast and 1-d operands).
        dense = bool(inputs) and what not in _STRIDED_RESULTS and (
            what in _ROW_MAJOR_RESULTS or all(t.contiguous is True for t in inputs)
        )
        return TensorFact(
            device=inputs[0].device if inputs else None,
            storage_key=key,
            is_view=False,
            contiguous=True if dense else None,
            carries_graph=graph,
            requires_grad=graph,
        )

    def _from_output(self, out: Any, like: TensorFact, node: ast.AST, what: str) -> Value:
        if rp.is_meta_tensor(out):
            return rp.fact_from_meta(out, like.device)
        if isinstance(out, (tuple, list)) and out and all(rp.is_meta_tensor(o) for o in out):
            return SeqValue(tuple(rp.fact_from_meta(o, like.device) for o in out), "tuple")
        if isinstance(out, (int, float, bool)):
            return Const(out)
        if hasattr(out, "values") and hasattr(out, "indices") and rp.is_meta_tensor(out.values):
            return SeqValue((rp.fact_from_meta(out.values, like.device), rp.fact_from_meta(out.indices, like.device)))
        return UNKNOWN

    def tensor_op(self, fn: Any, operands: list[Value], node: ast.AST, scope: Scope, what: str) -> Value:
        """`fn` (a function of the `operator` module) applied to the operands."""
        tensors = [o for o in operands if isinstance(o, TensorFact)]
        try:
            torch = self._torch()
            concrete = [rp.to_torch(o) for o in operands]
            with torch.set_grad_enabled(scope.grad_enabled):
                # Keyed by the operator itself (operator.add, operator.matmul, ...).
                out = rp.cached_call(("op", fn), concrete, {}, lambda: fn(*concrete))
        except rp.CannotReplay:
            symbolic = self._symbolic_elementwise(fn, operands, tensors, scope)
            return symbolic if symbolic is not None else self._symbolic_new(tensors, scope, what)
        except Exception as err:  # noqa: BLE001
            self._event("replay-error", node, f"{what}: {_first_line(err)}")
            return self._symbolic_new(tensors, scope, what)
        result = self._from_output(out, tensors[0], node, what)
        if isinstance(result, TensorFact) and result.is_view and tensors:
            result = replace(result, view_of=tensors[0].view_of)
        return result

    def _symbolic_elementwise(self, fn: Any, operands: list[Value], tensors: list[TensorFact], scope: Scope) -> Value | None:
        """`a + b`, `x * 2`, `q @ k` with symbolic sizes."""
        if not any(t.sym is not None for t in tensors):
            return None
        for operand in operands:
            if isinstance(operand, TensorFact):
                continue
            if isinstance(operand, Const) and isinstance(operand.value, (int, float, bool)):
                continue
            if isinstance(operand, (SizeValue, Number)) and self.symops.is_number(operand):
                continue
            return None  # an operand that may be a tensor of some other shape
        if fn is operator.matmul and len(tensors) == 2:
            return self.symops.matmul(tensors[0], tensors[1], scope)
        if fn is operator.getitem:
            return None
        dtype: Any = True
        if fn in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
            dtype = "bool"
        return self.symops.elementwise(tensors, scope, dtype=dtype)

    # x.method(...) -------------------------------------------------------------
    def tensor_method(
        self,
        tensor: TensorFact,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        node: ast.AST,
        scope: Scope,
        *,
        as_property: bool = False,
    ) -> Value:
        line = getattr(node, "lineno", 0)
        if tensor.shape is None and tensor.sym is not None and name in ("size", "dim"):
            if name == "dim":
                return Const(tensor.sym.ndim)
            return self.dim_size(tensor, args[0]) if args else self.shape_value(tensor)
        if tensor.shape is None and tensor.sym is None and name == "size" and len(args) == 1:
            return self.dim_of_unknown_rank(tensor, args[0], node)
        if name in ("size", "dim", "numel", "stride", "storage_offset", "is_contiguous", "element_size"):
            return self._tensor_query(tensor, name, args)
        if name in api.SCALAR_METHODS:
            return UNKNOWN
        if name in ("cuda", "cpu") or name == "to":
            return self._to_device(tensor, name, args, kwargs, node, scope)
        if name not in api.TENSOR_METHODS and not as_property:
            return UNKNOWN
        text = self._describe_call(name, node, as_property)
        result: Value
        if tensor.meta is not None and self.replay:
            result = self._replay_method(tensor, name, args, kwargs, node, scope, as_property, text)
        else:
            self._current_node, self._current_scope = node, scope
            symbolic = self.symops.method(tensor, name, args, kwargs, scope) if tensor.sym is not None else None
            result = symbolic if symbolic is not None else self._symbolic_method(tensor, name, args, kwargs, scope, line, text)
        if isinstance(result, TensorFact):
            result = self._annotate(tensor, result, name, text, line)
        elif isinstance(result, SeqValue):
            result = SeqValue(
                tuple(self._annotate(tensor, r, name, text, line) if isinstance(r, TensorFact) else r for r in result.items),
                result.kind,
            )
        return result

    def _describe_call(self, name: str, node: ast.AST, as_property: bool) -> str:
        if as_property or not isinstance(node, ast.Call):
            return name
        return f"{name}({_format_args(node)})"

    def _tensor_query(self, tensor: TensorFact, name: str, args: list[Value]) -> Value:
        if tensor.shape is None:
            return UNKNOWN
        if name == "size":
            if not args:
                return Const(tuple(tensor.shape))
            dim = args[0]
            if isinstance(dim, Const) and isinstance(dim.value, int) and -len(tensor.shape) <= dim.value < len(tensor.shape):
                return Const(tensor.shape[dim.value])
            return UNKNOWN
        if name == "dim":
            return Const(len(tensor.shape))
        if name == "numel":
            return Const(tensor.numel)
        if name == "stride" and tensor.strides is not None:
            return Const(tuple(tensor.strides)) if not args else UNKNOWN
        if name == "storage_offset" and tensor.storage_offset is not None:
            return Const(tensor.storage_offset)
        if name == "is_contiguous" and tensor.contiguous is not None and not args:
            return Const(tensor.contiguous)
        return UNKNOWN

    def _to_device(
        self, tensor: TensorFact, name: str, args: list[Value], kwargs: dict[str, Value], node: ast.AST, scope: Scope
    ) -> Value:
        device = tensor.device
        dtype_args: list[Value] = []
        changed_device = False
        if name == "cuda":
            device, changed_device = "cuda", tensor.device != "cuda"
        elif name == "cpu":
            device, changed_device = "cpu", tensor.device != "cpu"
        else:
            for value in [*args, *([kwargs["device"]] if "device" in kwargs else [])]:
                if isinstance(value, Const) and isinstance(value.value, str):
                    new = value.value.split(":")[0]
                    changed_device = changed_device or new != tensor.device
                    device = new
                elif isinstance(value, TensorFact):
                    dtype_args.append(TorchRef(f"torch.{value.dtype}") if value.dtype else UNKNOWN)
                    changed_device = changed_device or value.device != tensor.device
                    device = value.device
                elif isinstance(value, Const) and value.value is None:
                    continue
                else:
                    dtype_args.append(value)
            if "dtype" in kwargs:
                dtype_args.append(kwargs["dtype"])
            if device is None:
                changed_device = True
        line = getattr(node, "lineno", 0)
        if tensor.meta is not None and self.replay:
            try:
                torch = self._torch()
                concrete = [rp.to_torch(a) for a in dtype_args]
                extra = {k: rp.to_torch(v) for k, v in kwargs.items() if k in ("memory_format", "copy")}
                with torch.set_grad_enabled(scope.grad_enabled):
                    out = tensor.meta.to(*concrete, **extra) if concrete or extra else tensor.meta
                    if changed_device:
                        out = out.clone() if out is tensor.meta else out
            except rp.CannotReplay:
                return self._symbolic_copy(tensor, device, scope)
            except Exception as err:  # noqa: BLE001
                self._event("replay-error", node, f".{name}(): {_first_line(err)}")
                return self._symbolic_copy(tensor, device, scope)
            if out is tensor.meta:
                return tensor  # same tensor: `.to()` returns self when nothing changes
            fact = rp.fact_from_meta(out, device)
            return fact.with_note("copy", f".{name}(...) to {device}" if changed_device else f".{name}(...)", line)
        if not dtype_args and not changed_device:
            return tensor
        return self._symbolic_copy(tensor, device, scope)

    def _symbolic_copy(self, tensor: TensorFact, device: str | None, scope: Scope) -> TensorFact:
        return TensorFact(
            device=device,
            storage_key=None,
            carries_graph=((tensor.carries_graph or tensor.requires_grad) and scope.grad_enabled) or None,
        )

    def _replay_method(
        self,
        tensor: TensorFact,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        node: ast.AST,
        scope: Scope,
        as_property: bool,
        text: str,
    ) -> Value:
        try:
            torch = self._torch()
            meta = tensor.meta
            concrete = [rp.to_torch(a) for a in args]
            concrete_kw = {k: rp.to_torch(v) for k, v in kwargs.items()}
            with torch.set_grad_enabled(scope.grad_enabled):
                if as_property:
                    out = getattr(meta, name)
                elif name in api.VIEW_METHODS or name.endswith("_"):
                    out = getattr(meta, name)(*concrete, **concrete_kw)
                else:
                    out = rp.cached_call(
                        ("method", name), [meta, *concrete], concrete_kw,
                        lambda: getattr(meta, name)(*concrete, **concrete_kw),
                    )
        except rp.CannotReplay:
            return self._symbolic_method(tensor, name, args, kwargs, scope, getattr(node, "lineno", 0), text)
        except Exception as err:  # noqa: BLE001
            message = _first_line(err)
            if name == "view" and ("view size is not compatible" in message or "Cannot view" in message):
                self._event("view-incompatible", node, message)
                return TensorFact(dtype=tensor.dtype, device=tensor.device).with_note(
                    "raises at run time", f"{text}: {message}", getattr(node, "lineno", 0)
                )
            self._event("replay-error", node, f".{name}(): {message}")
            return self._symbolic_method(tensor, name, args, kwargs, scope, getattr(node, "lineno", 0), text)
        if name.endswith("_") and out is meta:
            # In place: same tensor, its facts may have changed (requires_grad_, t_()...).
            fact = rp.fact_from_meta(meta, tensor.device)
            return replace(fact, view_of=tensor.view_of, provenance=tensor.provenance)
        result = self._from_output(out, tensor, node, text)
        if name in ("reshape", "reshape_as", "flatten", "ravel") and isinstance(result, TensorFact):
            if result.meta is not None and result.meta._base is None and result.storage_key != tensor.storage_key:
                if (result.numel or 0) > 0 and out is not meta:
                    self._event(
                        "reshape-copies",
                        node,
                        f"`{name}` copies {format_bytes(result.nbytes)} here: its input is not contiguous",
                        nbytes=result.nbytes,
                    )
        return result

    def _symbolic_method(
        self,
        tensor: TensorFact,
        name: str,
        args: list[Value],
        kwargs: dict[str, Value],
        scope: Scope,
        line: int,
        text: str,
    ) -> Value:
        """Facts that hold whatever the sizes: views share storage, permutes reorder."""
        base = TensorFact(
            dtype=tensor.dtype,
            device=tensor.device,
            requires_grad=tensor.requires_grad if scope.grad_enabled else False,
            carries_graph=tensor.carries_graph if scope.grad_enabled else False,
        )
        if name in ("chunk", "split", "tensor_split", "unbind"):
            item = replace(base, is_view=True, storage_key=tensor.storage_key, view_of=tensor.view_of)
            count = args[0] if args else None
            if name == "chunk" and isinstance(count, Const) and isinstance(count.value, int) and 0 < count.value <= 64:
                return SeqValue((item,) * count.value)
            return ListOf(item)
        if name in ("detach", "detach_"):
            return replace(
                base,
                is_view=False,
                storage_key=tensor.storage_key,
                view_of=tensor.view_of,
                requires_grad=False,
                carries_graph=False,
                shape=tensor.shape,
                strides=tensor.strides,
                storage_offset=tensor.storage_offset,
                contiguous=tensor.contiguous,
            )
        if name in api.VIEW_METHODS:
            return replace(base, is_view=True, storage_key=tensor.storage_key, view_of=tensor.view_of, permuted_by=tensor.permuted_by)
        if name == "contiguous":
            return replace(base, contiguous=True, permuted_by=None)
        if name in api.MAYBE_COPY:
            return replace(base, permuted_by=None)
        if name == "clone":
            return replace(base, is_view=False, storage_key=self.fresh_storage(), contiguous=tensor.contiguous, permuted_by=tensor.permuted_by)
        if name in api.CAST_METHODS:
            return replace(base, dtype=api.CAST_METHODS[name])
        if name.endswith("_"):
            return tensor
        fresh = self._symbolic_new([tensor, *[a for a in args if isinstance(a, TensorFact)]], scope, name)
        return replace(fresh, dtype=tensor.dtype if name not in ("argmax", "argmin") else "int64")

    def _annotate(self, source: TensorFact, result: TensorFact, name: str, text: str, line: int) -> TensorFact:
        """Carry the symbolic facts and the provenance that explains the result."""
        updates: dict[str, Any] = {}
        shares = result.storage_key is not None and result.storage_key == source.storage_key
        # Keep the source's story only where it still explains the result: a view of the
        # same storage, or a layout inherited from it.
        keeps_layout_story = result.contiguous is False and source.contiguous is False
        inherited = source.provenance[-MAX_PROVENANCE:] if keeps_layout_story else ()
        provenance = (*inherited, *result.provenance)
        if shares:
            updates["view_of"] = source.view_of
        if name in api.PERMUTING:
            updates["permuted_by"] = text
        elif name in ("contiguous", "clone") or (name in api.MAYBE_COPY and not shares):
            updates["permuted_by"] = None if (result.contiguous or name == "contiguous") else source.permuted_by
        elif shares and name in api.VIEW_METHODS:
            updates["permuted_by"] = source.permuted_by
        if source.detached_from and shares:
            updates["detached_from"] = source.detached_from
        fact = replace(result, provenance=provenance, **updates)
        if name in api.PERMUTING:
            if result.contiguous is False:
                fact = fact.with_note("non-contiguous", text, line)
            elif result.contiguous is None:
                fact = fact.with_note("non-contiguous unless the moved dims have size 1", text, line)
        elif name in ("detach", "detach_"):
            fact = fact.with_note("detached, shares storage", text, line)
        elif name in api.MAYBE_COPY and result.meta is not None:
            if not shares and source.contiguous is False:
                fact = fact.with_note(f"copy ({format_bytes(result.nbytes)})", f"{text} of a non-contiguous tensor", line)
            elif shares:
                fact = fact.with_note("view, no copy", text, line)
        elif shares and name in api.VIEW_METHODS:
            changed = result.contiguous is False and source.contiguous is not False
            fact = fact.with_note("non-contiguous view" if changed else "view (shares storage)", text, line)
        return fact

    # nn modules --------------------------------------------------------------
    def call_user_module(self, instance: InstanceValue, args: list[Value], scope: Scope) -> Value:
        """`model(x)` of a user nn.Module: a new tensor, carrying a graph when grad is on
        (its layout would need the forward's body; see notes in the README)."""
        tensors = [a for a in args if isinstance(a, TensorFact)]
        if not tensors and args:
            return UNKNOWN
        return TensorFact(
            device=tensors[0].device if tensors else None,
            storage_key=self.fresh_storage(),
            is_view=False,
            carries_graph=bool(scope.grad_enabled),
        )

    def make_module(
        self, path: str, leaf: str, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call
    ) -> Value:
        canonical = f"torch.nn.{leaf}"
        literal = exact and all(
            isinstance(a, (Const, ModuleValue)) or (isinstance(a, TorchRef) and _is_torch_constant(a.path))
            for a in [*args, *kwargs.values()]
        )
        self.symops.mark_int([*args, *kwargs.values()])
        if not literal:
            # Not built on meta; the arguments still give sizes (`nn.Linear(C, 3 * C)`).
            return ModuleValue(canonical, tuple(args) if exact else (), dict(kwargs) if exact else {}, line=node.lineno, built=False)
        return ModuleValue(canonical, tuple(args), dict(kwargs), line=node.lineno)

    def module_method(self, module: ModuleValue, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name in ("eval", "train", "to", "cuda", "cpu", "float", "half", "double", "requires_grad_"):
            if name in ("eval", "train"):
                training = name == "train"
                if args and isinstance(args[0], Const):
                    training = bool(args[0].value) if name == "train" else training
                module.training = training
                if module.built not in (None, False):
                    module.built.train(training)
            return module
        return UNKNOWN

    def call_module(
        self, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], exact: bool, node: ast.Call, scope: Scope
    ) -> Value:
        if args and isinstance(args[0], Opaque) and len(args[0].path) == 1:
            args = [self.opaque_tensor(args[0]), *args[1:]]  # `self.conv(x)`: x is a tensor
        tensors = [a for a in args if isinstance(a, TensorFact)]
        if not tensors:
            return UNKNOWN
        has_params = module.name not in _PARAMETERLESS
        # Dropout in eval mode and Identity return their input, Linear on a >2-d input a view
        # of a 2-d result: without replay, storage identity and view-ness stay unknown.
        passes_through = module.name in _MAY_RETURN_INPUT
        dense = all(t.contiguous is True for t in tensors) and module.name not in _MAY_CHANGE_LAYOUT
        symbolic = TensorFact(
            device=tensors[0].device,
            contiguous=True if dense else None,
            assumes=frozenset().union(*(t.assumes for t in tensors)) if dense else frozenset(),
            storage_key=None if passes_through else self.fresh_storage(),
            is_view=None,
            carries_graph=(True if has_params else tensors[0].carries_graph) if scope.grad_enabled else False,
            requires_grad=(True if has_params else tensors[0].requires_grad) if scope.grad_enabled else False,
        )
        if module.built is False or not exact or not self.replay or any(t.meta is None for t in tensors):
            if exact:
                self._current_node, self._current_scope = node, scope
                sym = self._symbolic_module(module, args, kwargs, node, scope)
                if sym is not None:
                    return sym
            if module.built is not False and all(t.storage_key in self.sized_storages for t in tensors):
                self.sized_storages.add(symbolic.storage_key)  # type: ignore[arg-type]
            return symbolic
        try:
            torch = self._torch()
            built = rp.build_module(module)
            call_args = [rp.to_torch(a) for a in args]
            call_kwargs = {k: rp.to_torch(v) for k, v in kwargs.items()}
            with torch.set_grad_enabled(scope.grad_enabled):
                if module.name in api.CONV_MODULES and not call_args[0].is_contiguous() and built.padding_mode == "zeros":
                    fn = getattr(torch.nn.functional, module.name.lower())
                    out = rp.conv_with_device_layout(
                        lambda x, w, b: fn(x, w, b, built.stride, built.padding, built.dilation, built.groups),
                        [call_args[0], built.weight, built.bias],
                        {},
                    )
                else:
                    key = ("module", module.path, repr(module.args), repr(module.kwargs), module.training)
                    out = rp.cached_call(key, call_args, call_kwargs, lambda: built(*call_args, **call_kwargs))
        except rp.CannotReplay:
            return symbolic
        except Exception as err:  # noqa: BLE001
            module.built = None if module.built is None else module.built
            self._event("replay-error", node, f"{module.name}: {_first_line(err)}")
            return symbolic
        result = self._from_output(out, tensors[0], node, module.name)
        if isinstance(result, TensorFact):
            result = result.with_note("new tensor", f"{module.name} forward", node.lineno)
        return result

    def _symbolic_module(
        self, module: ModuleValue, args: list[Value], kwargs: dict[str, Value], node: ast.Call, scope: Scope
    ) -> Value | None:
        if module.name == "Sequential":
            value: Value = args[0] if args else UNKNOWN
            for child in module.args:
                if not isinstance(child, ModuleValue) or not isinstance(value, TensorFact):
                    return None
                out = self.symops.module(child, [value], {}, scope, None)
                if out is None:
                    return None
                value = out
            return value
        return self.symops.module(module, args, kwargs, scope, _access_path(node.func))

    # ------------------------------------------------------------------ events
    def _event(self, kind: str, node: ast.AST, message: str, nbytes: int | None = None) -> None:
        line = getattr(node, "lineno", 0)
        col = getattr(node, "col_offset", 0)
        self.events.append(
            ReplayEvent(
                kind,
                line,
                col,
                getattr(node, "end_lineno", None) or line,
                getattr(node, "end_col_offset", None) or col,
                message,
                nbytes,
            )
        )


_PARAMETERLESS = frozenset(
    {
        "ReLU", "ReLU6", "GELU", "SiLU", "ELU", "SELU", "LeakyReLU", "Tanh", "Sigmoid", "Softmax",
        "LogSoftmax", "Softplus", "Mish", "Hardswish", "Hardsigmoid", "Dropout", "Dropout1d",
        "Dropout2d", "Dropout3d", "AlphaDropout", "Identity", "Flatten", "Unflatten", "MaxPool1d",
        "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
        "AdaptiveMaxPool3d", "Upsample", "PixelShuffle", "ZeroPad2d", "ConstantPad1d",
        "ConstantPad2d", "ReflectionPad2d", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
        "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss",
        "CosineSimilarity", "GLU",
    }
)  # fmt: skip


def _dtype_of(value: Value) -> str | None:
    if isinstance(value, TorchRef) and value.path.startswith("torch."):
        return api.DTYPES.get(value.path[6:])
    return None


def _is_number(value: Value) -> bool:
    if isinstance(value, (Number, SizeValue)):
        return True
    return isinstance(value, Const) and isinstance(value.value, (int, float)) and not isinstance(value.value, bool)


def _covers_its_storage(fact: TensorFact) -> bool:
    """A view that reads every element of its storage (a `.t()` of a whole tensor)."""
    return fact.storage_offset == 0 and fact.numel is not None and fact.numel == fact.storage_numel


def _access_path(node: ast.expr) -> tuple[str, ...] | None:
    """`self.c_attn` -> ("self", "c_attn"): how the code reaches a module, to name its sizes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return (node.id, *reversed(parts))


# Modules whose forward may return its input itself.
_MAY_RETURN_INPUT = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity"})
# Modules whose output layout may differ from their input's (a channels_last conv, an RNN).
# (A conv keeps a row-major input row-major; only a channels_last input, not contiguous
# itself, gives a channels_last output.)
_MAY_CHANGE_LAYOUT = frozenset({"LSTM", "GRU", "RNN", "MultiheadAttention", "Flatten", "Unflatten"})


def _is_torch_constant(path: str) -> bool:
    leaf = path.rpartition(".")[2]
    return leaf in api.DTYPES or leaf in api.MEMORY_FORMATS


def _literal_size(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        total = 0
        for v in value:
            total += _literal_size(v)
            if total > MAX_LITERAL_ELEMENTS:
                break
        return total
    return 1


def to_value(value: Value) -> Any:
    return value.value if isinstance(value, Const) else None


def _source_text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"
    return text if len(text) <= 60 else text[:57] + "..."


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]


def format_bytes(n: int | None) -> str:
    if n is None:
        return "an unknown number of bytes"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


# Dispatch tables, built once: `getattr(self, "expr_" + name)` per node was a hot spot.
_EXPR_HANDLERS: dict[type, Any] = {
    getattr(ast, name[5:]): fn for name, fn in vars(Interpreter).items() if name.startswith("expr_") and hasattr(ast, name[5:])
}
_STMT_HANDLERS: dict[type, Any] = {
    getattr(ast, name[5:]): fn for name, fn in vars(Interpreter).items() if name.startswith("stmt_") and hasattr(ast, name[5:])
}
