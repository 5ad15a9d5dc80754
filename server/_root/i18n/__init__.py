"""The message catalogue: English in the code, other languages in gettext `.po` files.

Every user-facing string goes through `tr()` (or `ntr()`) with its English text as the
msgid and named placeholders filled afterwards, so a translation can put them in its own
order: `tr("`{name}` is not contiguous").format(name=...)`. (`tr`, not gettext's usual `_`:
the code base uses `_` as a throwaway name in many functions, which would shadow it; the
extractor in `extract.py` and `xgettext -k tr -k ntr:1,2` both read `tr`.) Translations live in
`locale/<lang>/LC_MESSAGES/stridelens.po` next to this file and are compiled in memory the
first time a language is chosen (`po.py` says why there is no `.mo` in the repository).

One language per process: the CLI sets it from `--lang` or the environment, the language
server from `initialize` or its settings. JSON and SARIF output stay English whatever the
language (they are the machine interface; `english()` scopes that).
"""

from __future__ import annotations

import contextlib
import gettext
import os
import threading
import unicodedata
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

from stridelens.i18n.po import compile_mo, parse_po

DOMAIN = "stridelens"
ENGLISH = "en"
LANGUAGES = (ENGLISH, "zh_CN")  # the catalogues that exist (English is the source)
LOCALE_DIR = Path(__file__).resolve().parent / "locale"

_lock = threading.Lock()
_english = gettext.NullTranslations()
_active: gettext.NullTranslations = _english
_language = ENGLISH


def normalize(tag: str | None) -> str | None:
    """`zh-CN`, `zh_CN.UTF-8`, `zh-Hans`, `zh` -> "zh_CN"; `en_US`, `C`, `POSIX` -> "en";
    None for empty or unknown tags."""
    if not tag:
        return None
    base = tag.strip().split(".", 1)[0].split("@", 1)[0].replace("-", "_")
    lowered = base.lower()
    if lowered in ("c", "posix") or lowered == "en" or lowered.startswith("en_"):
        return ENGLISH
    if lowered in ("zh", "zh_cn", "zh_hans", "zh_sg", "zh_hans_cn", "zh_hans_sg"):
        return "zh_CN"
    return None


def from_environment(environ: Mapping[str, str] | None = None) -> str:
    """The language POSIX locale variables ask for: the first of LC_ALL, LC_MESSAGES, LANG
    that is set decides (as for every other program); English when it names no catalogue."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:
            return normalize(value) or ENGLISH
    return ENGLISH


@cache
def translations(language: str) -> gettext.NullTranslations:
    """The compiled catalogue of `language` ("zh_CN"); English (the msgids) for "en"."""
    if language == ENGLISH:
        return _english
    import io

    path = LOCALE_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"
    mo = compile_mo(parse_po(path.read_text(encoding="utf-8"), str(path)))
    return gettext.GNUTranslations(io.BytesIO(mo))


def set_language(tag: str | None) -> str:
    """Make `tag` (any spelling `normalize` reads) the process's language; returns the
    catalogue chosen ("en" for None or unknown tags)."""
    global _active, _language
    language = normalize(tag) or ENGLISH
    with _lock:
        _active, _language = translations(language), language
    return language


def language() -> str:
    return _language


@contextlib.contextmanager
def english() -> Iterator[None]:
    """English for the duration (JSON/SARIF output): the language chosen before comes back."""
    before = _language
    set_language(ENGLISH)
    try:
        yield
    finally:
        set_language(before)


def tr(message: str) -> str:
    """`message` in the current language (the English msgid when it has no translation)."""
    return _active.gettext(message)


def N_(message: str) -> str:
    """Marks a msgid kept as data and translated where it is shown (`tr(value)` there)."""
    return message


def ntr(singular: str, plural: str, n: int) -> str:
    return _active.ngettext(singular, plural, n)


def columns(text: str) -> int:
    """Terminal columns `text` takes: CJK characters (and most emoji) take two, so aligned
    text output counts these, not characters."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def translated(message: str, language: str) -> str | None:
    """The catalogue's own entry for `message` in `language`, None where it has none."""
    if language == ENGLISH:
        return message
    entries: dict[str, str] = getattr(translations(language), "_catalog", {})
    return entries.get(message)


__all__ = ["ENGLISH", "LANGUAGES", "N_", "columns", "english", "from_environment", "language", "normalize", "ntr", "set_language", "tr"]
