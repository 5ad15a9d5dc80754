"""Jupyter notebooks as one program: code cells in order, IPython-only lines blanked.

`check` (and the language server) analyse the program; positions map back to a cell and a
line inside it. Fixes are applied to the program and written back cell by cell with
nbformat, so outputs, metadata and cell ids stay as they were.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from stridelens.server.rules.base import Finding

NOTEBOOK_SUFFIX = ".ipynb"

# Lines only IPython understands: `%magic`, `!shell`, `?help`/`name?`, `x = !ls`, `y = %time f()`.
_IPYTHON_LINE = re.compile(r"^\s*(?:[%!?]|[\w.]+\s*=\s*[%!])|^[^#'\"]*\?\s*$")


class NotebookError(Exception):
    """A notebook that cannot be read: one line saying why (nothing is ever written then)."""


@dataclass
class CellText:
    number: int  # 1-based, over all cells as the notebook shows them (markdown included)
    lines: list[str]  # the cell's source as written
    blanked: set[int] = field(default_factory=set)  # 0-based lines that are IPython syntax
    json_line: int | None = None  # 1-based line in the .ipynb text of the cell's first source line
    json_lines_per_line: bool = False  # the source is a JSON list: one text line per source line


@dataclass
class NotebookProgram:
    """The code cells of a notebook as one Python source, and the way back."""

    path: str
    notebook: Any  # nbformat.NotebookNode
    cells: list[CellText]
    source: str
    # Program line (1-based) -> (index into `cells`, 0-based line inside the cell).
    line_map: list[tuple[int, int]]

    def locate(self, line: int) -> tuple[CellText, int]:
        """The cell and the 1-based line inside it of program line `line`."""
        index, inner = self.line_map[min(max(line, 1), len(self.line_map)) - 1] if self.line_map else (0, 0)
        return self.cells[index], inner + 1

    def json_line(self, cell_number: int, line: int) -> int:
        """The line of the .ipynb file holding line `line` of cell `cell_number` (for SARIF
        regions); 1 when the file is not laid out as Jupyter writes it."""
        cell = next((c for c in self.cells if c.number == cell_number), None)
        if cell is None or cell.json_line is None:
            return 1
        return cell.json_line + (line - 1 if cell.json_lines_per_line else 0)

    def cells_after(self, fixed_source: str) -> dict[int, list[str]]:
        """New source lines of each cell `fixed_source` changes (by index into `cells`).

        Raises NotebookError when the fixed program no longer lines up with the cells (a fix
        that adds or removes lines); IPython lines are always kept as written."""
        fixed = fixed_source.split("\n")
        if fixed and fixed[-1] == "":
            fixed.pop()
        if len(fixed) != len(self.line_map):
            raise NotebookError(f"{self.path}: a fix changes the number of lines; not applied to a notebook")
        changed: dict[int, list[str]] = {}
        for (index, inner), text in zip(self.line_map, fixed, strict=True):
            cell = self.cells[index]
            if inner in cell.blanked or cell.lines[inner] == text:
                continue
            changed.setdefault(index, list(cell.lines))[inner] = text
        return changed


def python_lines(cell_lines: list[str]) -> tuple[list[str], set[int]]:
    """A cell's lines with IPython-only ones blanked (same count), and which were blanked."""
    whole_cell_magic = "\n".join(cell_lines).lstrip().startswith("%%")
    blanked = {i for i, line in enumerate(cell_lines) if whole_cell_magic or _IPYTHON_LINE.match(line)}
    return ["" if i in blanked else line for i, line in enumerate(cell_lines)], blanked


def read_notebook(path: str) -> NotebookProgram:
    """The notebook at `path` as a program; NotebookError (one line) when it cannot be."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as err:
        raise NotebookError(f"{path}: cannot read: {err.strerror or err}") from err
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise NotebookError(f"{path}: not UTF-8 (byte {err.start}); a notebook is UTF-8 JSON") from err
    return notebook_from_text(path, text)


def notebook_from_text(path: str, text: str) -> NotebookProgram:
    import nbformat

    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise NotebookError(f"{path}: not a valid notebook: JSON error at line {err.lineno}, column {err.colno}: {err.msg}") from err
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        raise NotebookError(f"{path}: not a notebook (no list of cells)")
    major = data.get("nbformat")
    if major != 4:
        raise NotebookError(
            f"{path}: nbformat {major} notebook; stridelens reads nbformat 4 "
            "(convert it: jupyter nbconvert --to notebook --nbformat 4)"
        )
    for number, cell in enumerate(data["cells"], start=1):
        source = cell.get("source") if isinstance(cell, dict) else None
        if not (isinstance(source, str) or (isinstance(source, list) and all(isinstance(s, str) for s in source))):
            raise NotebookError(f"{path}: cell {number} has a source that is not text ({type(source).__name__})")
    try:
        notebook = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        nbformat.validate(notebook)
    except Exception as err:  # nbformat raises several kinds: one line for all
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise NotebookError(f"{path}: not a valid nbformat 4 notebook: {first}") from err
    return _program(path, notebook, text)


def _program(path: str, notebook: Any, text: str) -> NotebookProgram:
    cells: list[CellText] = []
    lines: list[str] = []
    line_map: list[tuple[int, int]] = []
    positions = _source_positions(text)
    for number, cell in enumerate(notebook.cells, start=1):
        if cell.cell_type != "code":
            continue
        source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        cell_lines = source.split("\n")
        entry = CellText(number, cell_lines)
        if number - 1 < len(positions):
            entry.json_line, entry.json_lines_per_line = positions[number - 1]
        python, entry.blanked = python_lines(cell_lines)
        lines.extend(python)
        line_map.extend((len(cells), inner) for inner in range(len(cell_lines)))
        cells.append(entry)
    return NotebookProgram(path, notebook, cells, "\n".join(lines) + ("\n" if lines else ""), line_map)


def _source_positions(text: str) -> list[tuple[int, bool]]:
    """For each cell in order, the .ipynb line of its first source line, and whether the
    source is a list written one element per line (as Jupyter and nbformat write it)."""
    out: list[tuple[int, bool]] = []
    rows = text.split("\n")
    for number, row in enumerate(rows, start=1):
        stripped = row.strip()
        if stripped.startswith('"source":'):
            rest = stripped[len('"source":') :].strip()
            if rest.startswith("[") and not rest.startswith("[]"):
                out.append((number + 1, True) if rest == "[" else (number, False))
            else:
                out.append((number, False))
    return out


def write_cells(program: NotebookProgram, changed: dict[int, list[str]]) -> None:
    """Write the changed cells' sources back; everything else in the file as it was."""
    import nbformat

    code_cells = [c for c in program.notebook.cells if c.cell_type == "code"]
    for index, new_lines in changed.items():
        code_cells[index].source = "\n".join(new_lines)
    nbformat.validate(program.notebook)
    with open(program.path, "w", encoding="utf-8", newline="\n") as handle:
        nbformat.write(program.notebook, handle)


def finding_in_cell(program: NotebookProgram, finding: Finding) -> Finding:
    """`finding` (program lines) as the user sees it: its cell, lines inside the cell. A fix
    whose edits leave the finding's cell is dropped (it cannot be shown as one cell edit)."""
    cell, line = program.locate(finding.line)
    end_cell, end_line = program.locate(finding.end_line)
    if end_cell is not cell:
        end_line, end_col = line, len(cell.lines[line - 1]) + 1
    else:
        end_col = finding.end_col
    fix = finding.fix
    if fix is not None:
        edits = []
        for edit in fix.edits:
            start, start_line = program.locate(edit.line)
            stop, stop_line = program.locate(edit.end_line)
            if start is not cell or stop is not cell:
                fix = None
                break
            edits.append(replace(edit, line=start_line, end_line=stop_line))
        else:
            fix = replace(fix, edits=tuple(edits))
    return replace(finding, cell=cell.number, line=line, end_line=end_line, end_col=end_col, fix=fix)
