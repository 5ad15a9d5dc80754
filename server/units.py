"""Byte counts as people read them: binary units, as torch's memory reports print them."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    """`1536` -> "1.5 KiB"; None -> "—"."""
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # (not reached)


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 element`, `2 elements` (with thousands separators: `12,800 elements`)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
