"""Statements and scopes: assignments and binding names (storage owners, unpacking), branches that
join, loops run twice, `with` grad modes, try/match, imports, function and class definitions.

A mixin of `interpreter.Interpreter`; methods take `self: Interpreter`.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from stridelens.server.analysis import replay as rp
from stridelens.server.analysis.facts import TensorFact, with_fields
from stridelens.server.analysis.interp_sizes import shape_subject
from stridelens.server.analysis.interp_support import (
    Scope,
    _covers_its_storage,
)
from stridelens.server.analysis.values import (
    UNKNOWN,
    ClassInfo,
    Const,
    DictValue,
    FunctionValue,
    GradContext,
    InstanceValue,
    ListOf,
    ModuleValue,
    Opaque,
    SeqValue,
    TorchRef,
    Value,
    forget_layout,
    join_values,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interpreter import Interpreter


class StatementsMixin:
    statement: ast.stmt | None  # the innermost statement running

    # -------------------------------------------------------------- statements
    def exec_block(self: Interpreter, body: list[ast.stmt], scope: Scope) -> None:
        for stmt in body:
            self._tick()
            self.grad_enabled[stmt] = scope.grad_enabled
            self.statement = stmt  # the innermost statement running (a block's last one after it)
            self.exec_stmt(stmt, scope)

    def exec_stmt(self: Interpreter, stmt: ast.stmt, scope: Scope) -> None:
        handler = self._stmt_handlers.get(type(stmt))
        if handler is not None:
            handler(self, stmt, scope)
            return
        # Anything else: evaluate the expressions it contains, for their facts.
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                self.eval(child, scope)

    def stmt_Expr(self: Interpreter, stmt: ast.Expr, scope: Scope) -> None:
        self.eval(stmt.value, scope)

    def stmt_Assign(self: Interpreter, stmt: ast.Assign, scope: Scope) -> None:
        target = stmt.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            self._rank_from_unpacking(stmt.value, len(target.elts), scope)
        elif len(stmt.targets) == 1 and isinstance(target, (ast.Tuple, ast.List)) and self._sizes_around_a_star(target, stmt.value, scope):
            return
        value = self.eval(stmt.value, scope)
        for target in stmt.targets:
            self.bind(target, value, scope)

    def _rank_from_unpacking(self: Interpreter, value: ast.expr, rank: int, scope: Scope) -> None:
        """`B, C, T = x.shape` says x has 3 dims: give x one size per dim, if it has none."""
        subject = shape_subject(value)
        if subject is None:
            return
        fact = scope.lookup(subject)
        if isinstance(fact, TensorFact) and fact.shape is None and fact.sym is None and fact.meta is None:
            self._rebind_in_place(subject, self.with_rank(fact, rank, subject), scope)

    def _sizes_around_a_star(self: Interpreter, target: ast.Tuple | ast.List, value: ast.expr, scope: Scope) -> bool:
        """`b, c, *spatial = x.shape` of a tensor of unknown rank: `b` and `c` are its first
        two sizes, named `x.shape[0]` and `x.shape[1]` (a size after the star counts from the
        end); `spatial` is a list of sizes. So `x.reshape(b, c, -1)` has a shape."""
        subject = shape_subject(value)
        stars = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
        if subject is None or len(stars) != 1:
            return False
        fact = scope.lookup(subject)
        if isinstance(fact, Opaque) and len(fact.path) == 1:
            fact = self.opaque_tensor(fact)
            self._rebind_in_place(subject, fact, scope)
        if not (isinstance(fact, TensorFact) and fact.shape is None and fact.sym is None and fact.meta is None):
            return False
        self.eval(value, scope)
        star = stars[0]
        for i, element in enumerate(target.elts):
            if isinstance(element, ast.Starred):
                self.bind(element.value, UNKNOWN, scope)
                continue
            index = i if i < star else i - len(target.elts)
            self.bind(element, self.dim_of_unknown_rank(fact, Const(index), value), scope)
        return True

    def _rebind_in_place(self: Interpreter, name: str, value: Value, scope: Scope) -> None:
        holder: Scope | None = scope
        while holder is not None and name not in holder.env:
            holder = holder.parent
        (holder or scope).env[name] = value

    def _assign_attribute(self: Interpreter, owner: InstanceValue, attr: str, value: Value) -> None:
        """`self.x = value` (or `register_buffer("x", value)`): outside `__init__` too, so the
        attribute is what every assignment made it."""
        old = owner.cls.attributes.get(attr)
        owner.cls.attributes[attr] = value if old is None else join_values(old, value)

    def _rebind_container(self: Interpreter, target: ast.expr, value: Value, scope: Scope) -> bool:
        """Make `target` (a name, or `self.attr`) hold `value` where it was bound; False
        where the analysis cannot say which binding it is."""
        if isinstance(target, ast.Name):
            self._rebind_in_place(target.id, value, scope)
            return True
        if isinstance(target, ast.Attribute):
            owner = self.eval(target.value, scope)
            if isinstance(owner, InstanceValue):
                owner.cls.attributes[target.attr] = value
                return True
        return False

    def stmt_AnnAssign(self: Interpreter, stmt: ast.AnnAssign, scope: Scope) -> None:
        if stmt.value is not None:
            value = self.eval(stmt.value, scope)
        elif self._annotation_is_tensor(stmt.annotation):
            value = TensorFact(storage_key=self.fresh_storage())
        else:
            return
        self.bind(stmt.target, value, scope)

    def stmt_AugAssign(self: Interpreter, stmt: ast.AugAssign, scope: Scope) -> None:
        current = self.eval_target_value(stmt.target, scope)
        right = self.eval(stmt.value, scope)
        result = self.binop(stmt.op, current, right, stmt, scope, inplace=True)
        if isinstance(stmt.target, ast.Name):
            self.bind(stmt.target, result, scope)
        else:
            self.record(stmt.target, result)

    def stmt_Import(self: Interpreter, stmt: ast.Import, scope: Scope) -> None:
        for alias in stmt.names:
            if alias.name.split(".")[0] in ("torch", "einops"):  # einops: symbolic_einops
                if alias.asname:
                    scope.env[alias.asname] = TorchRef(alias.name)
                else:
                    scope.env[alias.name.split(".")[0]] = TorchRef(alias.name.split(".")[0])
            elif alias.name == "math":
                scope.env[alias.asname or "math"] = TorchRef("math")  # its functions give numbers
            else:
                scope.env[alias.asname or alias.name.split(".")[0]] = UNKNOWN

    def stmt_ImportFrom(self: Interpreter, stmt: ast.ImportFrom, scope: Scope) -> None:
        module = stmt.module or ""
        for alias in stmt.names:
            if alias.name == "*":
                continue
            bound = alias.asname or alias.name
            if stmt.level == 0 and (module in ("torch", "math") or module.split(".")[0] in ("torch", "einops")):
                scope.env[bound] = TorchRef(f"{module}.{alias.name}")
            else:
                scope.env[bound] = UNKNOWN

    def stmt_If(self: Interpreter, stmt: ast.If, scope: Scope) -> None:
        if scope.parent is None and _is_main_guard(stmt.test):
            # A script's demo: what it passes to the file's functions is one run among others.
            # (Its `else` is the other branch, joined as in any `if`.)
            self.demo_depth += 1
            try:
                self._branches([stmt.body, stmt.orelse], scope)
            finally:
                self.demo_depth -= 1
            return
        test = self.eval(stmt.test, scope)
        if isinstance(test, Const) and isinstance(test.value, (bool, int)):
            self.exec_block(stmt.body if test.value else stmt.orelse, scope)
            return
        self._branches([stmt.body, stmt.orelse], scope)

    def _branches(self: Interpreter, bodies: list[list[ast.stmt]], scope: Scope) -> None:
        before = dict(scope.env)
        results: list[dict[str, Value]] = []
        for body in bodies:
            scope.env = dict(before)
            self.exec_block(body, scope)
            results.append(scope.env)
        scope.env = self._join_envs(results)

    def _join_envs(self: Interpreter, envs: list[dict[str, Value]]) -> dict[str, Value]:
        joined = dict(envs[0])
        for other in envs[1:]:
            for name in set(joined) | set(other):
                a, b = joined.get(name), other.get(name)
                if a is None or b is None:
                    joined[name] = UNKNOWN
                elif a is not b:
                    joined[name] = join_values(a, b, self.symops.canon_layout)
        return joined

    def _loop(self: Interpreter, body: list[ast.stmt], orelse: list[ast.stmt], scope: Scope, bind: Any) -> None:
        before = dict(scope.env)
        bind()
        self.exec_block(body, scope)
        # Second pass from the join of entry and end-of-body: loop-carried changes show.
        scope.env = self._join_envs([before, scope.env])
        bind()
        self.exec_block(body, scope)
        scope.env = self._join_envs([before, scope.env])
        self.exec_block(orelse, scope)

    def stmt_For(self: Interpreter, stmt: ast.For | ast.AsyncFor, scope: Scope) -> None:
        iterable = self.eval(stmt.iter, scope)
        item = self._element_of(iterable)
        self._loop(stmt.body, stmt.orelse, scope, lambda: self.bind(stmt.target, item, scope))

    stmt_AsyncFor = stmt_For

    def stmt_While(self: Interpreter, stmt: ast.While, scope: Scope) -> None:
        self.eval(stmt.test, scope)
        self._loop(stmt.body, stmt.orelse, scope, lambda: None)

    def stmt_With(self: Interpreter, stmt: ast.With | ast.AsyncWith, scope: Scope) -> None:
        saved = scope.grad_enabled
        inference = 0
        for item in stmt.items:
            value = self.eval(item.context_expr, scope)
            if isinstance(value, GradContext):
                scope.grad_enabled = value.enabled
                # Views of tensors made under inference_mode have no `_base` (FACTS.md).
                inference = int(value.name == "torch.inference_mode" and not value.enabled)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, UNKNOWN, scope)
        self.inference_depth += inference
        try:
            self.exec_block(stmt.body, scope)
        finally:
            scope.grad_enabled = saved
            self.inference_depth -= inference

    stmt_AsyncWith = stmt_With

    def stmt_Try(self: Interpreter, stmt: ast.Try, scope: Scope) -> None:
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

    def stmt_Match(self: Interpreter, stmt: Any, scope: Scope) -> None:
        self.eval(stmt.subject, scope)
        self._branches([case.body for case in stmt.cases] + [[]], scope)

    def stmt_Delete(self: Interpreter, stmt: ast.Delete, scope: Scope) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                scope.env[target.id] = UNKNOWN
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                self._forget_dict(target.value.id, scope)  # `del kwargs["mask"]`

    def stmt_Return(self: Interpreter, stmt: ast.Return, scope: Scope) -> None:
        value = self.eval(stmt.value, scope) if stmt.value is not None else Const(None)
        if self._returns:
            self._returns[-1].append(value)

    def stmt_FunctionDef(self: Interpreter, stmt: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        for deco in stmt.decorator_list:
            self.eval(deco, scope)
        scope.env[stmt.name] = FunctionValue(stmt)
        self._pending_functions.append((stmt, scope, None))

    stmt_AsyncFunctionDef = stmt_FunctionDef

    def stmt_ClassDef(self: Interpreter, stmt: ast.ClassDef, scope: Scope) -> None:
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
            if scope.parent is None:
                self.module_inits.append((info, init, scope))
        for name, fn in methods.items():
            if name != "__init__":
                self._pending_functions.append((fn, scope, info))

    # ------------------------------------------------------------------ binding
    def bind(self: Interpreter, target: ast.expr, value: Value, scope: Scope) -> None:
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
                self.name_tensor_sizes(value, (target.value.id, target.attr), scope)
            if isinstance(owner, InstanceValue):
                # `self.x = ...` outside __init__ makes the attribute path-dependent.
                self._assign_attribute(owner, target.attr, value)
            self.record(target, value)
        elif isinstance(target, ast.Subscript):
            self.eval(target.value, scope)
            self.eval(target.slice, scope)
            if isinstance(target.value, ast.Name):
                self._forget_dict(target.value.id, scope)  # `kwargs["context"] = ...`
        elif isinstance(target, ast.Starred):
            self.bind(target.value, UNKNOWN, scope)

    def _forget_dict(self: Interpreter, name: str, scope: Scope) -> None:
        """A dict the code changes no longer holds what it was built with."""
        if isinstance(scope.lookup(name), DictValue):
            self._rebind_in_place(name, UNKNOWN, scope)

    def _unpack_tensor(self: Interpreter, tensor: TensorFact, count: int, scope: Scope) -> list[Value]:
        """`q, k, v = qkv`: iterating a tensor selects along dim 0."""
        first = tensor.shape[0] if tensor.shape else (tensor.sym.shape[0] if tensor.sym is not None and tensor.sym.shape else None)
        if first != count:
            return [UNKNOWN] * count
        if tensor.meta is not None and self.replay:
            try:
                return [
                    with_fields(rp.fact_from_meta(tensor.meta[i], tensor.device), view_of=tensor.view_of)
                    for i in range(count)
                ]
            except Exception:  # noqa: BLE001 - torch said no: nothing known
                return [UNKNOWN] * count
        items: list[Value] = []
        for i in range(count):
            item = self.symops.index(tensor, [i], scope)
            items.append(item if item is not None else UNKNOWN)
        return items

    def _claim_storage(self: Interpreter, name: str, fact: TensorFact) -> TensorFact:
        """The first name bound to a storage owns it; later names are views of it."""
        key = fact.storage_key
        if key is None:
            return fact
        owner = self.storage_owner.get(key)
        if fact.meta is not None:
            # A storage key is the meta storage's address: keep it alive, or a later storage
            # gets the same address and reads as "a view of" this name.
            self._keep_alive.append(fact.meta)
        reads_all = _covers_its_storage(fact) or (
            fact.storage_offset == 0 and fact.numel is not None and fact.numel == self.literal_storage_numels.get(key)
        )
        if owner is None and fact.is_view is True and not reads_all:
            # q, k, v of one `split`: none is the others' base. Name no owner.
            return with_fields(fact, view_of=None) if fact.view_of is not None else fact
        if owner is None:
            self.storage_owner[key] = name
            if fact.view_of is not None and fact.is_view is not True:
                return with_fields(fact, view_of=None)
            return fact
        if owner != name and fact.view_of != owner:
            return with_fields(fact, view_of=owner)
        return fact

    def eval_target_value(self: Interpreter, target: ast.expr, scope: Scope) -> Value:
        if isinstance(target, ast.Name):
            value = scope.lookup(target.id)
            return value if value is not None else UNKNOWN
        return self.eval(target, scope)

    def _element_of(self: Interpreter, iterable: Value) -> Value:
        if isinstance(iterable, SeqValue) and iterable.items:
            item = iterable.items[0]
            for other in iterable.items[1:]:
                item = join_values(item, other, self.symops.canon_layout)
            return item
        if isinstance(iterable, ListOf):
            return iterable.item
        if isinstance(iterable, ModuleValue) and iterable.name == "Sequential" and iterable.args:
            return self._element_of(SeqValue(iterable.args, "list"))
        if isinstance(iterable, TensorFact):
            return forget_layout(with_fields(iterable, is_view=True))
        return UNKNOWN


def _is_main_guard(test: ast.expr) -> bool:
    """`if __name__ == "__main__":`"""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and any(
        isinstance(x, ast.Constant) and x.value == "__main__" for x in sides
    )
