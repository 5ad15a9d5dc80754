"""Reports that fit the terminal: the width (`COLUMNS`, the terminal's, 80 when neither is known,
no limit with `--wide`), tables that leave out their least essential columns rather than cut
cells, findings that keep their indent when they wrap, and no trailing spaces."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterable
from typing import IO, Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from stridelens.i18n import tr

DEFAULT_WIDTH = 80  # stdout is not a terminal and COLUMNS is not set
WIDE = 10_000  # --wide: nothing is left out or wrapped


def width(wide: bool = False, stream: Any = None) -> int:
    if wide:
        return WIDE
    cols = os.environ.get("COLUMNS", "")
    if cols.strip().isdigit() and int(cols) > 0:
        return int(cols)
    stream = sys.stdout if stream is None else stream
    try:
        if stream.isatty():
            return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    except (AttributeError, ValueError, OSError):
        pass
    return DEFAULT_WIDTH


_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$")


def strip_line(line: str) -> str:
    """`line` without trailing blanks (also blanks before the closing style codes of a line)."""
    while True:
        out = _TRAILING.sub(r"\1", line)
        if out == line:
            return out
        line = out


class StripTrailing:
    """A text file that writes each line without its trailing blanks (rich pads table rows to
    the table's width)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        if lines:
            self.out.write("".join(strip_line(line) + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.out.write(strip_line(self.pending))
            self.pending = ""
        self.out.flush()

    def isatty(self) -> bool:
        return bool(self.out.isatty())

    def fileno(self) -> int:
        return self.out.fileno()


def stdout_console(wide: bool = False) -> Console:
    """The console reports are printed on: `width()` columns, no trailing blanks."""
    out = StripTrailing(sys.stdout)
    return Console(file=out, width=width(wide), soft_wrap=False)  # type: ignore[arg-type]


class Fit:
    """A table that, wider than the space it is given, leaves out columns in `drop` order (the
    least essential first) until it fits, and says which (`--wide` shows them)."""

    def __init__(self, table: Table, drop: Iterable[str]) -> None:
        self.table = table
        self.drop = list(drop)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        t = self.table
        dropped: list[str] = []
        unbounded = options.update(width=WIDE)  # a table's measure is clamped to the width it is given
        empty = [str(c.header) for c in t.columns[1:] if all(_blank(x) for x in c._cells)]
        for header in [*empty, *(h for h in self.drop if h not in empty)]:
            if Measurement.get(console, unbounded, t).maximum <= options.max_width:
                break
            col = next((c for c in t.columns if c.header == header), None)
            if col is None:
                continue
            t.columns.remove(col)
            for i, c in enumerate(t.columns):
                c._index = i
            dropped.append(str(header))
        yield t
        if dropped:
            yield Text(tr("(left out to fit {width} columns: {columns}; --wide shows them)").format(
                width=options.max_width, columns=", ".join(dropped)), style="dim")


def _blank(cell: Any) -> bool:
    return (isinstance(cell, str) and not cell.strip()) or (isinstance(cell, Text) and not cell.plain.strip())


def bullet(marker: Any, *parts: Any) -> Table:
    """`marker` then the text, which wraps under itself (a hanging indent), not under the marker."""
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(Text.assemble(marker) if isinstance(marker, tuple) else marker, Text.assemble(*parts))
    return grid
