"""Flow-sensitive abstract interpretation of a module: names -> abstract tensor facts.

The interpreter walks statements in order, evaluating expressions to abstract values
(`values.py`, `facts.py`). Where sizes are literal, ops are replayed on meta tensors
(`replay.py`) and torch's own answer is recorded; where they are symbolic (`B, T, C =
x.shape`, `self.n_head`), the stride algebra decides (`symbolic_ops.py`, `layouts.py`,
`sizes.py`) and facts are stated in the user's names (`naming.py`). Branches join, loop
bodies run twice so loop-carried changes are seen, and nothing from the workspace is ever
executed: only whitelisted torch callables, on meta tensors.

This module holds the driver and the record of facts; the rest is split by concern:

- `interp_statements.py`: statements, scopes, binding names;
- `interp_expressions.py`: expressions, attributes, indexing, call dispatch;
- `interp_torch.py`: torch functions, operators and tensor methods (where `view` is decided);
- `interp_modules.py`: nn modules;
- `interp_calls.py`: the file's own functions and classes;
- `interp_sizes.py`: integer and size values, parameters of known rank, stating facts.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Any

from stridelens.server.analysis import replay as rp
from stridelens.server.analysis.facts import Provenance, ReplayEvent, TensorFact, with_fields
from stridelens.server.analysis.interp_calls import UserCallsMixin
from stridelens.server.analysis.interp_expressions import ExpressionsMixin
from stridelens.server.analysis.interp_modules import ModulesMixin
from stridelens.server.analysis.interp_sizes import SizesMixin
from stridelens.server.analysis.interp_statements import StatementsMixin
from stridelens.server.analysis.interp_support import (
    _RECORDED,
    CALLS_DIFFER,
    BudgetExceeded,
    Scope,
)
from stridelens.server.analysis.interp_torch import TorchCallsMixin
from stridelens.server.analysis.naming import SizeNames
from stridelens.server.analysis.symbolic_ops import SymbolicOps
from stridelens.server.analysis.values import (
    UNKNOWN,
    ClassInfo,
    Const,
    ListOf,
    SeqValue,
    TorchRef,
    Value,
    join_values,
)


class Interpreter(StatementsMixin, UserCallsMixin, ExpressionsMixin, TorchCallsMixin, ModulesMixin, SizesMixin):
    # Node type -> handler method (set once below the class, from every mixin).
    _expr_handlers: dict[type, Any]
    _stmt_handlers: dict[type, Any]

    def __init__(
        self, tree: ast.Module, *, replay: bool, budget_steps: int | None, source: str | None = None, file_text: str | None = None
    ) -> None:
        self.tree = tree
        self._lines = source.splitlines() if source is not None else []
        # What the file-wide choices below read: the whole file's text, where `source` is only
        # part of it (the language server's edited blocks, the other bodies blanked).
        source = file_text if file_text is not None else source
        # Whether parameter ranks may show in a `permute` (most files: no; skip looking).
        self.mentions_permute = source is None or "permute" in source
        # Whether einops or einsum patterns may give parameter ranks (interp_sizes.pattern_ranks).
        self.mentions_patterns = source is None or "einsum" in source or "einops" in source
        self.names = SizeNames()
        self.symops = SymbolicOps(self)
        self._current_node: ast.AST | None = None
        self._call_texts: dict[ast.AST, str] = {}  # call node -> "view(B, -1)" (interp_torch)
        self._keep_alive: list[Any] = []
        # Scope snapshots that lazy renderings read (weakly: see `_NamesAtLine`).
        self._snapshots: list[Any] = []
        self._last_names: Any = None  # the names of the last stated fact (interp_sizes)
        self._opaque_tensors: dict[int, TensorFact] = {}
        # Unknown values that hold a Python scalar (`eps: float`), by Opaque root and path.
        self.scalar_params: dict[tuple[int, tuple[str, ...]], type] = {}
        self._current_scope: Scope | None = None
        self.replay = replay
        self.step_limit = sys.maxsize if budget_steps is None else budget_steps
        self.facts: dict[ast.AST, Value] = {}
        # How many `torch.inference_mode()` blocks (or decorated bodies) enclose the code
        # being interpreted: views made there are stated without `is_view` (interp_expressions).
        self.inference_depth = 0
        # Parameters are float32 (torch's default) where the file never changes a dtype: no
        # half/bfloat16/float64/double, autocast or set_default_dtype anywhere in it.
        self.default_dtypes = source is not None and not _changes_a_dtype(source)
        self.grad_condition: str | None = None  # set once the module's names are known (run)
        self._freezes = source is None or ("requires_grad" in source and _FREEZES.search(source) is not None)
        # Whether an inference_mode region of this file calls the file's own code (llama2.c's
        # `@torch.inference_mode() def generate(...): ... self(idx_cond)`): then any function
        # body may run there, and no view in one is stated a view (interp_expressions).
        self.bodies_may_infer = source is not None and "inference_mode" in source and _inference_calls_own_code(tree)
        # Whether autograd records at each statement (False under no_grad & co.).
        self.grad_enabled: dict[ast.stmt, bool] = {}
        self.events: list[ReplayEvent] = []
        self.timed_out = False
        self.storage_owner: dict[int, str] = {}
        # The module's names for storages, once its code has run (function bodies see those).
        self.module_owners: dict[int, str] | None = None
        self._symbolic_storage = 0
        self._steps = 0
        self._pending_functions: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, Scope, ClassInfo | None]] = []
        # Symbolic pass only: storages made by factories whose sizes are all literal, i.e.
        # where an exact (replayed) pass would know the layout.
        self.sized_storages: set[int] = set()
        # Elements of the storages literal factories made in the symbolic pass (replay's facts
        # carry `storage_numel`): a view that reads all of one may own its storage's name.
        self.literal_storage_numels: dict[int, int] = {}
        # Functions being interpreted for a concrete call (arguments with known sizes).
        self._call_stack: list[ast.AST] = []
        # Node -> the call site (outermost concrete call) that recorded its fact. A call from
        # another site joins with it: a function called with two shapes states only what holds
        # for both. The same site evaluated again (a loop's second pass) overwrites, as in loops.
        self._concrete: dict[ast.AST, ast.AST] = {}
        # Per node, the join of the facts other outer call sites recorded there.
        self._other_sites: dict[ast.AST, Value] = {}
        self._outer_site: ast.AST | None = None
        # Function -> whether its text calls a torch factory (interp_calls._makes_tensors).
        self._factory_bodies: dict[ast.AST, bool] = {}
        # Node -> requires_grad as a function's own pass (no concrete call) recorded it.
        self._own_pass_grad: dict[ast.AST, bool | None] = {}
        # > 0 while interpreting code that is one caller among others of the file's functions:
        # a function's generic pass (e.g. a `test()` nobody calls here) or a `__main__` block.
        # Calls from there follow bodies with the arguments' sizes generalised (interp_calls).
        self.demo_depth = 0
        # > 0 while a body runs only to give its caller the exact result: nothing is recorded.
        self.quiet_depth = 0
        # > 0 inside a forward a function calls under no_grad (`generate`), and the nodes it
        # reached: other calls' requires_grad there is theirs only.
        self.no_grad_follow = 0
        self._no_grad_nodes: set[ast.AST] = set()
        # The function whose own pass is running (None: the module's code), and per node the
        # dtype the calls made from each such pass recorded there (see _dtypes_from_followed_calls).
        self._own_root: ast.AST | None = None
        self._dtype_by_root: dict[ast.AST, dict[ast.AST | None, Any]] = {}
        self._followed_recording: set[ast.AST] = set()
        self._dtype_passed: dict[tuple[str, int | None], bool] = {}  # (callee, index): see interp_calls
        self.statement: ast.stmt | None = None  # set by exec_block
        self._argument_proofs: list[Any] = []
        self._returns_in: dict[ast.stmt, bool] = {}  # interp_calls._holds_a_return  # one per followed call (interp_calls._ArgumentProofs)
        # > 0 inside a body followed from a demo (both runs): its own calls are followed as usual.
        self.demo_followed = 0
        # Module-level classes' __init__, run where the class is defined: run again once the
        # module is done where they build a layer of a class defined further down.
        self.module_inits: list[tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef, Scope]] = []
        # Call node -> the list of unknown length spread as its only argument (`f(*layers)`).
        self.spread_lists: dict[ast.AST, ListOf] = {}
        self._returns: list[list[Value]] = []

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        module_scope = Scope(None)
        try:
            self.exec_block(self.tree.body, module_scope)
            self.module_owners = dict(self.storage_owner)
            # Function bodies run in a grad mode their callers choose: their grad facts hold
            # when autograd is on, said in the file's name for torch, unless the file freezes
            # parameters (then "requires grad" is not even that).
            alias = next((n for n, v in module_scope.env.items() if isinstance(v, TorchRef) and v.path == "torch"), None)
            if alias is not None and not self._freezes:
                self.grad_condition = f"{alias}.is_grad_enabled()"
            self._rerun_late_inits()
            # Function bodies see the module's names as they are at the end of the module.
            while self._pending_functions:
                fn, parent, cls = self._pending_functions.pop(0)
                self.demo_depth += 1
                self._own_root = fn
                try:
                    self.exec_function(fn, parent, cls)
                finally:
                    self.demo_depth -= 1
                    self._own_root = None
            self._dtypes_from_followed_calls()
        except BudgetExceeded:
            self.timed_out = True
        except RecursionError:
            self.timed_out = True

    def _dtypes_from_followed_calls(self) -> None:
        """A body's dtypes as the file's followed calls give them.

        `TransformerBlock.forward(x)` calls `self.norm(x)`. Its own pass (`x` of any dtype) joins
        an unknown dtype into `RMSNorm.forward`, though the file only runs that body through
        `Transformer.forward`, with float32. A function followed from a call makes the same
        nested calls with its caller's facts, so what its own pass's calls said of dtypes is
        dropped. Only the dtype: a caller outside the file may pass another rank or a tensor
        without grad, and the sizes and grad facts keep that join. Only in a file that never
        changes a dtype, where the parameters are float32 too."""
        if not self.default_dtypes:
            return
        superseded = self._followed_recording
        for node, by_root in self._dtype_by_root.items():
            fact = self.facts.get(node)
            if not isinstance(fact, TensorFact) or fact.dtype is not None:
                continue
            kept = {dtype for root, dtype in by_root.items() if root is None or root not in superseded}
            if len(kept) == 1 and len(by_root) > 1 and None not in kept:
                self.facts[node] = with_fields(fact, dtype=kept.pop())

    def _rerun_late_inits(self) -> None:
        """fast-neural-style's `TransformerNet.__init__` builds `ConvLayer(3, 32, ...)`, a class
        defined after it: at the class statement that name meant nothing yet."""
        if not self.module_inits:
            return
        defined = {
            s.name: s.lineno for s in self.tree.body if isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        }
        for info, init, scope in self.module_inits:
            later = [name for name, line in defined.items() if line > info.node.lineno]
            if not later:
                continue
            # The text of __init__ (walking its tree for names cost an eighth of check on timm).
            text = self.text_of(init) or ast.unparse(init)
            if any(name in text and re.search(rf"\b{re.escape(name)}\b", text) for name in later):
                info.attributes.clear()
                self.exec_function(init, scope, info)

    def text_of(self, node: ast.stmt) -> str | None:
        """The source lines of a statement (a function, a class), or None without the source.
        Reading text is cheaper than walking a body's tree (an eighth of check on timm)."""
        return "\n".join(self._lines[node.lineno - 1 : node.end_lineno]) if self._lines else None

    @property
    def steps(self) -> int:
        return self._steps

    def _tick(self) -> None:
        self._steps += 1
        if self._steps > self.step_limit:
            raise BudgetExceeded

    def _torch(self) -> Any:
        if not self.replay:
            raise rp.CannotReplay
        return rp.load_torch()

    def fresh_storage(self) -> int:
        self._symbolic_storage -= 1
        return self._symbolic_storage

    def record(self, node: ast.AST, value: Value, scope: Scope | None = None) -> Value:
        if self.quiet_depth:
            return value
        if self.no_grad_follow:
            # (see interp_calls.call_concrete) Facts another call recorded here hold for it
            # only: their requires_grad is not this caller's, unless stated as holding when
            # autograd is on.
            self._no_grad_nodes.add(node)
            old = self.facts.get(node)
            if node in self._concrete and isinstance(old, TensorFact) and old.requires_grad is not False and old.grad_assumed is None:
                self.facts[node] = with_fields(old, grad_unknown=True)
            return value
        if not self._call_stack:
            # The function's own pass: what other callers (another file, a test) get. A
            # concrete call from here states sharper sizes, but not another grad verdict.
            # (A tensor's, or a name's that got none: most nodes are neither, and a dict
            # write per node was a tenth of `check`.)
            if isinstance(value, TensorFact):
                self._own_pass_grad[node] = value.requires_grad
            elif type(node) is ast.Name:
                self._own_pass_grad[node] = None
        if isinstance(value, _RECORDED):
            if isinstance(value, TensorFact) and scope is not None:
                value = self.stated(value, scope)
            if self._call_stack:
                previous = self._concrete.get(node)
                if previous is not None and node in self.facts and previous is not self._outer_site:
                    # A new call site: what the earlier sites gave, joined with this one.
                    self._other_sites[node] = self.facts[node]
                    fact = self._join_call_sites(self.facts[node], value)
                elif previous is not None and node in self._other_sites:
                    # The same site again (a loop's next pass replaces its first), still
                    # joined with what the other sites gave.
                    fact = self._join_call_sites(self._other_sites[node], value)
                else:
                    fact = value
                if isinstance(value, TensorFact):
                    by_root = self._dtype_by_root.setdefault(node, {})
                    root = self._own_root
                    by_root[root] = value.dtype if root not in by_root or by_root[root] == value.dtype else None
                if isinstance(fact, TensorFact) and (
                    (node in self._own_pass_grad and self._own_pass_grad[node] != fact.requires_grad)
                    or (node in self._no_grad_nodes and fact.requires_grad is not False and fact.grad_assumed is None)
                ):
                    fact = with_fields(fact, grad_unknown=True)
                self.facts[node] = fact
                if self._outer_site is not None:
                    self._concrete[node] = self._outer_site
                return value
            if node in self._concrete:
                old = self.facts.get(node)
                if isinstance(old, TensorFact) and isinstance(value, TensorFact) and old.requires_grad != value.requires_grad:
                    self.facts[node] = with_fields(old, grad_unknown=True)
                return value
            self.facts[node] = value
        return value

    def _join_call_sites(self, old: Value, new: Value) -> Value:
        """The fact of a node in a function body called from two sites, with a note saying
        why a shape is no longer stated."""
        joined = join_values(old, new, self.symops.canon_layout)
        if not (isinstance(joined, TensorFact) and isinstance(old, TensorFact) and isinstance(new, TensorFact)):
            return joined
        notes = tuple(p for p in old.provenance if p.what == CALLS_DIFFER and p not in joined.provenance)
        site = self._outer_site
        if old.shape is not None and new.shape is not None and old.shape != new.shape and site is not None:
            because = f"{tuple(old.shape)} vs {tuple(new.shape)} from the call"
            notes += (Provenance(CALLS_DIFFER, because, getattr(site, "lineno", 0)),)
        return with_fields(joined, provenance=joined.provenance + notes) if notes else joined

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
        # Item by item when each item is known and none is filtered out: `[d if i == 1 else 1
        # for i, d in enumerate(x.shape)]`, `(rearrange(t, ...) for t in (q, k, v))`.
        exact = isinstance(iterable, SeqValue) and len(items) == len(iterable.items) and len(node.generators) == 1 and not first.ifs and len(elts) == 1
        result: Value | None = None
        each: list[Value] = []
        for item in items:
            self.bind(first.target, item, inner)
            for gen in node.generators[1:]:
                self.bind(gen.target, self._element_of(self.eval(gen.iter, inner)), inner)
            for gen in node.generators:
                for cond in gen.ifs:
                    self.eval(cond, inner)
            values = [self.eval(e, inner) for e in elts]
            value = values[0] if len(values) == 1 else UNKNOWN
            each.append(value)
            result = value if result is None else join_values(result, value, self.symops.canon_layout)
        if exact and isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            if all(isinstance(v, Const) for v in each):
                return Const([v.value for v in each if isinstance(v, Const)])
            return SeqValue(tuple(each), "list")
        return ListOf(result) if result is not None and len(elts) == 1 else UNKNOWN

    # ------------------------------------------------------------------ events
    def _event(self, kind: str, node: ast.AST, message: str, nbytes: int | None = None) -> None:
        if self.quiet_depth:
            return
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


# Dispatch tables, built once: `getattr(self, "expr_" + name)` per node was a hot spot.
_EXPR_HANDLERS: dict[type, Any] = {
    getattr(ast, name[5:]): getattr(Interpreter, name) for name in dir(Interpreter) if name.startswith("expr_") and hasattr(ast, name[5:])
}
_STMT_HANDLERS: dict[type, Any] = {
    getattr(ast, name[5:]): getattr(Interpreter, name) for name in dir(Interpreter) if name.startswith("stmt_") and hasattr(ast, name[5:])
}
Interpreter._expr_handlers = _EXPR_HANDLERS
Interpreter._stmt_handlers = _STMT_HANDLERS


# Code that changes a dtype (a regex on the text: walking the tree for it cost a third of the
# analysis). Prose like "A100 bfloat16 peak flops" does not match; a docstring's example of
# `torch.float16` does, and only makes the analysis say less.
_DTYPE_CHANGE = re.compile(
    r"\.(?:half|float16|bfloat16|float64|double|set_default_dtype|set_default_tensor_type|autocast)\b"
    r"|\bautocast\s*\(|\bamp\.|[\"'](?:float16|bfloat16|float64|half)[\"']"
)
# Parameters frozen somewhere: `p.requires_grad = False`, `requires_grad_(False)`, `requires_grad=False`.
_FREEZES = re.compile(r"\.requires_grad\s*=(?!=)(?!\s*True\b)|requires_grad_\((?!\s*(?:True\b|\)))|requires_grad\s*=\s*False")
_DTYPE_WORDS = ("half", "float16", "float64", "double", "autocast", "amp.", "set_default_")
# `@autocast("cuda", enabled=False)` (rotary-embedding-torch) turns autocast off: the region's
# ops keep their operands' dtypes, which is what the analysis assumes anyway.
_AUTOCAST_OFF = re.compile(r"\bautocast\s*\([^()]*\benabled\s*=\s*False\b[^()]*\)")


def _changes_a_dtype(source: str) -> bool:
    """Whether the text may change a dtype (see _DTYPE_CHANGE)."""
    if not any(w in source for w in _DTYPE_WORDS):
        return False
    if "enabled" in source:
        source = _AUTOCAST_OFF.sub("", source)
    return _DTYPE_CHANGE.search(source) is not None


def _inference_calls_own_code(tree: ast.Module) -> bool:
    """Does a `torch.inference_mode()` block or decorated function call anything but torch?"""
    regions: list[ast.AST] = []
    for node in ast.walk(tree):
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_mentions_inference_mode(d) for d in node.decorator_list)) or (isinstance(node, (ast.With, ast.AsyncWith)) and any(_mentions_inference_mode(i.context_expr) for i in node.items)):
            regions.append(node)
    for region in regions:
        for call in ast.walk(region):
            if not isinstance(call, ast.Call) or _mentions_inference_mode(call):
                continue
            root = call.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in ("torch", "F", "nn", "math", "print", "len", "range", "min", "max", "int", "float")):
                return True
    return False


def _mentions_inference_mode(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == "inference_mode") or (isinstance(n, ast.Name) and n.id == "inference_mode") for n in ast.walk(node))
