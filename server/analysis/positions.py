"""Column conversions between `ast` (UTF-8 bytes), Python strings and LSP (UTF-16).

`ast` reports `col_offset` in UTF-8 bytes; the CLI speaks 1-based characters; LSP
speaks UTF-16 code units. Every conversion goes through the line's text.
"""

from __future__ import annotations


def byte_to_char(line: str, byte_col: int) -> int:
    """UTF-8 byte offset within `line` -> character (code point) offset."""
    if line.isascii():
        return byte_col
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def char_to_byte(line: str, char_col: int) -> int:
    if line.isascii():
        return char_col
    return len(line[:char_col].encode("utf-8"))


def char_to_utf16(line: str, char_col: int) -> int:
    if line.isascii():
        return char_col
    prefix = line[:char_col]
    return char_col + sum(1 for c in prefix if ord(c) > 0xFFFF)


def utf16_to_char(line: str, utf16_col: int) -> int:
    if line.isascii():
        return utf16_col
    units = 0
    for i, c in enumerate(line):
        if units >= utf16_col:
            return i
        units += 2 if ord(c) > 0xFFFF else 1
    return len(line)


def byte_to_utf16(line: str, byte_col: int) -> int:
    return char_to_utf16(line, byte_to_char(line, byte_col))


def utf16_to_byte(line: str, utf16_col: int) -> int:
    return char_to_byte(line, utf16_to_char(line, utf16_col))
