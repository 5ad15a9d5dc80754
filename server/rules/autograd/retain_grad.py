"""SL208 retain-grad: `.retain_grad()` keeps a non-leaf gradient alive."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import index_of
from stridelens.server.rules.shared.edits import call_from_attr_range, make_finding, segment, short


def check_retain_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).by_name.get("retain_grad", ()):
        if not isinstance(call.func, ast.Attribute) or call.args or call.keywords:
            continue
        fact = analysis.fact_of(call.func.value)
        if fact is None and not index_of(analysis).imports_torch:
            continue
        message = tr(
            "`.retain_grad()` keeps the gradient of the non-leaf `{tensor}` "
            "alive after backward (one more tensor of its size per step); drop it when done inspecting"
        ).format(tensor=short(segment(analysis, call.func.value)))
        out.append(make_finding(analysis, SL208, call_from_attr_range(analysis, call), message))
    return out


SL208 = register(
    Rule(
        code="SL208",
        name="retain-grad",
        severity=Severity.INFORMATION,
        summary="`.retain_grad()` keeps a non-leaf gradient alive",
        doc=RuleDoc(
            what="Flags `.retain_grad()` calls.",
            why="Non-leaf gradients are normally freed as soon as backward has passed them on. "
            "`retain_grad()` stores one in `.grad`, a tensor the size of the activation, kept "
            "until the tensor dies: fine while debugging, a memory cost when left in.",
            example="h = model.encoder(x)\nh.retain_grad()  # SL208",
            fix="Remove it once inspection is done, or use a backward hook that reads the "
            "gradient without keeping it.",
        ),
        check=check_retain_grad,
    )
)

