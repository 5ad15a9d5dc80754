"""A small monospace picture of the storage window a tensor reads.

    storage  0 1 2 3 4 5 6 7 8 9 10 11     (12 x float32 = 48 B)
    reads    · · · · · █ █ · · █ █ ·       offset 5, strides (4, 1)

Shared by `stridelens explain` and the hover card.
"""

from __future__ import annotations

from stridelens.server.analysis.facts import TensorFact

MAX_CELLS = 48
MAX_ENUMERATE = 1 << 16


def elements_read(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, limit: int) -> set[int] | None:
    """Storage indices the view touches below `limit`; None when too many to list."""
    count = 1
    for s in shape:
        count *= s
    if count == 0:
        return set()
    if count > MAX_ENUMERATE:
        return None
    positions = {offset}
    for size, stride in zip(shape, strides, strict=False):
        positions = {p + i * stride for p in positions for i in range(size)}
    return {p for p in positions if p < limit}


def render_storage_window(fact: TensorFact, max_cells: int = MAX_CELLS) -> list[str]:
    """Two aligned rows (storage indices, elements read), or [] when the layout is unknown."""
    if (
        fact.shape is None
        or fact.strides is None
        or fact.storage_offset is None
        or fact.storage_numel is None
    ):
        return []
    numel = fact.storage_numel
    shown = min(numel, max_cells)
    read = elements_read(fact.shape, fact.strides, fact.storage_offset, shown)
    if read is None:
        return []
    width = len(str(shown - 1)) if shown else 1
    index_row = " ".join(str(i).rjust(width) for i in range(shown))
    read_row = " ".join(("█" if i in read else "·").rjust(width) for i in range(shown))
    more = f" … +{numel - shown} more" if numel > shown else ""
    size = f"{numel} x {fact.dtype or '?'}"
    if fact.storage_nbytes is not None:
        size += f" = {fact.storage_nbytes:,} B"
    return [
        f"storage  {index_row}{more}   ({size})",
        f"reads    {read_row}   offset {fact.storage_offset}, strides {tuple(fact.strides)}",
    ]
