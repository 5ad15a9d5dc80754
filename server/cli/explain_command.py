"""`stridelens explain FILE:LINE:COL ...`: what the analysis knows of an expression.

Several positions are answered in one process (torch is imported once); JSON output is
one object for one position, an array (with `null` where nothing is known) for several.
In a notebook a position names its cell, as `check` prints it: `nb.ipynb:cell 4:1:6`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import textwrap
from typing import Any

from stridelens import i18n
from stridelens.i18n import ntr, tr
from stridelens.server.analysis import (
    Analysis,
    Explanation,
    SourceError,
    TensorFact,
    analyze_file,
    analyze_source,
    recorded,
)
from stridelens.server.analysis.facts import format_sizes
from stridelens.server.analysis.storage_picture import render_storage_picture


class PositionError(Exception):
    pass


def register(commands: Any) -> None:
    sub = commands.add_parser(
        "explain",
        help=tr("explain the tensor expression at FILE:LINE:COL (1-based line and column)"),
        description=tr("Show what static analysis knows of the expression at each position: "
        "shape, dtype, device, strides, storage offset, contiguity, view-of, grad facts."),
    )
    sub.add_argument(
        "positions", nargs="+", metavar="FILE:LINE:COL",
        help=tr("1-based line and column; in a notebook, of a line in a cell: NB.ipynb:cell N:LINE:COL"),
    )
    sub.add_argument(
        "--format", choices=("text", "json"), default="text",
        help=tr("text for people, json for tools (the schema of DESIGN.md; always in English)"),
    )
    sub.add_argument(
        "--verbose", action="store_true",
        help=tr("say on stderr, per file, whether torch was imported to replay ops on meta tensors"),
    )
    sub.set_defaults(handler=run)


def parse_position(spec: str) -> tuple[str, int, int]:
    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise PositionError(tr("{spec}: expected FILE:LINE:COL").format(spec=spec))
    path, line_text, col_text = parts
    try:
        line, col = int(line_text), int(col_text)
    except ValueError:
        raise PositionError(tr("{spec}: LINE and COL must be numbers").format(spec=spec)) from None
    if line < 1 or col < 1:
        raise PositionError(tr("{spec}: LINE and COL are 1-based").format(spec=spec))
    return path, line, col


_CELL = re.compile(r"^(?P<path>.+\.ipynb):cell (?P<cell>\d+)$")


def _notebook_line(spec: str, path: str, cell_number: int, line: int, cache: dict[str, Any]) -> tuple[Analysis, int]:
    """The analysis of the notebook's program, and the program line of `line` in the cell."""
    from stridelens.server.notebook import NotebookError, read_notebook

    if path not in cache:
        try:
            program = read_notebook(path)
        except NotebookError as err:
            raise PositionError(str(err)) from None
        cache[path] = (program, analyze_source(program.source, path, replay=False))
    program, analysis = cache[path]
    index = next((i for i, c in enumerate(program.cells) if c.number == cell_number), None)
    if index is None:
        raise PositionError(tr("{spec}: cell {cell} is not a code cell of the notebook").format(spec=spec, cell=cell_number))
    cell = program.cells[index]
    if line > len(cell.lines):
        raise PositionError(
            tr("{spec}: line {line} is past the end of cell {cell} ({count} lines)").format(
                spec=spec, line=line, cell=cell_number, count=len(cell.lines)
            )
        )
    program_line = program.line_map.index((index, line - 1)) + 1
    if analysis.replay_matters_at(program_line):
        exact_key = f"{path}\0exact"
        if exact_key not in cache:
            cache[exact_key] = (program, analyze_source(program.source, path, replay=True))
        analysis = cache[exact_key][1]
    return analysis, program_line


def explain_position(spec: str, cache: dict[str, Analysis], notebooks: dict[str, Any] | None = None) -> Explanation | None:
    path, line, col = parse_position(spec)
    cell = _CELL.match(path)
    if cell is not None:
        analysis, line = _notebook_line(spec, cell.group("path"), int(cell.group("cell")), line, {} if notebooks is None else notebooks)
    else:
        if path.endswith(".ipynb"):
            raise PositionError(
                tr("{spec}: a notebook position names its cell, as check prints it: {path}:cell N:LINE:COL").format(
                    spec=spec, path=path
                )
            )
        if path not in cache:
            try:
                # Symbolic first: torch is imported only where a replay can change the answer.
                cache[path] = analyze_file(path, replay=False)
            except SourceError as err:
                raise PositionError(str(err)) from None
        analysis = cache[path]
        if analysis.replay_matters_at(line):
            exact_key = f"{path}\0exact"
            if exact_key not in cache:
                cache[exact_key] = analyze_source(analysis.source, path, replay=True)
            analysis = cache[exact_key]
    if line > len(analysis.lines):
        raise PositionError(
            tr("{spec}: line {line} is past the end of the file ({count} lines)").format(
                spec=spec, line=line, count=len(analysis.lines)
            )
        )
    text = analysis.lines[line - 1]
    if col > len(text):
        raise PositionError(
            tr("{spec}: column {col} is past the end of line {line} ({count} characters)").format(
                spec=spec, col=col, line=line, count=len(text)
            )
        )
    broken = analysis.line_is_broken(line)
    if broken is not None:
        raise PositionError(tr("{spec}: syntax error on this line: {error}").format(spec=spec, error=broken.message))
    explanation = analysis.explain_at(line, col - 1)
    if explanation is None:
        raise PositionError(tr("{spec}: not on an expression").format(spec=spec))
    return explanation


def render_text(spec: str, explanation: Explanation) -> str:
    fact = explanation.fact
    lines = [f"{spec}  `{explanation.expr}`"]
    if fact is None:
        if explanation.items:
            count = len(explanation.items)
            lines.append(ntr("  a tuple of {n} tensor:", "  a tuple of {n} tensors:", count).format(n=count))
            for i, item in enumerate(explanation.items):
                item_shape = tuple(item.shape) if item is not None and item.shape is not None else "?"
                lines.append(tr("    [{index}] shape {shape}").format(index=i, shape=item_shape))
        else:
            lines.append(tr("  nothing known: not a tensor the analysis can follow here"))
        return "\n".join(lines)

    def show(value: Any) -> str:
        if value is None:
            return tr("unknown")
        if isinstance(value, bool):
            return tr("yes") if value else tr("no")
        if isinstance(value, tuple):
            return str(value)
        return str(value)

    shape, strides = fact.display_shape, fact.display_strides
    rows = [
        (tr("shape"), format_sizes(shape, pretty=False) if shape is not None else tr("unknown")),
        ("dtype", show(fact.dtype)),
        (tr("device"), show(fact.device)),
        (tr("strides"), format_sizes(strides, pretty=False) if strides is not None else tr("unknown")),
        (tr("storage offset"), show(fact.display_offset)),
        (tr("contiguous"), show(fact.stated_contiguous)),
    ]
    if fact.assumes_text:
        rows.append((tr("assumes"), tr(", ").join(fact.assumes_text)))
    if fact.view_of:
        rows.append((tr("view of"), tr("`{base}` (shares its storage)").format(base=fact.view_of)))
    elif fact.is_view is False:
        rows.append((tr("memory"), tr("its own storage")))
    if fact.storage_numel is not None:
        size = ntr("{n} element", "{n} elements", fact.storage_numel).format(n=f"{fact.storage_numel:,}")
        if fact.storage_nbytes is not None:
            size += tr(", {n} bytes").format(n=f"{fact.storage_nbytes:,}")
        rows.append((tr("storage size"), size))
    grad = show(fact.stated_requires_grad)
    if fact.grad_assumed is not None and fact.stated_requires_grad is not None:
        grad += tr(" (when autograd is on: `{condition}`)").format(condition=fact.grad_assumed)
    rows.append(("requires_grad", grad))
    if fact.stated_carries_graph:
        rows.append(("autograd", tr("carries a graph")))
    if fact.detached_from:
        rows.append((tr("detached from"), f"`{fact.detached_from}`"))
    width = max(i18n.columns(k) for k, _ in rows)
    lines += [f"  {k}{' ' * (width - i18n.columns(k))}  {v}" for k, v in rows]
    picture = render_storage_picture(fact, width=78)  # the card is indented by 2: 80 columns
    if picture:
        lines.append("")
        lines += [f"  {row}" for row in picture]
    if fact.provenance:
        lines.append(tr("  why:"))
        lines += [f"    - {note}" for note in fact.notes()]
    return "\n".join(lines)


def _observed(spec: str, explanation: Explanation) -> recorded.Observed | None:
    """What `stridelens record` saw the name at this position hold after its line."""
    path = parse_position(spec)[0]
    node = explanation.node
    if _CELL.match(path) or not isinstance(node, ast.Name):
        return None
    return recorded.observed_at(path, node.lineno, node.id)


def run(args: argparse.Namespace) -> int:
    if args.format == "json":
        with i18n.english():  # the machine interface: the same answers in every locale
            return _run(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    cache: dict[str, Analysis] = {}
    notebooks: dict[str, Any] = {}
    answers: list[dict[str, Any] | None] = []
    failed = False
    texts: list[str] = []
    for spec in args.positions:
        try:
            explanation = explain_position(spec, cache, notebooks)
        except PositionError as err:
            print(tr("stridelens explain: {error}").format(error=err), file=sys.stderr)
            failed = True
            answers.append(None)
            continue
        if explanation is None:
            answers.append(None)
            continue
        answer = explanation.answer()
        observed = _observed(spec, explanation)
        if observed is not None:
            # A separate object: the static fields stay what the analysis proved.
            answer = {**(answer or TensorFact().to_json(explanation.expr)), "observed": observed.to_json()}
        answers.append(answer)
        text = render_text(spec, explanation)
        if observed is not None:
            text += "\n" + textwrap.fill(recorded.summary(observed), width=80, initial_indent="  ",
                                         subsequent_indent="    ", break_on_hyphens=False)
        texts.append(text)
    if getattr(args, "verbose", False):
        for path in sorted({key.split("\0")[0] for key in [*cache, *notebooks]}):
            exact = f"{path}\0exact" in cache or f"{path}\0exact" in notebooks
            message = (
                tr("{path}: replayed on meta tensors (torch imported)") if exact
                else tr("{path}: symbolic analysis only (torch not imported)")
            )
            print(message.format(path=path), file=sys.stderr)
    if args.format == "json":
        if len(args.positions) == 1:
            if not failed:
                print(json.dumps(answers[0], indent=2))
        else:
            print(json.dumps(answers, indent=2))
    elif texts:
        print("\n\n".join(texts))
    return 2 if failed else 0
