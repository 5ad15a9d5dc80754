"""SL103 reshape-copies: `.reshape()` on a known non-contiguous tensor, where it really copies."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    call_at_event,
)
from stridelens.server.rules.shared.edits import (
    append_edit,
    call_from_attr_range,
    dot_attr_range,
    insert_at,
    make_finding,
    node_range,
    segment,
    short,
)

_RESHAPES = ("reshape", "reshape_as")


def check_reshape_copies(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for event in analysis.events:
        if event.kind != "reshape-copies":
            continue
        call = None
        for name in _RESHAPES:
            call = call_at_event(analysis, event.line, event.col, event.end_line, event.end_col, name)
            if call is not None:
                break
        if call is None:
            continue
        size = (
            tr("{nbytes} bytes").format(nbytes=f"{event.nbytes:,}")
            if event.nbytes is not None
            else tr("an unknown number of bytes")
        )
        if isinstance(call.func, ast.Attribute) and analysis.fact_of(call.func.value) is not None:
            where = call_from_attr_range(analysis, call)
            line, col, _, _ = dot_attr_range(analysis, call.func)
            edits = [insert_at(line, col, ".contiguous()")]
            subject = segment(analysis, call.func.value)
        elif call.args:  # torch.reshape(x, shape)
            where = node_range(analysis, call)
            edits = append_edit(analysis, call.args[0], ".contiguous()")
            subject = segment(analysis, call.args[0])
        else:
            continue
        sizes = tr(" (for every size{conditions})").format(conditions=event.detail) if event.detail else ""
        message = tr(
            "`reshape` copies {size} here: `{tensor}` is not contiguous, so no view is "
            "possible{sizes}; make the copy explicit with `.contiguous()`"
        ).format(size=size, tensor=short(subject), sizes=sizes)
        fix = Fix(tr("Make the copy explicit with `.contiguous()`"), tuple(edits))
        out.append(make_finding(analysis, SL103, where, message, fix))
    return out


SL103 = register(
    Rule(
        code="SL103",
        name="reshape-copies",
        severity=Severity.HINT,
        summary="`.reshape()` on a known non-contiguous tensor where it really copies",
        doc=RuleDoc(
            what="Flags a `.reshape(...)` (or `torch.reshape`, `.reshape_as`) that really copies: "
            "the replay on a meta tensor with the exact layout returned a new storage, not a "
            "view. The message says how many bytes are copied.",
            why="`reshape` silently falls back to a copy when the layout cannot be viewed. In a "
            "hot loop that is an allocation plus a full read and write of the tensor every "
            "time, and later in-place writes to the result no longer reach the original.",
            example="x = torch.randn(64, 128, 128).transpose(1, 2)\ny = x.reshape(64, -1)  # SL103: copies 4.2 MB",
            fix="Make the copy explicit: `x.contiguous().reshape(...)` (the quick fix), or change "
            "the layout upstream so no copy is needed.",
        ),
        check=check_reshape_copies,
        safe_fix=True,
    )
)


