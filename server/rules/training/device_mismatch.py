"""SL214 device-mismatch: a tensor made inside `forward` with no `device=` meets the input.

The model and its inputs move to CUDA; `torch.zeros(B, T)` in `forward` does not, and the
first op that combines them raises "Expected all tensors to be on the same device". CPU
tests never see it. The facts are few and decided syntactically, as torch decides them:
factories default to the CPU unless given `device=` (or `*_like` / `x.new_*`, which inherit
the device); `.to(...)`, `.cuda()`, `.type_as(x)` move; a 0-d CPU tensor (`torch.tensor(0.5)`)
mixes with CUDA tensors, a 1-element 1-D one (`torch.tensor([0.5])`) does not.
"""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    BLOCK_STATEMENTS,
    METADATA_METHODS,
    dotted,
    enclosing,
    index_of,
    walk,
    walk_statements,
)
from stridelens.server.rules.shared.edits import insert_at, make_finding, node_range, segment, short

# Factories that put their result on the default (CPU) device unless told otherwise.
FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "eye", "linspace", "logspace",
     "tensor", "as_tensor", "randperm", "tril_indices", "triu_indices"}
)
_MOVES = frozenset({"to", "cuda", "type_as", "to_device"})
_COMBINING_FUNCTIONS = frozenset({"cat", "stack", "where", "matmul", "bmm", "mm", "einsum", "maximum", "minimum"})
# Tensor methods whose tensor arguments must be on the receiver's device (not 0-d ones).
_COMBINING_METHODS = frozenset(
    {"add", "sub", "mul", "div", "matmul", "mm", "bmm", "masked_fill", "masked_fill_", "index_select", "gather",
     "add_", "sub_", "mul_", "div_", "lerp", "maximum", "minimum"}
)  # fmt: skip
# Layers with parameters: their weights move with `model.to(device)`.
_LAYERS_WITH_PARAMETERS = frozenset(
    {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
     "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
     "MultiheadAttention", "LSTM", "GRU", "RNN", "PReLU"}
)  # fmt: skip
_COMBINING_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult, ast.FloorDiv, ast.Pow, ast.Mod)


def _factory(analysis: Analysis, node: ast.expr) -> ast.Call | None:
    """A CPU factory call, not 0-d and with no `device=`."""
    if not isinstance(node, ast.Call):
        return None
    func = analysis.values.get(node.func)
    if not (isinstance(func, TorchRef) and func.path.startswith("torch.") and func.path.count(".") == 1):
        return None
    name = func.path.split(".", 1)[1]
    if name not in FACTORIES or any(k.arg == "device" or k.arg is None for k in node.keywords):
        return None
    if name in ("tensor", "as_tensor"):
        data = node.args[0] if node.args else None
        if not isinstance(data, (ast.List, ast.Tuple, ast.ListComp)):
            return None  # a scalar: 0-d CPU tensors mix with CUDA ones
    return node


def _device_source(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The forward's tensor parameters (not `self`), which live wherever the caller put them."""
    args = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    return args[1:]


# Reads of an input's metadata: Python ints (or a device), never a tensor on the input's device.
# Methods giving a Python value, not a tensor: `x.size(1)`, `x.item()`.
_METADATA_METHODS = METADATA_METHODS | {"item", "tolist"}
_METADATA_ATTRS = frozenset({"shape", "ndim", "device", "dtype", "is_cuda"})
_METADATA_BUILTINS = frozenset({"len", "int", "float", "bool"})


def _metadata_read(node: ast.AST) -> bool:
    """`x.size(1)`, `x.shape[0]`, `x.dim()`, `len(x)`, `int(x)`: a number, not a tensor; a
    CPU tensor times it stays on the CPU and mixes with nothing."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _METADATA_METHODS:
            return True
        return isinstance(func, ast.Name) and func.id in _METADATA_BUILTINS
    return isinstance(node, ast.Attribute) and node.attr in _METADATA_ATTRS


def _derived(names: set[str], node: ast.expr) -> str | None:
    """The input name `node` is computed from as a tensor, if any (metadata reads skipped)."""
    todo: list[ast.AST] = [node]
    while todo:
        sub = todo.pop()
        if _metadata_read(sub):
            continue
        if isinstance(sub, ast.Name) and sub.id in names:
            return sub.id
        todo.extend(ast.iter_child_nodes(sub))
    return None


class _Forward:
    def __init__(self, analysis: Analysis, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.analysis = analysis
        self.inputs: dict[str, str] = {p: p for p in _device_source(fn)}  # name -> the input it follows
        self.first_input = next(iter(self.inputs), None)
        self.cpu: dict[str, ast.Call] = {}  # name -> the factory that made it
        self.out: list[Finding] = []
        self.reported: set[ast.Call] = set()

    def cpu_operand(self, node: ast.expr) -> ast.Call | None:
        factory = _factory(self.analysis, node)
        if factory is not None:
            return factory
        if isinstance(node, ast.Name):
            return self.cpu.get(node.id)
        return None

    def input_operand(self, node: ast.expr) -> str | None:
        found = _derived(set(self.inputs), node)
        return self.inputs[found] if found is not None and self.cpu_operand(node) is None else None

    def mixes(self, stmt: ast.stmt) -> None:
        for node in walk(stmt):
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(node, ast.BinOp) and isinstance(node.op, _COMBINING_OPS):
                pairs = [(node.left, node.right), (node.right, node.left)]
            elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
                pairs = [(node.left, node.comparators[0]), (node.comparators[0], node.left)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                func = self.analysis.values.get(node.func)
                if isinstance(func, TorchRef) and func.path.rsplit(".", 1)[-1] in _COMBINING_FUNCTIONS:
                    items = [e for a in node.args for e in (a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])]
                    pairs = [(a, b) for a in items for b in items if a is not b]
                elif isinstance(func, ModuleValue) and func.name in _LAYERS_WITH_PARAMETERS and dotted(node.func) is not None:
                    self.into_layer(node)
                elif node.func.attr in _COMBINING_METHODS and not isinstance(func, (TorchRef, ModuleValue)):
                    pairs = [(arg, node.func.value) for arg in node.args]  # `x.masked_fill(mask, 0)`
            for cpu_side, other in pairs:
                factory = self.cpu_operand(cpu_side)
                source = self.input_operand(other) if factory is not None else None
                if factory is not None and source is not None and factory not in self.reported:
                    self.report(factory, source)

    def into_layer(self, call: ast.Call) -> None:
        """`self.pos_emb(torch.arange(T))`: the layer's parameters move with the model."""
        layer = dotted(call.func) or ""
        for arg in call.args:
            factory = self.cpu_operand(arg)
            if factory is None or factory in self.reported:
                continue
            self.reported.add(factory)
            text = short(segment(self.analysis, factory))
            message = tr(
                "`{factory}` is made on the CPU (no `device=`) and goes into `{layer}`, whose "
                "parameters move with the model: on CUDA machines this raises 'Expected all tensors "
                "to be on the same device'; make it on the device of the parameters or the input"
            ).format(factory=text, layer=layer)
            fix = self.device_fix(factory, self.first_input) if self.first_input is not None else None
            self.out.append(make_finding(self.analysis, SL214, node_range(self.analysis, factory), message, fix))

    def report(self, factory: ast.Call, source: str) -> None:
        self.reported.add(factory)
        text = short(segment(self.analysis, factory))
        message = tr(
            "`{factory}` is made on the CPU (no `device=`) and meets `{source}`, which lives where "
            "the caller put it: on CUDA machines this raises 'Expected all tensors to be on the "
            "same device'; pass `device={source}.device`"
        ).format(factory=text, source=source)
        fix = self.device_fix(factory, source)
        self.out.append(make_finding(self.analysis, SL214, node_range(self.analysis, factory), message, fix))

    def device_fix(self, factory: ast.Call, source: str) -> Fix:
        """`torch.zeros(B, T)` -> `torch.zeros(B, T, device=x.device)`."""
        _, _, end_line, end_col = node_range(self.analysis, factory)
        sep = ", " if factory.args or factory.keywords else ""
        title = tr("Add `device={source}.device`").format(source=source)
        return Fix(title, (insert_at(end_line, end_col - 1, f"{sep}device={source}.device"),))

    def bind(self, stmt: ast.stmt) -> None:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            for sub in walk(stmt):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    self.cpu.pop(sub.id, None)
                    self.inputs.pop(sub.id, None)
            return
        name, value = stmt.targets[0].id, stmt.value
        factory = _factory(self.analysis, value)
        self.cpu.pop(name, None)
        self.inputs.pop(name, None)
        if factory is not None:
            self.cpu[name] = factory
            return
        moved = isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _MOVES
        if moved:
            return  # `.to(x.device)`: on purpose, wherever it goes
        source = _derived(set(self.inputs), value)
        if source is not None and _derived(set(self.cpu), value) is None:
            self.inputs[name] = self.inputs[source]


def _forward_methods(analysis: Analysis) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    index = index_of(analysis)
    out = []
    for fn in index.functions:
        parent = index.parents.get(fn)
        if isinstance(parent, ast.ClassDef) and fn.name == "forward" and any(
            "Module" in segment(analysis, base) for base in parent.bases
        ):
            out.append(fn)
    return out


def _functions_making_tensors(analysis: Analysis) -> set[ast.AST]:
    """Functions holding a factory call, from the index (most forwards hold none)."""
    index = index_of(analysis)
    found: set[ast.AST] = set()
    for name in FACTORIES & index.by_name.keys():
        for call in index.by_name[name]:
            fn = enclosing(index, call, (ast.FunctionDef, ast.AsyncFunctionDef))
            if fn is not None:
                found.add(fn)
    return found


def check_device_mismatch(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    making = _functions_making_tensors(analysis)
    for fn in _forward_methods(analysis):
        if fn not in making:
            continue
        walk = _Forward(analysis, fn)
        for node in walk_statements(fn.body):
            if not isinstance(node, (*BLOCK_STATEMENTS, ast.For, ast.AsyncFor)):
                walk.mixes(node)
                walk.bind(node)
        out.extend(walk.out)
    return out


SL214 = register(
    Rule(
        code="SL214",
        name="device-mismatch",
        severity=Severity.WARNING,
        summary="a tensor made in `forward` without `device=` meets the input (fails on CUDA)",
        doc=RuleDoc(
            what="In the `forward` of an nn.Module, flags a factory call (`torch.zeros`, `ones`, "
            "`empty`, `full`, `arange`, `rand*`, `eye`, `linspace`, `torch.tensor([...])`) with "
            "no `device=` whose result is combined (arithmetic, comparison, `torch.cat`/`stack`/"
            "`where`/`matmul`..., or as the argument of the input's `masked_fill`/`gather`/"
            "`index_select`/`add`/`mul`...) with a forward input or a value computed from one, or "
            "passed into one of the module's layers with parameters (`self.wpe(torch.arange(T))`: "
            "the layer's weights move with the model). Not "
            "flagged: `device=` given, `*_like`/`x.new_*` (they inherit the device), a result "
            "moved with `.to(...)`/`.cuda()`/`.type_as(...)` before use, 0-d tensors "
            "(`torch.tensor(0.5)`, which mix with CUDA tensors), use as an index, and "
            "arithmetic with the input's metadata (`torch.arange(B) * x.size(1)`, `x.shape[0]`, "
            "`len(x)`: Python numbers, not tensors).",
            why="`.to('cuda')` moves the module's parameters and the caller moves the inputs, "
            "but a tensor built inside `forward` stays on the CPU. The op that mixes them raises "
            "'Expected all tensors to be on the same device' on the first GPU run, never in CPU "
            "tests.",
            example="def forward(self, x):\n    mask = torch.ones(x.shape[0], 1)  # SL214\n    return x * mask",
            fix="Create it where the input is: `device=x.device` (the quick fix), or "
            "`torch.ones_like(x)` / `x.new_ones(...)`.",
        ),
        check=check_device_mismatch,
    )
)
