"""A monospace picture of the part of its storage a tensor reads, for a given width.

Two forms, chosen by what would show:

- a **grid** for a small storage: the storage in rows of one of the tensor's strides, each
  cell the number of the tensor element (row-major) that reads it, so a transpose or a step
  slice shows as a pattern;

      storage 12 × float32 (48 B) in rows of 4; numbers: the order this tensor reads
         0  3  6  9
         1  4  7 10
         2  5  8 11
      offset 0, strides (1, 4)

- a **bar** drawn to scale for a large one: every cell is the same share of the storage, so
  a small view of a huge storage is a mark at its true position.

      storage ▕░░░░░░░░░░░░░░░░░░░░░░░░░░░░█░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░▏
      reads 8.0 KiB of 48.8 MiB (0.02%) from element 5,120,000, strides (1,)

Every line fits `width` columns. Shared by `stridelens explain` and the hover card.
"""

from __future__ import annotations

import re

from stridelens.i18n import columns, ntr, tr
from stridelens.server.analysis.facts import TensorFact
from stridelens.server.units import human_bytes

# The largest view whose storage positions are listed one by one (beyond: its span).
MAX_ENUMERATE = 1 << 16
GRID_MAX_ROWS = 8
USED, FREE, SPREAD = "█", "░", "▒"


def render_storage_picture(fact: TensorFact, width: int = 78) -> list[str]:
    """The picture's lines (each at most `width` columns), or [] when the layout is unknown."""
    if fact.shape is None or fact.strides is None or fact.storage_offset is None or fact.storage_numel is None:
        return []
    shape, strides = tuple(fact.shape), tuple(fact.strides)
    numel = 1
    for size in shape:
        numel *= size
    if numel == 0 or fact.storage_numel <= 0 or any(s < 0 for s in strides):
        return []
    grid = _grid(fact, shape, strides, width)
    return grid if grid else _bar(fact, shape, strides, numel, width)


def positions_read(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> list[int] | None:
    """Storage index of each element, in the tensor's row-major order; None when too many."""
    count = 1
    for size in shape:
        count *= size
    if count > MAX_ENUMERATE:
        return None
    positions = [offset]
    for size, stride in zip(shape, strides, strict=True):
        positions = [p + i * stride for p in positions for i in range(size)]
    return positions


def span_of(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> tuple[int, int]:
    """First and last storage index the tensor reads (non-negative strides)."""
    last = offset + sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True) if size > 0)
    return offset, last


def bar_cells(first: int, last: int, storage_numel: int, cells: int) -> tuple[int, int]:
    """The cells holding storage indices `first` and `last`, each cell an equal share."""
    return first * cells // storage_numel, min(cells - 1, last * cells // storage_numel)


def _grid(fact: TensorFact, shape: tuple[int, ...], strides: tuple[int, ...], width: int) -> list[str]:
    total = fact.storage_numel or 0
    if total > GRID_MAX_ROWS * 24:
        return []
    order = positions_read(shape, strides, fact.storage_offset or 0)
    if order is None:
        return []
    reader: dict[int, int] = {}
    repeated = False
    for number, position in enumerate(order):
        if position in reader:
            repeated = True
        else:
            reader[position] = number
    cell = len(str(len(order) - 1)) + 1
    # Rows of one of the tensor's strides (largest first), so each row is one step of it.
    candidates = sorted({s for size, s in zip(shape, strides, strict=True) if size > 1 and 1 < s < total}, reverse=True)
    candidates += [total]
    row = next(
        (r for r in candidates if -(-total // r) <= GRID_MAX_ROWS and 2 + r * cell <= width),
        None,
    )
    if row is None:
        return []
    dtype = fact.dtype or "?"
    size = f"{total} × {dtype}" + (f" ({human_bytes(fact.storage_nbytes)})" if fact.storage_nbytes is not None else "")
    rows_of = tr(" in rows of {n}").format(n=row) if row < total else ""
    header = tr("storage {size}{rows}; numbers: the order this tensor reads").format(size=size, rows=rows_of)
    if columns(header) > width:
        header = tr("storage {size}{rows}").format(size=size, rows=rows_of)
    lines = [_clip(header, width)]
    for start in range(0, total, row):
        cells = [str(reader[i]).rjust(cell) if i in reader else "·".rjust(cell) for i in range(start, min(start + row, total))]
        lines.append("  " + "".join(cells))
    footer = tr("offset {offset}, strides {strides}").format(offset=fact.storage_offset, strides=strides)
    if repeated:
        footer += tr("; some elements are read more than once")
    lines += _wrap(footer, width)
    return lines


def _bar(fact: TensorFact, shape: tuple[int, ...], strides: tuple[int, ...], numel: int, width: int) -> list[str]:
    total = fact.storage_numel or 0
    label, close = tr("storage ▕"), "▏"
    cells = max(8, width - columns(label) - len(close))
    first, last = span_of(shape, strides, fact.storage_offset or 0)
    last = min(last, total - 1)
    order = positions_read(shape, strides, fact.storage_offset or 0)
    marks = [FREE] * cells
    read: int | None
    if order is not None:
        unique = set(order)
        for position in unique:
            if position < total:
                marks[position * cells // total] = USED
        read = len(unique)
    else:
        # Too many to list: the span is marked; solid only when the tensor reads all of it.
        lo, hi = bar_cells(first, last, total, cells)
        dense = last - first + 1 == numel
        for index in range(lo, hi + 1):
            marks[index] = USED if dense else SPREAD
        read = numel if dense else None
    element = fact.element_size
    used = human_bytes(read * element) if read is not None and element else (_elements(read) if read is not None else None)
    whole = human_bytes(total * element) if element else _elements(total)
    share = f" ({_percent(read, total)})" if read is not None else ""
    if used is not None:
        what = tr("reads {used} of {whole}{share}").format(used=used, whole=whole, share=share)
    else:  # the tensor's own size: `numel` elements, wherever they lie in the span
        own = _elements(numel) + (f" ({human_bytes(numel * element)})" if element else "")
        what = tr("reads {size} spread over {whole}").format(size=own, whole=whole)
    footer = tr("{what} from element {first}, strides {strides}").format(what=what, first=f"{first:,}", strides=strides)
    return [f"{label}{''.join(marks)}{close}", *_wrap(footer, width)]


def _percent(part: int, whole: int) -> str:
    """`100%`, `48%` (never rounded up to a whole it is not), `2.5%`, `0.13%`, `<0.01%`."""
    if part >= whole:
        return "100%"
    share = 100 * part / whole
    if share >= 10:
        return f"{int(share)}%"
    return f"{share:.2g}%" if share >= 0.01 else "<0.01%"


def _elements(n: int) -> str:
    return ntr("{n} element", "{n} elements", n).format(n=f"{n:,}")


def _clip(text: str, width: int) -> str:
    """The longest start of `text` within `width` terminal columns."""
    while columns(text) > width:
        text = text[:-1]
    return text


_WORD = re.compile(r"\S*\([^()]*\)\S*|\S+")


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` columns, broken at spaces: a number or a stride tuple
    is never cut (the hover read "strides (64, 25…" for (64, 256, 1)); the rest of a line is
    indented by two. A run of text wider than a line is broken at the last column that fits."""
    lines: list[str] = []
    line = ""
    for word in _WORD.findall(text):  # a parenthesised tuple is one word
        joined = f"{line} {word}" if line else word
        if columns(joined) <= width or not line:
            line = joined
            continue
        lines.append(line)
        line = "  " + word
    lines.append(line)
    out: list[str] = []
    for x in lines:  # a run wider than a line (text without spaces, as Chinese is) breaks at a column
        while columns(x) > width:
            head = _clip(x, width)
            out.append(head)
            x = "  " + x[len(head):]
        out.append(x)
    return out
