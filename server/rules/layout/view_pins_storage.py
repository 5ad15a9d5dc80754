"""SL105 view-pins-storage: a small view of a large storage kept beyond the current step.

A view keeps its whole storage alive, however little of it it shows. Kept in a list that
outlives the loop, on `self`, or written with `torch.save` (which saves the whole storage:
1,281,647 bytes for a 25,600-byte view, measured), a slice of an activation keeps every
step's activation alive. `.detach()` and `.contiguous()` of an already contiguous slice are
views too.
"""

from __future__ import annotations

import ast

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    LOOP_NODES,
    enclosing,
    index_of,
    torch_path,
    walk,
)
from stridelens.server.rules.shared.edits import (
    append_edit,
    make_finding,
    node_range,
    segment,
    short,
)
from stridelens.server.rules.shared.training_loops import loop_trains
from stridelens.server.units import human_bytes

_VIEW_METHODS = frozenset({"view", "narrow", "select", "unflatten", "diagonal", "as_strided", "expand", "t", "transpose", "permute"})
_STILL_A_VIEW = frozenset({"detach", "contiguous"})  # of a view: the same storage (contiguous: when already so)


def _view_base(analysis: Analysis, node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(the view expression, the tensor it views) for a slice / index / view method of a
    known tensor, through `.detach()` / `.contiguous()`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STILL_A_VIEW:
        if node.func.attr == "contiguous":
            fact = analysis.fact_of(node.func.value)
            if fact is None or fact.contiguous is not True:
                return None  # `.contiguous()` of a strided slice copies
        node = node.func.value
    if isinstance(node, ast.Subscript):
        if not _basic_index(node.slice):
            return None  # `x[idx]` with a tensor/list index gathers: a copy
        base = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEW_METHODS:
        base = node.func.value
    else:
        return None
    base_fact = analysis.fact_of(base)
    if not isinstance(base_fact, TensorFact):
        return None
    view_fact = analysis.fact_of(node)
    if view_fact is not None and view_fact.is_view is False:
        return None
    return node, base


def _basic_index(index: ast.expr) -> bool:
    """Slices, integers, `None` and `...`: indexing that returns a view."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return all(
        isinstance(p, ast.Slice)
        or (isinstance(p, ast.Constant) and (p.value is None or p.value is Ellipsis or type(p.value) is int))
        or (isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.USub) and isinstance(p.operand, ast.Constant))
        for p in parts
    )


def _narrow_index(view: ast.expr) -> bool:
    """With sizes unknown: an index that certainly keeps a small part, an integer past the
    first dim (`x[:, 0]`) or a slice of at most 16 (`x[:, :1]`, `x[:8]`)."""
    if not isinstance(view, ast.Subscript):
        return False
    parts = view.slice.elts if isinstance(view.slice, ast.Tuple) else [view.slice]
    for i, p in enumerate(parts):
        if i > 0 and isinstance(p, ast.Constant) and type(p.value) is int:
            return True
        if isinstance(p, ast.Slice) and p.lower is None and p.step is None:
            upper = p.upper
            if isinstance(upper, ast.Constant) and type(upper.value) is int and 0 < upper.value <= 16:
                return True
    return False


def _sizes(analysis: Analysis, view: ast.expr, base: ast.expr) -> tuple[str, bool]:
    """A ": X for Y used" phrase, and whether the view is known to be small (< half)."""
    view_fact, base_fact = analysis.fact_of(view), analysis.fact_of(base)
    kept = base_fact.storage_nbytes if base_fact is not None else None
    if kept is None and base_fact is not None:
        kept = base_fact.nbytes
    used = view_fact.nbytes if view_fact is not None else None
    if kept is not None and used is not None:
        if used * 2 > kept:
            return "", False
        return tr(": {kept} for {used} used").format(kept=human_bytes(kept), used=human_bytes(used)), True
    return "", _narrow_index(view)


def _outlives_step(analysis: Analysis, call: ast.Call, container: ast.expr) -> str | None:
    """Where an `append` puts the value so that it survives the iteration or the call."""
    if isinstance(container, ast.Attribute) and isinstance(container.value, ast.Name) and container.value.id == "self":
        return tr("kept in `self.{attr}`").format(attr=container.attr)
    if isinstance(container, ast.Name):
        index = index_of(analysis)
        loop = enclosing(index, call, LOOP_NODES)
        if loop is None:
            return None
        # A list filled in a loop and stacked after it is the function's own scratch: only a
        # training loop, or a script's loop, keeps it for the run.
        if enclosing(index, loop, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) is not None and not loop_trains(index, loop):
            return None
        for node in walk(loop):
            if isinstance(node, ast.Name) and node.id == container.id and isinstance(node.ctx, ast.Store):
                return None  # rebound inside the loop: per iteration
        return tr("kept in `{name}` across loop iterations").format(name=container.id)
    return None


def _on_self(node: ast.expr) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def check_view_pins_storage(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)

    def report(view: ast.expr, base: ast.expr, where: str, node: ast.expr) -> None:
        phrase, small = _sizes(analysis, view, base)
        if not small:
            return
        text = short(segment(analysis, node))
        base_text = short(segment(analysis, base), 30)
        if where == "torch.save":
            message = tr(
                "`{view}` is a view of `{base}`: `torch.save` writes its whole storage{sizes}; "
                "save `.clone()` to write only what it shows"
            ).format(view=text, base=base_text, sizes=phrase)
        else:
            message = tr(
                "`{view}` is a view of `{base}`: {where}, it keeps that whole storage "
                "alive{sizes}; store `.clone()` to keep only what it shows"
            ).format(view=text, base=base_text, where=where, sizes=phrase)
        fix = Fix(tr("Store `.clone()`"), tuple(append_edit(analysis, node, ".clone()")))
        out.append(make_finding(analysis, SL105, node_range(analysis, node), message, fix))

    for call in index.by_name.get("append", ()):
        if not isinstance(call.func, ast.Attribute) or len(call.args) != 1:
            continue
        hit = _view_base(analysis, call.args[0])
        if hit is not None and _on_self(hit[1]):
            continue  # a view of state already kept on `self` (a cache crop) pins nothing new
        where = _outlives_step(analysis, call, call.func.value) if hit is not None else None
        if hit is not None and where is not None:
            report(*hit, where, call.args[0])
    for call in index.by_name.get("save", ()):
        if torch_path(analysis, call.func) != "torch.save" or not call.args:
            continue
        hit = _view_base(analysis, call.args[0])
        if hit is not None:
            report(*hit, "torch.save", call.args[0])
    for attr_node in index.attributes:
        on_self = isinstance(attr_node.value, ast.Name) and attr_node.value.id == "self"
        attr_name = attr_node.attr
        stmt = index.parents.get(attr_node)
        if on_self and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.targets[0] is attr_node:
            fn = enclosing(index, stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name != "__init__":
                hit = _view_base(analysis, stmt.value)
                if hit is not None and not _on_self(hit[1]):
                    report(*hit, tr("kept in `self.{attr}`").format(attr=attr_name), stmt.value)
    return out


SL105 = register(
    Rule(
        code="SL105",
        name="view-pins-storage",
        severity=Severity.WARNING,
        summary="a small view of a large tensor kept beyond the step (`self.cache.append(x[:, :1])`)",
        doc=RuleDoc(
            what="Flags a slice, index or view (`x[:, :1]`, `out[0]`, `x.narrow(...)`, also "
            "through `.detach()`, and `.contiguous()` of an already contiguous view) of a tensor "
            "the analysis knows, when it is kept beyond the current step: appended to a list "
            "bound outside the loop, appended to or assigned on `self` (outside `__init__`), or "
            "passed to `torch.save`. A list counts when it is filled in a training loop (one "
            "that calls `backward()` or an optimizer step) or a script's loop; a list filled in "
            "a function's own loop and stacked after it is scratch. With sizes known, the view "
            "must show less than half its storage; with sizes unknown, the index must keep a "
            "small part for sure (an integer past the first dim, `x[:, 0]`, or a slice of at "
            "most 16, `x[:, :1]`). Not flagged: gathers (a tensor or list index copies), views "
            "of tensors already kept on `self` (cache crops).",
            why="A view shares its base's storage and keeps all of it alive. A list of "
            "`feats[:, :1]` across an epoch keeps every step's `feats`: memory grows until the "
            "run dies, although each kept tensor is tiny. `torch.save` of a view writes the "
            "whole storage to disk.",
            example="for x in loader:\n    feats = model(x)\n    history.append(feats[:, :1])  # SL105",
            fix="Store `.clone()` (the quick fix): a copy of just what the view shows.",
        ),
        check=check_view_pins_storage,
    )
)
