"""SL218 module-requires-grad: `module.requires_grad = False` on an nn.Module freezes nothing."""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.analysis.values import InstanceValue, ModuleValue
from stridelens.server.rules import register
from stridelens.server.rules.autograd.requires_grad_on_non_leaf import literal_flag
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    Index,
    index_of,
)
from stridelens.server.rules.shared.edits import (
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
)


def _module_target(analysis: Analysis, node: ast.expr) -> str | None:
    """What proves `node` is an nn.Module: "layer" (an `nn` layer the file builds), "model"
    (an instance of one of the file's nn.Module classes), "self" (`self` in a method of one);
    None when it is not known to be a module."""
    value = analysis.values.get(node)
    if isinstance(value, ModuleValue):
        return "layer"
    if isinstance(value, InstanceValue) and value.cls.is_module:
        return "self" if isinstance(node, ast.Name) and node.id == "self" else "model"
    return None


def _reads_flag(analysis: Analysis, subject: ast.expr) -> bool:
    """The file reads `requires_grad` of the same object (as written, or `self` of the same
    class): the attribute is the code's own flag, not a failed freeze."""
    index = index_of(analysis)
    text = segment(analysis, subject)
    value = analysis.values.get(subject)
    own_class = _class_of(index, subject) if text.split(".", 1)[0] == "self" else None
    for attr in index.attributes:
        if attr.attr != "requires_grad" or not isinstance(attr.ctx, ast.Load):
            continue
        other = analysis.values.get(attr.value)
        if isinstance(value, InstanceValue) and isinstance(other, InstanceValue) and other.cls is value.cls:
            return True
        if segment(analysis, attr.value) == text and (own_class is None or _class_of(index, attr) is own_class):
            return True
    for call in index.by_name.get("getattr", ()):
        if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and call.args[1].value == "requires_grad":
            return True
    return False


def _class_of(index: Index, node: ast.AST) -> ast.ClassDef | None:
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, ast.ClassDef):
        parent = index.parents.get(parent)
    return parent


def check_module_requires_grad(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    candidates: list[tuple[ast.AST, ast.expr, ast.expr | None]] = []  # (report, module, value)
    for attr in index.attributes:
        if attr.attr != "requires_grad" or not isinstance(attr.ctx, ast.Store):
            continue
        stmt = index.parents.get(attr)
        if isinstance(stmt, ast.Assign) and attr in stmt.targets and len(stmt.targets) == 1:
            candidates.append((stmt, attr.value, stmt.value))
    for call in index.by_name.get("setattr", ()):
        if isinstance(call.func, ast.Name) and len(call.args) == 3:
            key = call.args[1]
            if isinstance(key, ast.Constant) and key.value == "requires_grad":
                candidates.append((call, call.args[0], call.args[2]))
    for report, subject, value in candidates:
        kind = _module_target(analysis, subject)
        if kind is None or _reads_flag(analysis, subject):
            continue
        if kind == "self" and literal_flag(value) is None:
            continue  # `self.requires_grad = requires_grad`: a setting the class stores
        module = short(segment(analysis, subject))
        flag = short(segment(analysis, value)) if value is not None else "False"
        message = tr(
            "`{module}` is an nn.Module: `requires_grad = {flag}` on it only sets a plain Python "
            "attribute, and every parameter keeps its own flag (torch 2.13); use "
            "`{module}.requires_grad_({flag})`, which sets it on each parameter"
        ).format(module=module, flag=flag)
        fix = None
        if isinstance(report, ast.Assign) and report.lineno == report.end_lineno and value is not None:
            where = node_range(analysis, report)
            title = tr("Use `{module}.requires_grad_({flag})`").format(module=module, flag=flag)
            fix = Fix(title, (replace_range(where, f"{segment(analysis, subject)}.requires_grad_({segment(analysis, value)})"),))
        out.append(make_finding(analysis, SL218, node_range(analysis, report), message, fix))
    return out


SL218 = register(
    Rule(
        code="SL218",
        name="module-requires-grad",
        severity=Severity.WARNING,
        summary="`module.requires_grad = False` on an nn.Module (a plain attribute: nothing is frozen)",
        doc=RuleDoc(
            what="Flags `m.requires_grad = ...` and `setattr(m, 'requires_grad', ...)` where the "
            "analysis knows `m` is an nn.Module: an `nn` layer the file builds (`lin = "
            "nn.Linear(...)`, `self.encoder = nn.Linear(...)` read as `self.encoder` or "
            "`model.encoder`), an instance of one of the file's nn.Module classes (`model = "
            "Net()`), or `self` in a method of one. Silent where the object is not known to be "
            "a module (a parameter, `p` of `for p in m.parameters()`, a function's argument), "
            "and where the file reads `requires_grad` of the same object (`if self.requires_grad:`, "
            "`getattr(m, 'requires_grad')`): there it is the code's own flag; and for "
            "`self.requires_grad = <not a literal>` (`self.requires_grad = requires_grad` in "
            "`__init__`: a setting the class stores).",
            why="`requires_grad` is a tensor attribute; `nn.Module` has no such property, so "
            "assigning it stores a plain attribute on the module object and no parameter changes. "
            "Checked on torch 2.13: after `m.requires_grad = False`, every `p.requires_grad` of "
            "`m.parameters()` is still True, so the part meant to be frozen keeps training (and "
            "the optimizer keeps updating it), silently.",
            example="model.encoder.requires_grad = False  # SL218",
            fix="`model.encoder.requires_grad_(False)` (the quick fix): `Module.requires_grad_` "
            "sets the flag on every parameter of the module and returns the module.",
        ),
        check=check_module_requires_grad,
    )
)
