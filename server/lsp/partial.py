"""Fast answers after an edit on a large file: analyse only the edited top-level blocks.

The engine analyses whole files; on a 3,000-line file the exact pass plus the rules take
seconds. After an edit inside function or class bodies, or of a module-level statement
other than an import, the other bodies are blanked (lines kept, so positions do not move)
and the rest of the module (imports, module-level code) kept, and only that text is
analysed. Its findings inside the edited blocks, plus the previous exact findings elsewhere
(moved with the edit), are published at once; the whole-file exact pass replaces them when
the user pauses.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from stridelens.server.analysis import Analysis, analyze_source
from stridelens.server.lsp.configuration import Settings
from stridelens.server.lsp.diagnostics import carry_over, changed_block, check
from stridelens.server.lsp.documents import split_lines
from stridelens.server.rules import Finding

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


@dataclass(frozen=True)
class PartialText:
    source: str
    first: int  # 1-based lines of the edited blocks: findings there come from this run
    last: int
    # `closed=True`: the new-text spans (1-based, inclusive) of every block kept whole. They
    # are closed under naming, so there this run's findings are the whole file's (`final`).
    spans: tuple[tuple[int, int], ...] = ()
    final: bool = False
    changed: tuple[int, int, int] = (0, 0, 0)  # `changed_block(old_lines, new_lines)`


@dataclass
class _Block:
    stmt: ast.stmt
    name: str
    lo: int  # 1-based span in the new text, decorators included
    hi: int
    header: int  # the def/class line in the new text


def partial_text(
    old_tree: ast.Module, old_lines: list[str], new_lines: list[str], *, closed: bool = False
) -> PartialText | None:
    """The new text with every top-level def/class body outside the edit blanked; None
    when the edit touches an import, adds or removes lines of module-level code, or changes
    the block structure.

    The blocks the edited code names stay whole too. With `closed`, so does every block
    connected to the edited ones by naming (one names the other, either way), and the result
    is `final`: no code outside those blocks can see the edit, so the findings elsewhere stay
    what they were. None then when the module's own statements or a `global` could carry the
    edit further, or when the edit is in module-level code.

    Uses the previous text's tree (statement spans moved by the edit), so nothing is
    parsed here: on a large file a parse costs more than the partial analysis itself.
    """
    start, old_end, new_end = changed_block(old_lines, new_lines)
    delta = new_end - old_end
    first, last = start + 1, max(old_end, start + 1)  # 1-based, inclusive, in the old text
    edited: list[tuple[int, int]] = []  # spans in the new text
    blocks: list[_Block] = []
    module_statements: list[ast.stmt] = []  # non-import module-level code (unchanged in `closed`)
    edited_blocks: list[_Block] = []
    for stmt in old_tree.body:
        lo = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        hi = stmt.end_lineno or stmt.lineno
        touched = lo <= last and first <= hi
        is_block = isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        shift = delta if lo > last else 0
        if touched:
            if not is_block:
                # A module-level statement (a constant, a call, the `__main__` block): the rest
                # of the module is kept anyway. Not an import (its names reach every body), nor
                # an edit that adds or removes lines (the statements around may change).
                if closed or isinstance(stmt, ast.Import | ast.ImportFrom) or delta != 0 or start + 1 < lo:
                    return None
                edited.append((lo, hi))
                continue
            if start + 1 < lo + 1 or stmt.lineno == hi:
                return None  # the edit starts at or above the header, or changed the header line
            new_hi = hi + delta
            for k in range(stmt.lineno, new_hi):  # the body must stay indented
                line = new_lines[k] if k < len(new_lines) else ""
                if line.strip() and not line[0].isspace() and not line.lstrip().startswith("#"):
                    return None
            edited.append((lo, new_hi))
            block = _Block(stmt, getattr(stmt, "name", ""), lo, new_hi, stmt.lineno)
            blocks.append(block)
            edited_blocks.append(block)
            continue
        if is_block:
            blocks.append(_Block(stmt, getattr(stmt, "name", ""), lo + shift, hi + shift, stmt.lineno + shift))
        elif not isinstance(stmt, ast.Import | ast.ImportFrom):
            module_statements.append(stmt)
    if not edited:
        return None
    names_in = {id(b): _names("\n".join(new_lines[b.lo - 1 : b.hi])) for b in blocks}
    kept = {id(b) for b in edited_blocks}
    # Blocks the edited code names (the model class it builds, a helper it calls) stay whole.
    named: set[str] = set()
    for lo, hi in edited:
        named.update(IDENT.findall("\n".join(new_lines[lo - 1 : hi])))
    kept |= {id(b) for b in blocks if b.name in named}
    if closed:
        if any("inference_mode" in names for names in names_in.values()):
            return None  # an inference region calling the file's code changes every body's views
        kept = _closure(blocks, kept, names_in)
        if not _stays_inside(blocks, kept, names_in, module_statements):
            return None
    keep = list(new_lines)
    for b in blocks:
        if id(b) in kept:
            continue
        if closed:
            # Nothing kept names it: not even a stand-in (interpreting ~200 of them was half
            # of an edit's run on a 3,000-line file).
            keep[b.lo - 1 : b.hi] = [""] * (b.hi - b.lo + 1)
            continue
        for k in range(b.header, b.hi):  # blank the body (0-based index of lines after the header)
            keep[k] = ""
        if b.header != b.hi:
            keep[b.header - 1] = _header(b.stmt, new_lines[b.header - 1])
    spans = tuple(sorted((b.lo, b.hi) for b in blocks if id(b) in kept)) if closed else ()
    return PartialText(
        "\n".join(keep), min(lo for lo, _ in edited), max(hi for _, hi in edited), spans, closed,
        (start, old_end, new_end),
    )


@functools.lru_cache(maxsize=4096)
def _names(text: str) -> frozenset[str]:
    """The identifiers in a block's text (cached: an edit changes one block of hundreds)."""
    return frozenset(IDENT.findall(text))


def _closure(blocks: list[_Block], kept: set[int], names_in: dict[int, frozenset[str]]) -> set[int]:
    """`kept` and every block connected to it by naming, either way."""
    kept = set(kept)
    changed = True
    while changed:
        changed = False
        kept_names = {b.name for b in blocks if id(b) in kept}
        used = set().union(*(names_in[id(b)] for b in blocks if id(b) in kept))
        for b in blocks:
            if id(b) not in kept and (b.name in used or names_in[id(b)] & kept_names):
                kept.add(id(b))
                changed = True
    return kept


def _stays_inside(
    blocks: list[_Block], kept: set[int], names_in: dict[int, frozenset[str]], module_statements: list[ast.stmt]
) -> bool:
    """Can nothing outside the kept blocks see what they do? Not where the module's own code
    names one of them (its values reach every body), where a kept block reads a module name
    that module code binds from a blanked block, or where a body declares `global`."""
    kept_names = {b.name for b in blocks if id(b) in kept}
    blanked_names = {b.name for b in blocks if id(b) not in kept}
    used = set().union(*(names_in[id(b)] for b in blocks if id(b) in kept))
    if "global" in used:
        return False
    for stmt in module_statements:
        # Its names as code reads them (a docstring or `__all__` naming a class reads nothing).
        names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if names & kept_names:
            return False
        if names & blanked_names and names & used:
            return False
    return True


def _header(stmt: ast.stmt, text: str) -> str:
    """A one-line stand-in for a blanked def/class: keeps its name bound."""
    indent = text[: len(text) - len(text.lstrip())]
    name = getattr(stmt, "name", "_")
    if isinstance(stmt, ast.ClassDef):
        return f"{indent}class {name}: pass"
    return f"{indent}def {name}(*args, **kwargs): pass"


# Syntax errors whose place depends on the text after the edited block (the tokenizer goes on).
_READS_ON = ("never closed", "EOF", "unterminated", "triple-quoted", "was not closed")


def final_findings(
    previous: list[Finding],
    previous_analysis: Analysis,
    old_lines: list[str],
    new_lines: list[str],
    part: PartialText,
    analysis: Analysis,
    findings: list[Finding],
    budget_steps: int | None,
) -> list[Finding] | None:
    """The whole file's findings for the new text, from a `closed` partial run (`analysis`,
    `findings`) and the previous text's whole-file ones (`previous`); None where they may
    differ from a whole-file run: either run stopped at its budget or could have (the new
    text's whole run may interpret up to the old one's statements plus this run's), or a
    syntax error of either text may read past its block (an unclosed bracket or string: the
    whole file's parser goes on into the next block, where this run's text is blank). An
    error inside the edited lines is found and repaired alike in both texts: what precedes
    it parses in both."""
    if not part.final or previous_analysis.timed_out or analysis.timed_out:
        return None
    if any(not part.first <= b.line <= part.last or any(k in b.message for k in _READS_ON) for b in analysis.broken):
        return None
    if previous_analysis.broken:
        # The old text's error was repaired on its own line: the blocks it is not in were
        # analysed as usual, and their findings carry over, if it lies in a kept block.
        start, old_end, new_end = part.changed
        delta = new_end - old_end
        for b in previous_analysis.broken:
            line = b.line if b.line <= start else b.line + delta if b.line > old_end else part.first
            if any(k in b.message for k in _READS_ON) or not any(lo <= line <= hi for lo, hi in part.spans):
                return None
    if budget_steps is not None and previous_analysis.steps + analysis.steps > budget_steps:
        return None

    def inside(f: Finding) -> bool:
        return any(lo <= f.line <= hi for lo, hi in part.spans)

    carried = [f for f in carry_over(previous, old_lines, new_lines) if not inside(f)]
    fresh = [f for f in findings if inside(f)]
    return sorted(carried + fresh, key=lambda f: (f.line, f.col, f.code))


def edit_findings(
    previous: Analysis,
    previous_findings: list[Finding],
    old_lines: list[str],
    new_lines: list[str],
    text: str,
    path: str,
    settings: Settings,
    budget_steps: int | None,
    *,
    most_kept: float = 0.5,
) -> tuple[list[Finding], int] | None:
    """The new text's whole-file findings after an edit, from an exact run over only the
    blocks the edit can reach, and the lines that run kept; None where that is not known to
    equal a whole-file run, or where it would keep more than `most_kept` of the file (the
    whole-file pass costs about the same then)."""
    part = partial_text(previous.tree, old_lines, new_lines, closed=True)
    if part is None:
        return None
    kept = sum(hi - lo + 1 for lo, hi in part.spans)
    if kept > most_kept * len(new_lines):
        return None
    analysis = analyze_source(part.source, path, replay=True, budget_steps=budget_steps, file_text=text)
    findings = check(analysis, settings, split_lines(part.source))
    final = final_findings(previous_findings, previous, old_lines, new_lines, part, analysis, findings, budget_steps)
    return None if final is None else (final, kept)
