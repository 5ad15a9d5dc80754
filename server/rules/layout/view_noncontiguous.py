"""SL101 view-noncontiguous: `.view()` on a layout that cannot be viewed to that shape (raises)."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.facts import format_sizes
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    call_at_event,
)
from stridelens.server.rules.shared.edits import (
    attr_name_range,
    call_from_attr_range,
    make_finding,
    replace_range,
    segment,
    short,
)


def check_view_noncontiguous(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for event in analysis.events:
        if event.kind != "view-incompatible":
            continue
        call = call_at_event(analysis, event.line, event.col, event.end_line, event.end_col, "view")
        if call is None or not isinstance(call.func, ast.Attribute):
            continue
        receiver = analysis.fact_of(call.func.value)
        layout = ""
        if receiver is not None and receiver.full_display_shape is not None and receiver.display_strides is not None:
            shape = format_sizes(receiver.full_display_shape, pretty=False)
            strides = format_sizes(receiver.display_strides, pretty=False)
            layout = tr(" (shape {shape}, strides {strides})").format(shape=shape, strides=strides)
        # Over symbolic sizes: for which sizes it does not raise, and what it assumed.
        sizes = tr("; this holds for every size{conditions}").format(conditions=event.detail) if event.detail else (
            tr("; this holds for every size") if receiver is not None and receiver.shape is None else ""
        )
        fix = Fix(
            tr("Replace `.view(` with `.reshape(`"),
            (replace_range(attr_name_range(analysis, call.func), "reshape"),),
        )
        message = tr(
            "`.view()` raises here: `{tensor}` is not contiguous{layout} and this shape cannot be "
            "viewed from its strides{sizes}; use `.reshape()` (copies) or `.contiguous().view()`"
        ).format(tensor=short(segment(analysis, call.func.value)), layout=layout, sizes=sizes)
        out.append(make_finding(analysis, SL101, call_from_attr_range(analysis, call), message, fix))
    return out


SL101 = register(
    Rule(
        code="SL101",
        name="view-noncontiguous",
        severity=Severity.ERROR,
        summary="`.view()` on a layout that cannot be viewed to that shape (raises at run time)",
        doc=RuleDoc(
            what="Flags a `.view(...)` whose input layout (shape and strides) cannot be viewed "
            "to the requested shape. The verdict is torch's own: the op is replayed on a meta "
            "tensor with the exact layout, and the rule fires only when that replay raises. "
            "Where the file does not spell out its sizes (`B, T, C = x.shape`, `self.n_head`, "
            "a layer's output), the verdict comes from a stride algebra over those sizes that "
            "follows torch's own `view` rule: the rule fires when the view raises for every "
            "size >= 2, and the message names the sizes that would make it legal (`unless T == "
            "1`) and what it assumed (a parameter being contiguous). Where even the rank is "
            "unknown, it stays silent.",
            why="`view` never copies: it needs the new shape to be expressible with strides over "
            "the same memory. After `transpose`/`permute` that is often impossible and the line "
            "raises `RuntimeError: view size is not compatible with input tensor's size and "
            "stride` at run time. Many permute-then-view forms are fine (splitting a dim, merging "
            "dims still adjacent in memory), so this is decided from strides, never from syntax.",
            example="x = torch.randn(2, 3, 4)\ny = x.transpose(0, 1).view(-1)  # SL101: raises\n"
            "z = x.permute(2, 0, 1).view(4, 6)  # fine: dims 0 and 1 stay adjacent",
            fix="Use `.reshape(...)` (it copies only when it has to), or `.contiguous().view(...)` "
            "to make the copy explicit. The quick fix replaces `view` with `reshape`.",
        ),
        check=check_view_noncontiguous,
        safe_fix=True,
    )
)


