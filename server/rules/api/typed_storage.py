"""SL212 typed-storage: `.storage()` (the deprecated TypedStorage)."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    enclosing,
    index_of,
)
from stridelens.server.rules.shared.edits import (
    attr_name_range,
    call_from_attr_range,
    make_finding,
    replace_range,
)
from stridelens.server.rules.shared.parameters import is_tensor_expr


def check_typed_storage(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("storage", ()):
        if not isinstance(call.func, ast.Attribute) or call.args or call.keywords:
            continue
        if not is_tensor_expr(analysis, call.func.value):
            continue
        if enclosing(index_of(analysis), call, (ast.ExceptHandler,)) is not None:
            continue  # a fallback for old torch, after `untyped_storage()` failed (accelerate)
        fix = Fix(tr("Use `.untyped_storage()`"), (replace_range(attr_name_range(analysis, call.func), "untyped_storage"),))
        message = tr(
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
            what="Flags `.storage()` on something the analysis knows is a tensor or parameter, "
            "except inside an `except` handler (a fallback for old torch after "
            "`untyped_storage()` failed).",
            why="`Tensor.storage()` returns a `TypedStorage`, deprecated since torch 2.0: it "
            "emits a one-time UserWarning and will go away. `untyped_storage()` is the "
            "supported view of the same memory (sizes and offsets in bytes).",
            example="x.storage().data_ptr()  # SL212",
            fix="`.untyped_storage()` (the quick fix); note its `size()` is in bytes, not elements.",
        ),
        check=check_typed_storage,
    )
)
