"""SL210 tensor-from-tensors: `torch.tensor(...)` of a list or tuple of tensors."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis.values import ListOf, SeqValue
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    dotted,
    enclosing,
    index_of,
    torch_path,
    walk,
    walk_body,
)
from stridelens.server.rules.shared.edits import (
    attr_name_range,
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
)
from stridelens.server.rules.shared.guards import guarding_tests

# `torch.*` functions that return something other than a tensor.
_NOT_TENSOR_FUNCTIONS = frozenset(
    {"Size", "device", "dtype", "is_tensor", "is_floating_point", "is_complex", "numel", "get_default_dtype",
     "no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "manual_seed", "load", "save", "finfo", "iinfo",
     "is_grad_enabled", "compile", "jit", "typename"}
)
_NOT_TENSOR_MODULES = ("torch.cuda", "torch.backends", "torch.distributed", "torch.utils", "torch.nn", "torch.optim")
# Model-output attributes holding tensors: transformers' `ModelOutput.loss` / `.logits`.
_OUTPUT_TENSORS = frozenset({"loss", "logits"})


def _tensor_like(analysis: Analysis, node: ast.expr, bound: dict[str, ast.expr], depth: int = 0) -> bool:
    """A tensor by the facts, a `torch.*` result, a model output's `.loss`, or a name bound to one."""
    if isinstance(analysis.values.get(node), TensorFact):
        return True
    if isinstance(node, ast.Call):
        path = torch_path(analysis, node.func)
        if path is None or not path.startswith("torch.") or path.startswith(_NOT_TENSOR_MODULES):
            return False
        return path.rsplit(".", 1)[-1] not in _NOT_TENSOR_FUNCTIONS
    if isinstance(node, ast.Attribute):
        return node.attr in _OUTPUT_TENSORS and isinstance(node.value, (ast.Name, ast.Attribute))
    if isinstance(node, ast.Name) and depth < 3 and node.id in bound:
        return _tensor_like(analysis, bound[node.id], bound, depth + 1)
    return False


def _scope_bindings(analysis: Analysis, call: ast.Call) -> tuple[dict[str, ast.expr], dict[str, list[ast.expr]]]:
    """In the function holding `call`, before it: the last plain assignment of each name, and
    the values appended to each name (`losses.append(loss)`)."""
    index = index_of(analysis)
    scope = enclosing(index, call, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    bound: dict[str, ast.expr] = {}
    appended: dict[str, list[ast.expr]] = {}
    for node in walk_body(body if isinstance(body, list) else []):
        if getattr(node, "lineno", 0) >= call.lineno:
            break
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound[node.targets[0].id] = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.func.value, ast.Name)
            and len(node.args) == 1
        ):
            appended.setdefault(node.func.value.id, []).append(node.args[0])
    return bound, appended


def _holds_tensors(analysis: Analysis, data: ast.expr, call: ast.Call) -> bool:
    bound, appended = _scope_bindings(analysis, call)
    if isinstance(data, (ast.List, ast.Tuple)):
        return any(_tensor_like(analysis, e, bound) for e in data.elts)
    if isinstance(data, (ast.ListComp, ast.GeneratorExp)):
        return _tensor_like(analysis, data.elt, bound)
    value = analysis.values.get(data)
    if isinstance(value, SeqValue):
        return any(isinstance(i, TensorFact) for i in value.items)
    if isinstance(value, ListOf) and isinstance(value.item, TensorFact):
        return True
    if isinstance(data, ast.Name) and data.id in appended:
        # `losses = []` ... `losses.append(loss)`: a list of what was appended
        return any(_tensor_like(analysis, v, bound) for v in appended[data.id])
    return False


def _type_test_names(analysis: Analysis, test: ast.expr) -> set[str]:
    """The names whose tensor-ness `test` checks: `isinstance(x, torch.Tensor)` (or a tuple
    of types naming a Tensor), `torch.is_tensor(x)`, under any `not` / `and` / `or`."""
    names: set[str] = set()
    for sub in walk(test):
        if not isinstance(sub, ast.Call) or len(sub.args) < 1:
            continue
        func = sub.func
        if isinstance(func, ast.Name) and func.id == "isinstance" and len(sub.args) == 2:
            if "Tensor" not in segment(analysis, sub.args[1]):
                continue
        elif torch_path(analysis, func) != "torch.is_tensor" and dotted(func) not in ("torch.is_tensor", "is_tensor"):
            continue
        names |= {n.id for n in walk(sub.args[0]) if isinstance(n, ast.Name)}
    return names


def _rebound_between(analysis: Analysis, call: ast.Call, names: set[str], after: int) -> bool:
    """One of `names` is assigned after line `after` and before `call`'s line (in its scope)."""
    index = index_of(analysis)
    scope = enclosing(index, call, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    body = scope.body if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else analysis.tree.body
    for node in walk_body(body if isinstance(body, list) else []):
        line = getattr(node, "lineno", 0)
        if after < line < call.lineno and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in names:
            return True
    return False


def _type_checked(analysis: Analysis, call: ast.Call, data: ast.expr) -> bool:
    """The call runs on one side of a test of whether `<data...>` is a tensor: inside an
    `if` / conditional expression on `isinstance(..., torch.Tensor)` or `torch.is_tensor(...)`
    (either branch, negated or not), or after an `if` on one that returns early. The code
    already tells tensors from other data there (timm's naflex collate; `if not
    torch.is_tensor(t): t = torch.tensor(t)`)."""
    names = {n.id for n in walk(data) if isinstance(n, ast.Name)}
    if not names:
        return False
    for test, early in guarding_tests(index_of(analysis), call):
        checked = _type_test_names(analysis, test) & names
        if not checked:
            continue
        if early is not None and _rebound_between(analysis, call, checked, early.end_lineno or early.lineno):
            continue  # `if is_tensor(t): return t` ... `t = [a, b]` ... `torch.tensor(t)`
        return True
    return False


def check_tensor_from_tensors(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("tensor", ()):
        if torch_path(analysis, call.func) != "torch.tensor" or len(call.args) != 1:
            continue
        data = call.args[0]
        if not _holds_tensors(analysis, data, call) or _type_checked(analysis, call, data):
            continue
        fix = None
        if not call.keywords and isinstance(call.func, ast.Attribute):
            edits = [replace_range(attr_name_range(analysis, call.func), "stack")]
            if isinstance(data, ast.GeneratorExp) and len(call.args) == 1:
                # torch.tensor(t for t in ...) -> torch.stack([t for t in ...])
                where = node_range(analysis, data)
                text = segment(analysis, data)
                _, _, func_line, func_end = node_range(analysis, call.func)
                if (where[0], where[1]) == (func_line, func_end) and text.startswith("("):
                    text = f"([{text[1:-1]}])"  # a sole generator argument spans the call's parentheses
                else:
                    text = f"[{text}]"
                edits.append(replace_range(where, text))
            fix = Fix(tr("Use `torch.stack(...)`"), tuple(edits))
        message = tr(
            "`torch.tensor(...)` of tensors (`{data}`): it copies "
            "element by element through Python, silently drops the autograd graph of one-element "
            "tensors and raises for larger ones; use `torch.stack(...)`"
        ).format(data=short(segment(analysis, data)))
        out.append(make_finding(analysis, SL210, node_range(analysis, call), message, fix))
    return out


SL210 = register(
    Rule(
        code="SL210",
        name="tensor-from-tensors",
        severity=Severity.WARNING,
        summary="`torch.tensor(...)` of a list/tuple of tensors",
        doc=RuleDoc(
            what="Flags `torch.tensor(data)` where `data` holds tensors: a list or tuple literal "
            "or a comprehension of them, a variable whose items the analysis knows are tensors, "
            "or a list built with `.append(...)` of them. Tensors are what the analysis knows, "
            "`torch.*` results (`torch.count_nonzero(...)`) and a model output's `.loss` / "
            "`.logits`. Silent where the code tests whether the data is a tensor: inside an `if` "
            "or conditional expression on `isinstance(<data>, torch.Tensor)` (also a tuple of "
            "types naming a Tensor) or `torch.is_tensor(<data>)`, in either branch and under "
            "`not`, and after such an `if` that returns (or raises, `continue`s, `break`s) "
            "early, unless `<data>` is rebound in between: the code already tells tensors "
            "from other data there, and which branch a value takes is not what the rule proves.",
            why="`torch.tensor` treats its argument as nested Python data: for one-element "
            "tensors it converts each to a Python number (dropping the graph: the result has "
            "`requires_grad=False`, with only a UserWarning), for larger ones it raises. It is "
            "also slow: element by element through Python.",
            example="losses = [criterion(m(x), y) for m in models]\ntotal = torch.tensor(losses).sum()  # SL210",
            fix="`torch.stack(...)` (the quick fix, when the call has no keyword arguments): it "
            "keeps the graph, the device and the dtype.",
        ),
        check=check_tensor_from_tensors,
    )
)


