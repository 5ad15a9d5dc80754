"""Fast answers after an edit on a large file: analyse only the edited top-level blocks.

The engine analyses whole files; on a 3,000-line file the exact pass plus the rules take
seconds. After an edit inside function or class bodies, the other bodies are blanked
(lines kept, so positions do not move) and the rest of the module (imports, module-level
code) kept, and only that text is analysed. Its findings inside the edited blocks, plus
the previous exact findings elsewhere (moved with the edit), are published at once; the
whole-file exact pass replaces them when the user pauses.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from stridelens.server.lsp.diagnostics import changed_block

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


@dataclass(frozen=True)
class PartialText:
    source: str
    first: int  # 1-based lines of the edited blocks: findings there come from this run
    last: int


def partial_text(old_tree: ast.Module, old_lines: list[str], new_lines: list[str]) -> PartialText | None:
    """The new text with every top-level def/class body outside the edit blanked; None
    when the edit touches module-level code or changes the block structure.

    Uses the previous text's tree (statement spans moved by the edit), so nothing is
    parsed here: on a large file a parse costs more than the partial analysis itself.
    """
    start, old_end, new_end = changed_block(old_lines, new_lines)
    delta = new_end - old_end
    first, last = start + 1, max(old_end, start + 1)  # 1-based, inclusive, in the old text
    keep = list(new_lines)
    edited: list[tuple[int, int]] = []  # spans in the new text
    for stmt in old_tree.body:
        lo = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        hi = stmt.end_lineno or stmt.lineno
        touched = lo <= last and first <= hi
        is_block = isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if touched:
            if not is_block or start + 1 < lo + 1 or stmt.lineno == hi:
                return None  # module-level code, a decorator or the header line itself changed
            new_hi = hi + delta
            for k in range(stmt.lineno, new_hi):  # the body must stay indented
                line = new_lines[k] if k < len(new_lines) else ""
                if line.strip() and not line[0].isspace() and not line.lstrip().startswith("#"):
                    return None
            edited.append((lo, new_hi))
            continue
        if not is_block:
            continue
        shift = delta if lo > last else 0
        header = stmt.lineno + shift
        for k in range(header, hi + shift):  # blank the body (0-based index of lines after the header)
            keep[k] = ""
        if stmt.lineno != hi:
            keep[header - 1] = _header(stmt, new_lines[header - 1])
    if not edited:
        return None
    # Blocks the edited code names (the model class it builds, a helper it calls) stay whole.
    names: set[str] = set()
    for lo, hi in edited:
        names.update(IDENT.findall("\n".join(new_lines[lo - 1 : hi])))
    for stmt in old_tree.body:
        name = getattr(stmt, "name", None)
        if name in names and isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            lo = stmt.lineno
            hi = stmt.end_lineno or lo
            if hi < first:
                keep[lo - 1 : hi] = new_lines[lo - 1 : hi]
            elif lo > last:
                keep[lo - 1 + delta : hi + delta] = new_lines[lo - 1 + delta : hi + delta]
    return PartialText("\n".join(keep), min(lo for lo, _ in edited), max(hi for _, hi in edited))


def _header(stmt: ast.stmt, text: str) -> str:
    """A one-line stand-in for a blanked def/class: keeps its name bound."""
    indent = text[: len(text) - len(text.lstrip())]
    name = getattr(stmt, "name", "_")
    if isinstance(stmt, ast.ClassDef):
        return f"{indent}class {name}: pass"
    return f"{indent}def {name}(*args, **kwargs): pass"
