"""API-misuse rules: tensors from tensors, deprecated storage (SL210, SL212)."""

from __future__ import annotations

import ast

from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis.values import ListOf, SeqValue
from stridelens.server.rules import register
from stridelens.server.rules._helpers import (
    attr_name_range,
    call_from_attr_range,
    index_of,
    is_tensor_expr,
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
    torch_path,
)
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity


# ----------------------------------------------------------------------------- SL210
def _holds_tensors(analysis: Analysis, data: ast.expr) -> bool:
    if isinstance(data, (ast.List, ast.Tuple)):
        return any(isinstance(analysis.values.get(e), TensorFact) for e in data.elts)
    if isinstance(data, (ast.ListComp, ast.GeneratorExp)):
        return isinstance(analysis.values.get(data.elt), TensorFact)
    value = analysis.values.get(data)
    if isinstance(value, SeqValue):
        return any(isinstance(i, TensorFact) for i in value.items)
    if isinstance(value, ListOf):
        return isinstance(value.item, TensorFact)
    return False


def check_tensor_from_tensors(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("tensor", ()):
        if torch_path(analysis, call.func) != "torch.tensor" or len(call.args) != 1:
            continue
        data = call.args[0]
        if not _holds_tensors(analysis, data):
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
            fix = Fix("Use `torch.stack(...)`", tuple(edits))
        message = (
            f"`torch.tensor(...)` of tensors (`{short(segment(analysis, data))}`): it copies "
            "element by element through Python, silently drops the autograd graph of one-element "
            "tensors and raises for larger ones; use `torch.stack(...)`"
        )
        out.append(make_finding(analysis, SL210, node_range(analysis, call), message, fix))
    return out


SL210 = register(
    Rule(
        code="SL210",
        name="tensor-from-tensors",
        severity=Severity.WARNING,
        summary="`torch.tensor(...)` of a list/tuple of tensors",
        doc=RuleDoc(
            what="Flags `torch.tensor(data)` where `data` is a list or tuple literal, a "
            "comprehension, or a variable whose items the analysis knows are tensors.",
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


# ----------------------------------------------------------------------------- SL212
def check_typed_storage(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("storage", ()):
        if not isinstance(call.func, ast.Attribute) or call.args or call.keywords:
            continue
        if not is_tensor_expr(analysis, call.func.value):
            continue
        fix = Fix("Use `.untyped_storage()`", (replace_range(attr_name_range(analysis, call.func), "untyped_storage"),))
        message = (
            "`.storage()` returns the deprecated TypedStorage (and warns once per process); "
            "use `.untyped_storage()` (sizes in bytes)"
        )
        out.append(make_finding(analysis, SL212, call_from_attr_range(analysis, call), message, fix))
    return out


SL212 = register(
    Rule(
        code="SL212",
        name="typed-storage",
        severity=Severity.INFORMATION,
        summary="`.storage()` on a tensor (deprecated TypedStorage)",
        doc=RuleDoc(
            what="Flags `.storage()` on something the analysis knows is a tensor or parameter.",
            why="`Tensor.storage()` returns a `TypedStorage`, deprecated since torch 2.0: it "
            "emits a one-time UserWarning and will go away. `untyped_storage()` is the "
            "supported view of the same memory (sizes and offsets in bytes).",
            example="x.storage().data_ptr()  # SL212",
            fix="`.untyped_storage()` (the quick fix); note its `size()` is in bytes, not elements.",
        ),
        check=check_typed_storage,
    )
)
