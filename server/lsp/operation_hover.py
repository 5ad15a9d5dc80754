"""Hover on an operation: what `view`, `reshape`, `detach`, `no_grad`... do to memory or to
the autograd graph *for this operand*, from the facts of the operand and the result."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, ReplayEvent, TensorFact
from stridelens.server.analysis.positions import char_to_byte
from stridelens.server.units import human_bytes

OPERATIONS = frozenset(
    {
        "view",
        "reshape",
        "contiguous",
        "permute",
        "transpose",
        "T",
        "mT",
        "t",
        "expand",
        "expand_as",
        "detach",
        "clone",
        "data",
        "item",
        "backward",
        "no_grad",
        "inference_mode",
        "retain_graph",
    }
)


@dataclass
class Operation:
    name: str
    line: int  # 1-based
    start: int  # character columns of the operation's name
    end: int
    node: ast.AST  # the Attribute / keyword / Name
    operand: ast.expr | None  # what the op is applied to
    call: ast.Call | None  # the call, when the op is called


def _call_of(analysis: Analysis, node: ast.AST) -> ast.Call | None:
    parent = analysis.parent_of(node)
    if isinstance(parent, ast.Call) and parent.func is node:
        return parent
    return None


def operation_at(analysis: Analysis, line: int, char_col: int) -> Operation | None:
    """The operation whose name is under (1-based line, 0-based character column)."""
    if not 1 <= line <= len(analysis.lines):
        return None
    text = analysis.lines[line - 1]
    col = char_to_byte(text, char_col)
    for node in _nodes_on_line(analysis, line):
        if isinstance(node, ast.Attribute) and node.attr in OPERATIONS and node.end_lineno == line:
            end = node.end_col_offset or 0
            begin = end - len(node.attr)
            if begin <= col <= end:
                return Operation(
                    node.attr,
                    line,
                    analysis.char_col(line, begin),
                    analysis.char_col(line, end),
                    node,
                    node.value,
                    _call_of(analysis, node),
                )
        elif isinstance(node, ast.Name) and node.id in ("no_grad", "inference_mode"):
            begin, end = node.col_offset, node.end_col_offset or node.col_offset
            if node.lineno == line and begin <= col <= end:
                return Operation(
                    node.id, line, analysis.char_col(line, begin), analysis.char_col(line, end),
                    node, None, _call_of(analysis, node),
                )
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "retain_graph" and getattr(kw, "lineno", None) == line:
                    begin = kw.col_offset
                    end = begin + len("retain_graph")
                    if begin <= col <= end:
                        operand = node.func.value if isinstance(node.func, ast.Attribute) else None
                        return Operation(
                            "retain_graph", line, analysis.char_col(line, begin),
                            analysis.char_col(line, end), kw, operand, node,
                        )
    return None


def _nodes_on_line(analysis: Analysis, line: int) -> list[ast.AST]:
    """Nodes whose span covers `line`, found without walking statements elsewhere."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [analysis.tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            start = getattr(child, "lineno", None)
            if start is None:
                stack.append(child)
                continue
            end = getattr(child, "end_lineno", None) or start
            if start <= line <= end:
                out.append(child)
                stack.append(child)
    return out


def _fact(analysis: Analysis, node: ast.AST | None) -> TensorFact | None:
    return analysis.fact_of(node) if node is not None else None


def _event(analysis: Analysis, call: ast.Call | None, kind: str) -> ReplayEvent | None:
    if call is None:
        return None
    for e in analysis.events:
        if (
            e.kind == kind
            and e.line == call.lineno
            and call.col_offset <= e.col <= (call.end_col_offset or 0)
        ):
            return e
    return None


def _mb(n: int | None) -> str:
    return tr("its data") if n is None else human_bytes(n)


def _name(analysis: Analysis, node: ast.AST | None) -> str:
    if node is None:
        return tr("the operand")
    seg = analysis.segment(node)
    return seg if len(seg) <= 40 else seg[:37] + "..."


def _layout(fact: TensorFact | None) -> str:
    if fact is None or fact.shape is None:
        return ""
    if fact.strides is not None:
        return tr("shape `{shape}`, strides `{strides}`").format(shape=tuple(fact.shape), strides=tuple(fact.strides))
    return tr("shape `{shape}`").format(shape=tuple(fact.shape))


def render_operation(analysis: Analysis, op: Operation, exact: bool) -> str | None:
    name = op.name
    operand = _fact(analysis, op.operand)
    result = _fact(analysis, op.call) if op.call is not None else _fact(analysis, op.node)
    who = _name(analysis, op.operand)
    lines: list[str] = []
    title = f"**`{name}`**"
    if name == "view":
        bad = _event(analysis, op.call, "view-incompatible")
        if bad is not None:
            lines.append(
                tr(
                    "`view` here **raises at run time**: `{who}` is laid out so that the requested "
                    "dims cannot be merged without a copy ({layout}). "
                    "Use `.reshape(...)`, or `.contiguous().view(...)` to make the copy explicit."
                ).format(who=who, layout=_layout(operand) or tr("non-contiguous"))
            )
        elif result is not None and result.shape is not None:
            lines.append(
                tr(
                    "`view` here is fine: dims merge compatibly with `{who}`'s layout — "
                    "no copy, the result shares `{who}`'s storage ({layout})."
                ).format(who=who, layout=_layout(result))
            )
        else:
            lines.append(
                tr(
                    "`view` never copies: it reinterprets the same storage with new sizes, and raises "
                    "if the layout cannot be viewed that way."
                )
            )
            if operand is not None and operand.contiguous is False:
                lines.append(tr("`{who}` is non-contiguous here, so most views of it will raise.").format(who=who))
    elif name == "reshape":
        copy = _event(analysis, op.call, "reshape-copies")
        if copy is not None:
            lines.append(
                tr(
                    "`reshape` here **copies {size}** because its input `{who}` is "
                    "non-contiguous ({layout}); the result has its own storage."
                ).format(size=_mb(copy.nbytes), who=who, layout=_layout(operand))
            )
        elif result is not None and result.stated_is_view is True:
            lines.append(tr("`reshape` here returns a view: no copy, it shares `{who}`'s storage.").format(who=who))
        elif result is not None and result.stated_is_view is False:
            lines.append(tr("`reshape` here copies {size} into a new storage.").format(size=_mb(result.nbytes)))
        else:
            lines.append(
                tr("`reshape` returns a view when the layout allows it and silently copies otherwise.")
            )
            if operand is not None and operand.contiguous is False:
                lines.append(tr("`{who}` is non-contiguous here, so it is likely to copy.").format(who=who))
    elif name == "contiguous":
        if operand is not None and operand.contiguous is True:
            lines.append(
                tr("`contiguous` is a no-op here: `{who}` is already contiguous (returns it as is).").format(who=who)
            )
        elif operand is not None and operand.contiguous is False:
            lines.append(
                tr(
                    "`contiguous` here **copies {size}** into a new row-major storage "
                    "(`{who}` has {layout})."
                ).format(size=_mb(operand.nbytes), who=who, layout=_layout(operand))
            )
        else:
            lines.append(tr("`contiguous` copies into a new row-major storage unless the input already is one."))
    elif name in ("permute", "transpose", "T", "mT", "t"):
        lines.append(
            tr(
                "`{op}` never copies: it returns a view of `{who}` with the dims (and strides) reordered; "
                "the result is usually non-contiguous, so a later `view` may raise and `reshape` may copy."
            ).format(op=name, who=who)
        )
        if operand is not None and result is not None and operand.strides and result.strides:
            lines.append(
                tr("strides `{before}` → `{after}`.").format(before=tuple(operand.strides), after=tuple(result.strides))
            )
    elif name in ("expand", "expand_as"):
        lines.append(
            tr(
                "`{op}` allocates nothing: size-1 dims of `{who}` get stride 0, so many elements "
                "alias one memory cell. Writing into the result in place is an error or aliases; "
                "`.clone()` it first if you need to write."
            ).format(op=name, who=who)
        )
        if result is not None and result.strides is not None:
            lines.append(tr("result strides `{strides}`.").format(strides=tuple(result.strides)))
    elif name == "detach":
        lines.append(
            tr(
                "`detach` shares storage with `{who}` but is cut from the autograd graph "
                "(requires_grad=False). In-place changes to it change "
                "`{who}` too, and can break `{who}`'s backward — mutate a `.clone()`."
            ).format(who=who)
        )
    elif name == "clone":
        lines.append(
            tr(
                "`clone` copies {size} into a new storage; the copy stays "
                "in the autograd graph (gradients flow back to `{who}`). Use `.detach().clone()` for a "
                "graph-free copy."
            ).format(size=_mb(operand.nbytes if operand else None), who=who)
        )
    elif name == "data":
        lines.append(
            tr(
                "`.data` shares storage with `{who}` and hides changes from autograd: gradients computed "
                "afterwards can be silently wrong. Use `.detach()` for reads and a `torch.no_grad()` "
                "block for in-place updates."
            ).format(who=who)
        )
    elif name == "item":
        lines.append(
            tr(
                "`item` copies the one element of `{who}` to a Python number (a device sync on CUDA); "
                "the result keeps no graph — the way to log a loss without keeping its graph alive."
            ).format(who=who)
        )
    elif name == "backward":
        lines.append(
            tr(
                "`backward` runs the graph behind `{who}`, accumulates into `.grad` of the leaves, then "
                "frees the graph's saved tensors (unless `retain_graph=True`): a second backward through "
                "the same graph raises."
            ).format(who=who)
        )
    elif name == "retain_graph":
        lines.append(
            tr(
                "`retain_graph=True` keeps every saved tensor of this graph alive after backward, until "
                "the graph itself is dropped. Needed only to backward twice through the same graph; "
                "otherwise it holds activation memory for nothing."
            )
        )
    elif name == "no_grad":
        lines.append(
            tr(
                "`torch.no_grad()`: ops inside record no graph, so activations are not saved for backward. "
                "Tensors made inside can still be used later (they just have requires_grad=False)."
            )
        )
    elif name == "inference_mode":
        lines.append(
            tr(
                "`torch.inference_mode()`: like `no_grad` and cheaper (no version counters, no view "
                "tracking); tensors made inside can never enter autograd later."
            )
        )
    else:
        return None
    if not exact and name in ("view", "reshape", "contiguous"):
        lines.append(tr("_symbolic facts only: exact answer once torch has loaded_"))
    return "\n\n".join([title, *lines])
