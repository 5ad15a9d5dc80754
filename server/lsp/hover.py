"""textDocument/hover: the tensor card, the operation card, and `# noqa: SLnnn` rule docs."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

from lsprotocol import types

from stridelens.i18n import language, ntr, tr
from stridelens.server.analysis import Analysis, Explanation, TensorFact, recorded
from stridelens.server.analysis.facts import Provenance, format_sizes
from stridelens.server.analysis.replay import torch_importable
from stridelens.server.analysis.storage_picture import render_storage_picture
from stridelens.server.lsp.diagnostics import NOQA
from stridelens.server.lsp.documents import Encoding
from stridelens.server.lsp.operation_hover import operation_at, render_operation
from stridelens.server.rules import ALL_RULES
from stridelens.server.rules.catalogue import severity_name
from stridelens.server.units import human_bytes

# Columns of the hover's storage picture: VS Code's hover shows about this many monospace
# characters before it scrolls, and every row must line up with the others.
HOVER_PICTURE_WIDTH = 64


def _yes(value: bool | None) -> str:
    return tr("unknown") if value is None else (tr("yes") if value else tr("no"))


def _tuple(value: tuple[int, ...] | None) -> str:
    if value is None:
        return tr("unknown")
    return f"`{tuple(value)}`"


def fact_lines(fact: TensorFact) -> list[str]:
    """The card's facts as Markdown bullet lines, only what is known."""
    rows: list[str] = []
    head = []
    shape = fact.display_shape
    if shape is not None:
        head.append(tr("**shape** `{shape}`").format(shape=format_sizes(shape)))
    if fact.dtype is not None:
        head.append(tr("**dtype** `{dtype}`").format(dtype=fact.dtype))
    if fact.device is not None:
        head.append(tr("**device** `{device}`").format(device=fact.device))
    if head:
        rows.append(" · ".join(head))
    layout = []
    strides, offset, contiguous = fact.display_strides, fact.display_offset, fact.stated_contiguous
    if strides is not None:
        layout.append(tr("**strides** `{strides}`").format(strides=format_sizes(strides)))
    if offset is not None:
        layout.append(tr("**storage offset** `{offset}`").format(offset=str(offset).replace(" * ", "·")))
    # The verdict `explain` states, and only that: a permute of symbolic sizes stays
    # contiguous when the moved dims have size 1 (its "why" note says so).
    if contiguous is not None:
        layout.append(tr("**contiguous** {answer}").format(answer=_yes(contiguous)))
    if layout:
        rows.append(" · ".join(layout))
    if fact.assumes_text:
        rows.append(tr("**assumes** {conditions}").format(conditions=tr(", ").join(f"`{a}`" for a in fact.assumes_text)))
    if fact.view_of:
        rows.append(tr("**memory** view of `{base}` — shares its storage").format(base=fact.view_of))
    elif fact.stated_is_view is True:
        rows.append(tr("**memory** a view — shares the storage of another tensor"))
    elif fact.stated_is_view is False:
        rows.append(tr("**memory** a copy — its own storage"))
    if fact.storage_numel is not None:
        elements = ntr("{n} element", "{n} elements", fact.storage_numel).format(n=f"{fact.storage_numel:,}")
        if fact.storage_nbytes is not None:
            size = tr("**storage** {elements}, {size}").format(elements=elements, size=human_bytes(fact.storage_nbytes))
        else:
            size = tr("**storage** {elements}").format(elements=elements)
        if fact.nbytes is not None and fact.storage_nbytes is not None and fact.nbytes != fact.storage_nbytes:
            size += tr(" (this view reads {size})").format(size=human_bytes(fact.nbytes))
        rows.append(size)
    grad = []
    if fact.stated_requires_grad is not None:
        grad.append(tr("**requires_grad** {answer}").format(answer=_yes(fact.stated_requires_grad)))
        if fact.grad_assumed is not None:
            grad[-1] += tr(" (when autograd is on: `{condition}`)").format(condition=fact.grad_assumed)
    if fact.stated_carries_graph:
        grad.append(tr("carries an autograd graph"))
    if fact.detached_from:
        grad.append(tr("detached from `{source}` (shares its storage)").format(source=fact.detached_from))
    if grad:
        rows.append(" · ".join(grad))
    return rows


@functools.lru_cache(maxsize=4)
def _symbolic_footer(language: str) -> str:
    # Without torch the exact facts never come: say so rather than "once torch has loaded".
    if torch_importable():
        return tr("_symbolic facts only: exact layout once torch has loaded_")
    return tr("_symbolic facts only: torch is not installed for this interpreter_")


def render_card(
    explanation: Explanation, exact: bool, note_at: Callable[[Provenance], Provenance] | None = None
) -> str | None:
    """The tensor card; `note_at` moves each "why" note's line (a notebook cell's own lines)."""
    fact = explanation.fact
    expr = explanation.expr if len(explanation.expr) <= 60 else explanation.expr[:57] + "..."
    out = [tr("**`{expr}`** — tensor").format(expr=expr)]
    if fact is None:
        if explanation.items:
            count = len(explanation.items)
            out[0] = ntr("**`{expr}`** — a tuple of {n} tensor", "**`{expr}`** — a tuple of {n} tensors", count).format(
                expr=expr, n=count
            )
            for i, item in enumerate(explanation.items):
                shape = _tuple(item.shape) if item is not None else tr("unknown")
                out.append(tr("- `[{index}]` shape {shape}").format(index=i, shape=shape))
            return "\n".join(out)
        if explanation.items is not None:
            out[0] = tr("**`{expr}`** — a list of tensors").format(expr=expr)
            return "\n".join(out)
        return None
    rows = fact_lines(fact)
    if not rows and not fact.provenance:
        return None
    out += [f"- {row}" for row in rows]
    if fact.display_shape is None:
        out.append(tr("- sizes unknown here; the facts above hold whatever they are"))
    elif fact.shape is None:
        out.append(tr("- sizes in your names: these facts hold for every size (see **assumes**)"))
    picture = render_storage_picture(fact, width=HOVER_PICTURE_WIDTH)
    if picture:
        out += ["", "```text", *picture, "```"]
    notes = fact.notes(note_at)
    if notes:
        out += ["", tr("**Why**")]
        out += [f"- {note}" for note in notes]
    if not exact:
        out += ["", _symbolic_footer(language())]
    return "\n".join(out)


def rule_card(code: str) -> str | None:
    rule = ALL_RULES.get(code.upper())
    if rule is None:
        return None
    doc = rule.doc
    return "\n".join(
        [
            f"**{rule.code}** `{rule.name}` ({severity_name(rule.severity)}) — {tr(rule.summary)}",
            "",
            tr("**What it does** {text}").format(text=tr(doc.what)),
            "",
            tr("**Why it matters** {text}").format(text=tr(doc.why)),
            "",
            tr("**Example**"),
            "```python",
            tr(doc.example).strip("\n"),
            "```",
            "",
            tr("**Fix** {text}").format(text=tr(doc.fix)),
            "",
            "[{label}]({url})".format(label=tr("Documentation"), url=rule.url),
        ]
    )


def noqa_hover(line: str, char_col: int) -> tuple[str, int, int] | None:
    """(markdown, start, end character columns) for a rule code under the cursor in `# noqa`."""
    match = NOQA.search(line)
    if match is None or match.group("codes") is None:
        return None
    start = match.start("codes")
    for part in match.group("codes").split(","):
        code = part.strip()
        begin = line.index(code, start)
        end = begin + len(code)
        start = end
        if begin <= char_col <= end:
            card = rule_card(code)
            return (card, begin, end) if card else None
    return None


def _node_range(analysis: Analysis, node: ast.AST, lines: list[str], enc: Encoding) -> types.Range | None:
    lineno = getattr(node, "lineno", None)
    end_lineno = getattr(node, "end_lineno", None)
    if lineno is None or end_lineno is None:
        return None
    start_text = lines[lineno - 1] if lineno <= len(lines) else ""
    end_text = lines[end_lineno - 1] if end_lineno <= len(lines) else ""
    c0 = analysis.char_col(lineno, getattr(node, "col_offset", 0))
    c1 = analysis.char_col(end_lineno, getattr(node, "end_col_offset", 0) or 0)
    return types.Range(
        start=types.Position(line=lineno - 1, character=enc.from_char(start_text, c0)),
        end=types.Position(line=end_lineno - 1, character=enc.from_char(end_text, c1)),
    )


def hover(
    analysis: Analysis,
    exact: bool,
    lines: list[str],
    enc: Encoding,
    line0: int,
    character: int,
    markdown: bool = True,
    note_at: Callable[[Provenance], Provenance] | None = None,
) -> types.Hover | None:
    """The card at a position; plain text for clients that do not render Markdown."""
    found = _card(analysis, exact, lines, enc, line0, character, note_at)
    if found is None:
        return None
    card, rng = found
    kind = types.MarkupKind.Markdown if markdown else types.MarkupKind.PlainText
    return types.Hover(contents=types.MarkupContent(kind=kind, value=card if markdown else plain_text(card)), range=rng)


def plain_text(card: str) -> str:
    """A card's Markdown without the markup: no `**`, backticks or code fences."""
    kept = [line for line in card.splitlines() if not line.startswith("```")]
    return "\n".join(kept).replace("**", "").replace("`", "")


def _card(
    analysis: Analysis,
    exact: bool,
    lines: list[str],
    enc: Encoding,
    line0: int,
    character: int,
    note_at: Callable[[Provenance], Provenance] | None = None,
) -> tuple[str, types.Range | None] | None:
    text = lines[line0] if 0 <= line0 < len(lines) else ""
    col = enc.to_char(text, character)
    noqa = noqa_hover(text, col)
    if noqa is not None:
        noqa_card, begin, end = noqa
        rng = types.Range(
            start=types.Position(line=line0, character=enc.from_char(text, begin)),
            end=types.Position(line=line0, character=enc.from_char(text, end)),
        )
        return noqa_card, rng
    if analysis.line_is_broken(line0 + 1) is not None:
        return None
    op = operation_at(analysis, line0 + 1, col)
    if op is not None:
        card = render_operation(analysis, op, exact)
        if card:
            op_text = lines[op.line - 1] if op.line <= len(lines) else ""
            rng = types.Range(
                start=types.Position(line=op.line - 1, character=enc.from_char(op_text, op.start)),
                end=types.Position(line=op.line - 1, character=enc.from_char(op_text, op.end)),
            )
            return card, rng
    explanation = analysis.explain_at(line0 + 1, col)
    if explanation is None:
        return None
    tensor_card = render_card(explanation, exact, note_at)
    observed = observed_lines(analysis, explanation)
    if observed:
        expr = explanation.expr if len(explanation.expr) <= 60 else explanation.expr[:57] + "..."
        head = tensor_card or tr("**`{expr}`** — tensor").format(expr=expr)
        tensor_card = "\n".join([head, "", *observed])
    if tensor_card is None:
        return None
    return tensor_card, _node_range(analysis, explanation.node, lines, enc)


def observed_lines(analysis: Analysis, explanation: Explanation) -> list[str]:
    """The card's "seen at run time" line from `stridelens record`, and whether it disagrees
    with the static facts; nothing where no run was recorded for this name at this line."""
    node = explanation.node
    if not isinstance(node, ast.Name) or not analysis.path or analysis.path.endswith(".ipynb"):
        return []
    observed = recorded.observed_at(analysis.path, node.lineno, node.id, text=analysis.source)
    if observed is None:
        return []
    out = [recorded.summary(observed)]
    differs = recorded.disagreements(observed, explanation.to_json()) if explanation.fact is not None else []
    if differs:
        out.append(tr("**the run disagrees with the static facts** ({fields}): please report it").format(
            fields=", ".join(differs)))
    return out
