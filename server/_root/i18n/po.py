"""Read a gettext `.po` file and compile it to `.mo` bytes, for `gettext.GNUTranslations`.

The catalogue ships as `.po` only and is compiled when a language is first asked for (a few
milliseconds, once per process): an installed wheel, an editable checkout and the VS Code
extension's bundled copy then read the very file translators edit, and no build step can be
forgotten. Only what our catalogue uses is supported: `msgctxt`, `msgid`, `msgid_plural`,
`msgstr`/`msgstr[N]`, continuation lines, `#` comments and the `fuzzy` flag (fuzzy entries
are skipped, as `msgfmt` does).
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass, field


@dataclass
class Entry:
    msgid: str
    msgstr: list[str] = field(default_factory=list)
    msgid_plural: str | None = None
    msgctxt: str | None = None
    fuzzy: bool = False
    line: int = 0  # where the entry starts in the .po, for error messages


class PoError(ValueError):
    pass


def _unquote(text: str, path: str, line: int) -> str:
    text = text.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise PoError(f"{path}:{line}: expected a quoted string, got {text!r}")
    # A .po string uses C escapes (\n \t \" \\), which a Python string literal reads the same.
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError) as err:
        raise PoError(f"{path}:{line}: bad string {text!r}: {err}") from None
    if not isinstance(value, str):
        raise PoError(f"{path}:{line}: bad string {text!r}")
    return value


def parse_po(text: str, path: str = "<po>") -> list[Entry]:
    """The entries of a .po file, the header (msgid "") included."""
    entries: list[Entry] = []
    fields: dict[str, str] = {}
    fuzzy = False
    start = 0
    current: str | None = None

    def flush() -> None:
        nonlocal fields, fuzzy, current
        if "msgid" in fields:
            plural = sorted((k for k in fields if k.startswith("msgstr[")), key=lambda k: int(k[7:-1]))
            strs = [fields[k] for k in plural] if plural else [fields.get("msgstr", "")]
            entries.append(
                Entry(fields["msgid"], strs, fields.get("msgid_plural"), fields.get("msgctxt"), fuzzy, start)
            )
        elif fields:
            raise PoError(f"{path}:{start}: an entry without msgid")
        fields, fuzzy, current = {}, False, None

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            flush()
            continue
        if line.startswith("#"):
            if "msgid" in fields and current is not None and current.startswith("msgstr"):
                flush()
            if line.startswith("#,") and "fuzzy" in (flag.strip() for flag in line[2:].split(",")):
                fuzzy = True
            if not fields:
                start = number
            continue
        if line.startswith('"'):
            if current is None:
                raise PoError(f"{path}:{number}: a continuation line outside an entry")
            fields[current] += _unquote(line, path, number)
            continue
        keyword, _, rest = line.partition(" ")
        if keyword not in ("msgctxt", "msgid", "msgid_plural", "msgstr") and not (
            keyword.startswith("msgstr[") and keyword.endswith("]")
        ):
            raise PoError(f"{path}:{number}: unknown keyword {keyword!r}")
        if keyword in ("msgctxt", "msgid") and "msgid" in fields and current != "msgctxt":
            flush()
        if not fields:
            start = number
        if keyword in fields:
            raise PoError(f"{path}:{number}: {keyword} twice in one entry")
        fields[keyword] = _unquote(rest, path, number)
        current = keyword
    flush()
    return entries


def compile_mo(entries: list[Entry]) -> bytes:
    """GNU .mo bytes (little endian, no hash table) of the translated, non-fuzzy entries."""
    pairs: dict[bytes, bytes] = {}
    for entry in entries:
        if entry.msgid and (entry.fuzzy or not any(entry.msgstr)):
            continue  # untranslated or fuzzy: gettext falls back to the English msgid
        key = entry.msgid if entry.msgid_plural is None else entry.msgid + "\0" + entry.msgid_plural
        if entry.msgctxt is not None:
            key = entry.msgctxt + "\x04" + key
        pairs[key.encode("utf-8")] = "\0".join(entry.msgstr).encode("utf-8")
    keys = sorted(pairs)
    count = len(keys)
    header_size = 7 * 4
    originals_at = header_size
    translations_at = originals_at + count * 8
    data_at = translations_at + count * 8
    table_o: list[tuple[int, int]] = []
    table_t: list[tuple[int, int]] = []
    blob = b""
    for raw in keys:
        table_o.append((len(raw), data_at + len(blob)))
        blob += raw + b"\0"
    for raw in keys:
        value = pairs[raw]
        table_t.append((len(value), data_at + len(blob)))
        blob += value + b"\0"
    out = struct.pack("<7I", 0x950412DE, 0, count, originals_at, translations_at, 0, data_at)
    out += b"".join(struct.pack("<2I", n, at) for n, at in table_o)
    out += b"".join(struct.pack("<2I", n, at) for n, at in table_t)
    return out + blob
