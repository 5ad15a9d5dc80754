"""The file's own functions and classes: grad modes of decorators, function bodies analysed on
their own (parameters of known rank get symbolic sizes), calls followed with the caller's
facts (`call_concrete`), and calls of the file's own nn.Modules.

A mixin of `interpreter.Interpreter`; methods take `self: Interpreter`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stridelens.server.analysis import torch_api as api
from stridelens.server.analysis.facts import TensorFact, with_fields
from stridelens.server.analysis.interp_sizes import IN_INIT, infer_parameter_ranks
from stridelens.server.analysis.interp_support import (
    MAX_CALL_DEPTH,
    Scope,
    _call_name,
    under_a_condition,
)
from stridelens.server.analysis.layer_ranks import ranks_from_layers
from stridelens.server.analysis.values import (
    UNKNOWN,
    ClassInfo,
    Const,
    DictValue,
    GradContext,
    InstanceValue,
    ModuleValue,
    Number,
    Opaque,
    SeqValue,
    SizeValue,
    TorchRef,
    Value,
    join_values,
)

if TYPE_CHECKING:
    from stridelens.server.analysis.interpreter import Interpreter


class UserCallsMixin:
    _outer_site: ast.AST | None  # the outermost concrete call site (see Interpreter.__init__)

    # --------------------------------------------------------------- functions
    def _annotation_is_tensor(self: Interpreter, annotation: ast.expr | None) -> bool:
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

    def _explicit_grad_mode(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> bool | None:
        """The grad mode a decorator sets (`@torch.no_grad()`), or None: the caller's."""
        if not fn.decorator_list:
            return None
        mode = self._grad_mode_of_decorators(fn, scope, None)
        return mode

    def _grad_mode_of_decorators(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope, default: bool | None = True) -> Any:
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
        self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, parent: Scope, cls: ClassInfo | None
    ) -> None:
        explicit = self._explicit_grad_mode(fn, parent)
        scope = Scope(parent, True if explicit is None else explicit, grad_assumed=explicit is None)
        if fn.name == "__init__" and cls is not None:
            scope.env[IN_INIT] = Const(True)
        args = fn.args
        positional = [*args.posonlyargs, *args.args]
        # A method's `self` is no tensor: with no other parameter there is no rank to find.
        has_params = len(positional) + len(args.kwonlyargs) > (1 if cls is not None else 0)
        from_layers = ranks_from_layers(fn, cls.attributes.get) if has_params and cls is not None and cls.is_module else None
        ranks = infer_parameter_ranks(fn, self.mentions_permute, from_layers, self.mentions_patterns) if has_params else {}
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
        if self.default_dtypes:
            self._bind_dtype_default(fn, scope, parent, cls)
        # The body's names for storages are its own: another function's locals mean nothing
        # here (the module's names do).
        owners = self.storage_owner
        self.storage_owner = dict(owners if self.module_owners is None else self.module_owners)
        self._claim_parameters(scope)
        inference = self._inference_decorated(fn, parent)
        self.inference_depth += inference
        try:
            self.exec_block(fn.body, scope)
        finally:
            self.inference_depth -= inference
            self.storage_owner = owners

    def _bind_dtype_default(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope, parent: Scope, cls: ClassInfo | None) -> None:
        """`def __init__(self, config, dtype=torch.float32)` in a file that never changes a
        dtype: the own pass takes the default where no call in the file passes `dtype` (minGPT's
        `EmbeddingStem(config)`), as it takes the parameters to be float32. A caller of another
        file may pass another dtype, as it may call `.half()`: the analysis assumes neither."""
        spec = fn.args
        positional = [*spec.posonlyargs, *spec.args]
        with_defaults = [
            *zip(positional[len(positional) - len(spec.defaults) :], spec.defaults, strict=True),
            *((a, d) for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True) if d is not None),
        ]
        for arg, default in with_defaults:
            if arg.arg != "dtype":
                continue
            value = self.eval(default, parent)
            if not (isinstance(value, TorchRef) and value.path.removeprefix("torch.") in api.DTYPES):
                return
            callee = cls.node.name if cls is not None and fn.name == "__init__" else fn.name
            index = positional.index(arg) - (1 if cls is not None else 0) if arg in positional else None
            if not self._dtype_never_passed(callee, index):
                return
            scope.env[arg.arg] = value
            return

    def _dtype_never_passed(self: Interpreter, callee: str, index: int | None) -> bool:
        """No call of `callee` in the file passes its `dtype` (as a keyword, at `index`, or
        through `*args`/`**kwargs`)."""
        key = (callee, index)
        known = self._dtype_passed.get(key)
        if known is None:
            known = True
            nodes = list(ast.walk(self.tree))
            # A subclass's construction passes its arguments on (`super().__init__(...)` too).
            callees = {callee, "__init__"} | {
                c.name for c in nodes if isinstance(c, ast.ClassDef) and any(_call_name(b) == callee for b in c.bases)
            }
            for node in nodes:
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                if name not in callees:
                    continue
                if any(k.arg in (None, "dtype") for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
                    known = False
                    break
                if index is not None and len(node.args) > index:
                    known = False
                    break
            self._dtype_passed[key] = known
        return known

    def _inference_decorated(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> int:
        """1 when a decorator runs the body under `torch.inference_mode()`, else 0."""
        for deco in fn.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            if isinstance(target, (ast.Attribute, ast.Name)) and _call_name(target) == "inference_mode":
                value = self.eval(deco, scope)
                if (isinstance(value, GradContext) and not value.enabled) or (
                    isinstance(value, TorchRef) and value.path == "torch.inference_mode"
                ):
                    return 1
        return 0

    def _claim_parameters(self: Interpreter, scope: Scope) -> None:
        # A storage two parameters share is this call's doing (`perceiver_io(x, queries=x)`):
        # another caller passes two tensors, so neither parameter names it.
        shared: set[int] = set()
        for name, value in scope.env.items():
            if isinstance(value, TensorFact) and value.storage_key is not None:
                if value.storage_key in self.storage_owner and self.storage_owner[value.storage_key] != name:
                    shared.add(value.storage_key)
                self.storage_owner.setdefault(value.storage_key, name)
        for key in shared:
            del self.storage_owner[key]

    def call_concrete(
        self: Interpreter,
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
        given = [*args, *kwargs.values()]
        known = any(isinstance(a, TensorFact) and (a.meta is not None or a.sym is not None) for a in given)
        # A module's forward (or another method: mamba's `self.ssm(x)`) is followed whenever it
        # is given a tensor: even without sizes, its body's dtypes and grad facts depend on the
        # caller's. (A method given sizes is followed below, as any function is.)
        followed = (
            instance is not None
            and (fn.name == "forward" or (not known and fn.name != "__init__" and not fn.decorator_list))
            and any(isinstance(a, TensorFact) for a in given)
        )
        if followed and not scope.grad_enabled and self.demo_depth > 0:
            # A forward called under no_grad from a function (`generate`): its grad facts are
            # the own pass's, stated when autograd is on. What this call records only takes
            # requires_grad from the file's other calls (interpreter.record).
            self.no_grad_follow += 1
            try:
                return self._follow(fn, instance, args, kwargs, scope, site)
            finally:
                self.no_grad_follow -= 1
        if not followed and instance is not None and fn.name == "forward" and any(isinstance(a, Opaque) and len(a.path) == 1 for a in given):
            # The caller's own parameter of unknown rank: the body's layers make a tensor of it,
            # as in the forward's own pass, which already states the body's facts for any input.
            # Followed for the caller's result only: nothing is recorded.
            self.quiet_depth += 1
            try:
                return self._follow(fn, instance, args, kwargs, scope, site)
            finally:
                self.quiet_depth -= 1
        # A function of sizes and layers only (`precompute_freqs_cis(dim, end)`,
        # `_get_clones(layer, n)`): what it builds, in the caller's names.
        sizes_only = (
            instance is None
            and bool(given)
            and all(isinstance(a, _SIZE_OR_LAYER) for a in given)
            and self._makes_tensors(fn)
        )
        # A one-line helper given a tensor (`default(context, x)`, `with_pos_embed(t, pos)`):
        # cheap to follow, and what it returns is the caller's tensor.
        one_liner = len(fn.body) == 1 and isinstance(fn.body[0], ast.Return) and any(isinstance(a, TensorFact) for a in given)
        if not known and not followed and not sizes_only and not one_liner and ((has_params and instance is None) or len(fn.args.args) > 1):
            return None
        if not known and not followed and not one_liner and instance is not None and fn.name != "forward":
            return None
        if self.demo_depth and not self.demo_followed and any(_literal(a) for a in given):
            # A demo call (`test()`, a `__main__` block) passes one run's sizes; other files call
            # the same body with others. The body states what holds for any sizes of these ranks;
            # the caller still gets this call's exact result, from a run that records nothing.
            self.quiet_depth += 1
            self.demo_followed += 1
            try:
                exact = self._follow(fn, instance, args, kwargs, scope, site)
            finally:
                self.quiet_depth -= 1
            names = [p.arg for p in _positional_after_self(fn, instance)]
            general_args = [self._generalised(a, names[i] if i < len(names) else f"arg{i}") for i, a in enumerate(args)]
            general_kwargs = {k: self._generalised(v, k) for k, v in kwargs.items()}
            try:
                self._follow(fn, instance, general_args, general_kwargs, scope, site, any_grad_mode=True)
            finally:
                self.demo_followed -= 1
            return exact
        return self._follow(fn, instance, args, kwargs, scope, site)

    def _makes_tensors(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Does the body call a torch factory or build a layer? (Read from its text, once: most functions of
        sizes only compute ints, and following each call of them cost a tenth of `check`.)"""
        known = self._factory_bodies.get(fn)
        if known is None:
            text = self.text_of(fn) or ""
            known = self._factory_bodies[fn] = _FACTORY_CALL.search(text) is not None
        return known

    def _generalised(self: Interpreter, value: Value, name: str) -> Value:
        """A tensor of literal sizes as a parameter of any sizes of its rank (named
        `name.shape[i]`); its row-major layout, if it has one, is assumed (and says so) as for
        any parameter. Its dtype, device and grad facts are the demo's only (other callers
        train on cuda, in half precision, on a generator's output): not kept."""
        if not _literal(value):
            return value
        assert isinstance(value, TensorFact) and value.shape is not None
        return self.tensor_parameter(name, len(value.shape), row_major=value.contiguous is True)

    def _follow(
        self: Interpreter,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        instance: InstanceValue | None,
        args: list[Value],
        kwargs: dict[str, Value],
        scope: Scope,
        site: ast.AST,
        *,
        any_grad_mode: bool = False,
    ) -> Value:
        root = scope
        while root.parent is not None:
            root = root.parent
        if any_grad_mode:
            # As in a function's own pass: other callers may run it with grad on or off.
            explicit = self._explicit_grad_mode(fn, root)
            inner = Scope(root, True if explicit is None else explicit, grad_assumed=explicit is None)
        else:
            inner = Scope(root, scope.grad_enabled and self._grad_mode_of_decorators(fn, root), grad_assumed=scope.grad_assumed)
        if fn.name == "__init__" and instance is not None:
            inner.env[IN_INIT] = Const(True)
        spec = fn.args
        positional = [*spec.posonlyargs, *spec.args]
        params = _positional_after_self(fn, instance)
        if instance is not None and len(params) < len(positional):
            inner.env[positional[0].arg] = instance
        for param in [*params, *spec.kwonlyargs]:
            inner.env[param.arg] = self._param_value(param)
        defaults = spec.defaults
        for param, default in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            inner.env[param.arg] = self.eval(default, root)
        for param, kw_default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if kw_default is not None:
                inner.env[param.arg] = self.eval(kw_default, root)
        shapeless_ranks: dict[str, int] | None = None
        for param, value in zip(params, args, strict=False):
            if instance is not None and _shapeless(value):
                # A tensor of unknown sizes (the caller's own parameter, through a layer): as
                # the forward's own pass sees its parameter (rank from the body, sizes named
                # after it), with the dtype and grad facts the caller knows.
                if shapeless_ranks is None:
                    shapeless_ranks = self._own_ranks(fn, instance)
                rank = shapeless_ranks.get(param.arg)
                if rank is not None and isinstance(value, TensorFact):
                    general = self.tensor_parameter(param.arg, rank)
                    value = with_fields(
                        general, dtype=value.dtype, device=value.device,
                        requires_grad=value.requires_grad, carries_graph=value.carries_graph,
                    )
            inner.env[param.arg] = self._note_scalar(param, value)
        if spec.vararg is not None:
            inner.env[spec.vararg.arg] = SeqValue(tuple(args[len(params) :]))
        by_name = {p.arg: p for p in [*params, *spec.kwonlyargs]}
        for name, value in kwargs.items():
            if name in by_name:
                inner.env[name] = self._note_scalar(by_name[name], value)
        if spec.kwarg is not None:
            # `**kwargs`: the caller's other keywords, passed on as they are (`self.fn(x, **kwargs)`).
            inner.env[spec.kwarg.arg] = DictValue(tuple((k, v) for k, v in kwargs.items() if k not in by_name))
        self._refine_unknown_ranks(fn, inner, [p.arg for p in [*params, *spec.kwonlyargs]])
        for param in [*params, *spec.kwonlyargs]:
            self._name_parameter_sizes(param.arg, inner.env.get(param.arg))
        # The names the body gives storages are its own: the caller's names are theirs again
        # after the call, and what it returns is a view of nothing the caller can name yet.
        owners = self.storage_owner
        self.storage_owner = {}  # the caller's names mean nothing in the body
        self._claim_parameters(inner)
        if not self._call_stack:
            self._outer_site = site
        if not self.quiet_depth and not self.no_grad_follow:
            self._followed_recording.add(fn)
        self._call_stack.append(fn)
        self._returns.append([])
        inference = self._inference_decorated(fn, root)
        self.inference_depth += inference
        frame = _ArgumentProofs(fn, {id(v): p.arg for p in [*params, *spec.kwonlyargs] if isinstance(v := inner.env.get(p.arg), TensorFact) and v.dtype is None})
        self._argument_proofs.append(frame)
        try:
            for stmt in fn.body:
                frame.statement = stmt
                self.exec_block([stmt], inner)
                if not isinstance(stmt, _SIMPLE_STATEMENTS) and self._holds_a_return(stmt):
                    frame.returned = True  # a path may have left before what follows
        finally:
            self.inference_depth -= inference
            self._call_stack.pop()
            returned = self._returns.pop()
            self.storage_owner = owners
            self._argument_proofs.pop()
        if frame.proven:
            self._dtypes_the_call_proves(fn, instance, frame.proven, args, site, scope)
        if not returned:
            return Const(None)
        result = returned[0]
        for other in returned[1:]:
            result = join_values(result, other, self.symops.canon_layout)
        return _unnamed(result)

    def prove_dtype(self: Interpreter, name: str, value: TensorFact, dtype: str, node: ast.AST, scope: Scope) -> None:
        """`name` (bound to `value`) has `dtype` in every run past `node` (a Linear/Conv call
        raises on another). Rebound here; and when it is the followed function's parameter,
        unchanged, at a statement of its body every path runs, the caller's argument has it too."""
        self._rebind_in_place(name, with_fields(value, dtype=dtype), scope)
        frame = self._argument_proofs[-1] if self._argument_proofs else None
        if frame is None or not self._call_stack or self._call_stack[-1] is not frame.fn or frame.returned:
            return
        param = frame.entry.get(id(value))
        statement = frame.statement
        if param is None or not isinstance(statement, _SIMPLE_STATEMENTS) or under_a_condition(statement, node):
            return
        frame.proven[param] = dtype

    def _holds_a_return(self: Interpreter, stmt: ast.stmt) -> bool:
        """Whether a compound statement holds a `return` (walked once per statement, not per call)."""
        known = self._returns_in.get(stmt)
        if known is None:
            known = self._returns_in[stmt] = any(isinstance(n, ast.Return) for n in ast.walk(stmt))
        return known

    def _dtypes_the_call_proves(
        self: Interpreter,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        instance: InstanceValue | None,
        proven: dict[str, str],
        args: list[Value],
        site: ast.AST,
        scope: Scope,
    ) -> None:
        """After `attn(x)` whose body passes `x` to a Linear first: `x` is float32 here too."""
        if not isinstance(site, ast.Call):
            return
        params = [p.arg for p in _positional_after_self(fn, instance)]
        exprs: dict[str, ast.expr] = {}
        for i, expr in enumerate(site.args):
            if isinstance(expr, ast.Starred):
                return  # which parameter each argument is: not told
            if i < len(params):
                exprs[params[i]] = expr
        exprs.update({k.arg: k.value for k in site.keywords if k.arg is not None})
        for param, dtype in proven.items():
            given = exprs.get(param)
            if given is None:
                continue
            expr = self._through_dtype_keepers(given)
            if not isinstance(expr, ast.Name):
                continue
            value = scope.lookup(expr.id)
            if isinstance(value, Opaque) and len(value.path) == 1:
                value = self.opaque_tensor(value)  # the caller's own parameter, as a layer takes it
            if isinstance(value, TensorFact) and value.dtype is None and value.meta is None:
                self.prove_dtype(expr.id, value, dtype, site, scope)

    def _note_scalar(self: Interpreter, param: ast.arg, value: Value) -> Value:
        """The argument as the callee sees it: an unknown value passed where the callee's
        annotation says a Python scalar (`eps: float` given `params.norm_eps`) is one, in the
        callee and wherever it is kept; a size expression passed as `dim: int` is an int."""
        scalar = _scalar_type(param.annotation, None)
        if scalar is None:
            return value
        if isinstance(value, Opaque):
            self.scalar_params.setdefault((value.root, value.path), scalar)
        elif isinstance(value, SizeValue) and not value.certain and scalar is int:
            return SizeValue(value.expr, True, value.conditions)
        return value

    def _refine_unknown_ranks(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, inner: Scope, names: list[str]) -> None:
        """A tensor of unknown shape passed where the body unpacks its shape (`b, t = idx.size()`)
        has that rank in every run that gets past the unpacking: its sizes get the body's names,
        as in the function's own pass (its dtype, device and grad facts are the caller's)."""
        unknown = [n for n in names if isinstance(v := inner.env.get(n), TensorFact) and v.sym is None and v.shape is None]
        if not unknown:
            return
        ranks = infer_parameter_ranks(fn, self.mentions_permute, look_for_patterns=self.mentions_patterns)
        for name in unknown:
            rank = ranks.get(name)
            value = inner.env[name]
            if rank is None or not isinstance(value, TensorFact):
                continue
            inner.env[name] = with_fields(
                self.tensor_parameter(name, rank),
                dtype=value.dtype,
                device=value.device,
                requires_grad=value.requires_grad,
                carries_graph=value.carries_graph,
                grad_unknown=value.grad_unknown,
            )

    def _name_parameter_sizes(self: Interpreter, name: str, value: Value | None) -> None:
        """`x.shape[i]` names the sizes of a tensor parameter in the body."""
        if isinstance(value, TensorFact) and value.sym is not None:
            for i, size in enumerate(value.sym.shape):
                self.names.add_path(self.symops.canon(size), (name, "shape", f"[{i}]"))

    def _own_ranks(self: Interpreter, fn: ast.FunctionDef | ast.AsyncFunctionDef, instance: InstanceValue) -> dict[str, int]:
        """The parameter ranks the body proves, as `exec_function` infers them for its own pass."""
        cls = instance.cls
        from_layers = ranks_from_layers(fn, cls.attributes.get) if cls.is_module else None
        return infer_parameter_ranks(fn, self.mentions_permute, from_layers, self.mentions_patterns)

    def _param_value(
        self: Interpreter, arg: ast.arg, ranks: dict[str, int] | None = None, default: ast.expr | None = None, scope: Scope | None = None
    ) -> Value:
        rank = (ranks or {}).get(arg.arg)
        if rank is not None:
            return self.record(arg, self.tensor_parameter(arg.arg, rank))
        if self._annotation_is_tensor(arg.annotation):
            return self.record(arg, TensorFact(storage_key=self.fresh_storage()))
        # Unknown, but nameable: a size if the body uses it as one (`n_head=12` too: a caller
        # may pass another value).
        value = Opaque(id(arg), (arg.arg,))
        scalar = _scalar_type(arg.annotation, default)
        if scalar is not None:
            self.scalar_params[(value.root, value.path)] = scalar
        return value

    # nn modules --------------------------------------------------------------
    def call_user_module(self: Interpreter, instance: InstanceValue, args: list[Value], scope: Scope) -> Value:
        """`model(x)` of a user nn.Module whose forward is not followed: a tensor, carrying a
        graph when grad is on. Not said to be new: a forward may return a view (a Linear of a
        3-d input is one) or its input."""
        tensors = [a for a in args if isinstance(a, TensorFact)]
        if not tensors and args:
            return UNKNOWN
        return TensorFact(
            device=tensors[0].device if tensors else None,
            carries_graph=bool(scope.grad_enabled),
        )


@dataclass
class _ArgumentProofs:
    """What a followed call's body proves of its parameters' dtypes (`prove_dtype`)."""

    fn: ast.FunctionDef | ast.AsyncFunctionDef
    entry: dict[int, str]  # id of each parameter's value at entry -> its name
    proven: dict[str, str] = field(default_factory=dict)
    statement: ast.stmt | None = None  # the body's statement being run
    returned: bool = False  # an earlier statement holds a `return`


# Statements with no block: every path through the body that reaches one runs all of it.
_SIMPLE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)
# A torch factory, or a class built (a layer: `PreNorm(dim, Attention(dim))`).
_FACTORY_CALL = re.compile(r"\b(?:arange|zeros|ones|empty|randn|rand|full|linspace|logspace|eye|tensor|randint|[A-Z]\w*)\(")


_SIZE_OR_LAYER = (Const, Opaque, SizeValue, Number, InstanceValue, ModuleValue, ClassInfo)


def _shapeless(value: Value) -> bool:
    """A tensor the analysis knows nothing of the sizes or rank of."""
    return isinstance(value, TensorFact) and value.shape is None and value.sym is None and value.meta is None


def _positional_after_self(fn: ast.FunctionDef | ast.AsyncFunctionDef, instance: InstanceValue | None) -> list[ast.arg]:
    """The positional parameters a call's arguments bind to: a method's first one is the
    instance (a @staticmethod has none)."""
    params = [*fn.args.posonlyargs, *fn.args.args]
    if instance is not None and params and not any(_call_name(d) == "staticmethod" for d in fn.decorator_list):
        return params[1:]
    return params


def _scalar_type(annotation: ast.expr | None, default: ast.expr | None) -> type | None:
    """The Python scalar type a parameter holds at every call that type-checks (`eps: float`),
    or whose default is a float literal (`eps=1e-5`: nobody passes a tensor of other sizes
    there). An int default alone says nothing: `dim=64` may be given a tensor's size or not."""
    if isinstance(annotation, ast.Name) and annotation.id in ("int", "float", "bool"):
        return {"int": int, "float": float, "bool": bool}[annotation.id]
    if annotation is None and isinstance(default, ast.Constant) and type(default.value) is float:
        return float
    return None


def _literal(value: Value) -> bool:
    """A tensor whose sizes are all literal numbers (a demo's `torch.randn(2, 3, 32, 32)`)."""
    return isinstance(value, TensorFact) and value.shape is not None and len(value.shape) > 0 and all(isinstance(s, int) for s in value.shape)


def _unnamed(value: Value) -> Value:
    """A returned value without the callee's names for the storages it shares."""
    if isinstance(value, TensorFact) and value.view_of is not None:
        return with_fields(value, view_of=None)
    if isinstance(value, SeqValue):
        return SeqValue(tuple(_unnamed(v) for v in value.items), value.kind)
    return value
