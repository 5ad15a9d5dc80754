"""Byte counts as people read them: binary units, as torch's memory reports print them."""

from __future__ import annotations


def human_bytes(n: float | None) -> str:
    """`1536` -> "1.5 KiB"; None -> "—"."""
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
