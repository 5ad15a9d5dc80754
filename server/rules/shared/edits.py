"""Where a finding points and what a fix changes: `ast` byte columns converted to the
1-based character ranges of `Finding`, the source text of a node, and the text edits the
fixes are built from."""

from __future__ import annotations

import ast

from stridelens.server.analysis import Analysis
from stridelens.server.rules.base import Finding, Fix, Rule, TextEdit
from stridelens.server.rules.shared.ast_index import Range


def node_range(analysis: Analysis, node: ast.AST) -> Range:
    line = getattr(node, "lineno", 1)
    end_line = getattr(node, "end_lineno", None) or line
    col = analysis.char_col(line, getattr(node, "col_offset", 0))
    end_col = analysis.char_col(end_line, getattr(node, "end_col_offset", None) or 0)
    return line, col + 1, end_line, end_col + 1


def attr_name_range(analysis: Analysis, node: ast.Attribute) -> Range:
    """The range of the attribute name itself (`view` in `x.t().view(-1)`)."""
    end_line = node.end_lineno or node.lineno
    end_byte = node.end_col_offset or 0
    start_byte = end_byte - len(node.attr.encode("utf-8"))
    return (
        end_line,
        analysis.char_col(end_line, start_byte) + 1,
        end_line,
        analysis.char_col(end_line, end_byte) + 1,
    )


def dot_attr_range(analysis: Analysis, node: ast.Attribute) -> Range:
    """From the `.` before the attribute name to its end (`.view`), when on one line."""
    line, col, end_line, end_col = attr_name_range(analysis, node)
    text = analysis.lines[line - 1] if 0 < line <= len(analysis.lines) else ""
    i = col - 2  # 0-based index just before the name
    while i >= 0 and text[i] in " \t":
        i -= 1
    if i >= 0 and text[i] == ".":
        return line, i + 1, end_line, end_col
    return line, col, end_line, end_col


def call_from_attr_range(analysis: Analysis, call: ast.Call) -> Range:
    """`.view(-1)` of `x.t().view(-1)`: from the method's dot to the end of the call."""
    assert isinstance(call.func, ast.Attribute)
    line, col, _, _ = dot_attr_range(analysis, call.func)
    _, _, end_line, end_col = node_range(analysis, call)
    return line, col, end_line, end_col


def make_finding(
    analysis: Analysis, rule: Rule, where: Range, message: str, fix: Fix | None = None
) -> Finding:
    line, col, end_line, end_col = where
    return Finding(analysis.path, line, col, end_line, end_col, rule.code, message, rule.severity, fix)


def insert_at(line: int, col: int, text: str) -> TextEdit:
    return TextEdit(line, col, line, col, text)


def replace_range(where: Range, text: str) -> TextEdit:
    return TextEdit(where[0], where[1], where[2], where[3], text)


def segment(analysis: Analysis, node: ast.AST) -> str:
    try:
        return analysis.segment(node)
    except Exception:  # noqa: BLE001 - ast.unparse of an odd node
        return "?"


def short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def append_edit(analysis: Analysis, expr: ast.expr, suffix: str) -> list[TextEdit]:
    """Edits turning `expr` into `expr<suffix>` (wrapping it in parentheses when needed)."""
    line, col, end_line, end_col = node_range(analysis, expr)
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return [insert_at(end_line, end_col, suffix)]
    return [insert_at(line, col, "("), insert_at(end_line, end_col, ")" + suffix)]


def line_indent(analysis: Analysis, line: int) -> str:
    text = analysis.lines[line - 1] if 0 < line <= len(analysis.lines) else ""
    return text[: len(text) - len(text.lstrip())]


def wrap_statement_edit(analysis: Analysis, stmt: ast.stmt, header: str) -> TextEdit | None:
    """Edit wrapping a simple statement alone on its lines in `header:` (a `with` block)."""
    end_line = stmt.end_lineno or stmt.lineno
    first = analysis.lines[stmt.lineno - 1]
    indent = line_indent(analysis, stmt.lineno)
    if first[len(indent) :].startswith(("@",)) or len(first) - len(first.lstrip()) != analysis.char_col(
        stmt.lineno, stmt.col_offset
    ):
        return None  # not alone at the start of its line (e.g. `x = 1; y = f()`)
    last = analysis.lines[end_line - 1]
    tail = last[analysis.char_col(end_line, stmt.end_col_offset or 0) :].strip()
    if tail and not tail.startswith("#"):
        return None
    body = analysis.lines[stmt.lineno - 1 : end_line]
    unit = "    "
    new = [f"{indent}{header}:"] + [unit + text if text.strip() else text for text in body]
    return TextEdit(stmt.lineno, 1, end_line, len(last) + 1, "\n".join(new))


