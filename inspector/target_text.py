"""Text the debuggee wrote, shown in the user's language.

The probes run inside the target with the standard library only, so they cannot import
`stridelens.i18n`: they write English, and mark each message with a local `N_()` (an identity
function) whose first argument is the template, filled with `.format()`:
`N_("{layout} tensor: no single strided storage").format(layout=...)`. The extractor reads those
templates as msgids like any other. Here, on the stridelens side, an English text from the target
is matched back against the templates of the probe modules and re-filled in the current language,
its values translated the same way where they are themselves probe texts (`an unnamed tensor`).
A text no template matches (torch's own messages, the user's names) is shown as it came.
"""

from __future__ import annotations

import ast
import re
import string
from functools import cache
from pathlib import Path

from stridelens import i18n
from stridelens.i18n import tr
from stridelens.inspector import probe_parts

# The modules whose source runs in the target (injected or queued by gdb): the probe's parts first.
PROBE_MODULES = (*(Path(f).stem for f in probe_parts.FILES), "grads_probe", "diff_probe", "allocator_probe",
                 "inplace_recorder", "rank_probe", "rank_launcher", "snapshot_boot")
_HERE = Path(__file__).resolve().parent


def probe_msgids() -> list[str]:
    """The `N_("...")` templates of the probe modules, in source order."""
    found: list[str] = []
    for name in PROBE_MODULES:
        path = _HERE / f"{name}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "N_"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and node.args[0].value not in found):
                found.append(node.args[0].value)
    return found


@cache
def _patterns() -> tuple[frozenset[str], tuple[tuple[re.Pattern[str], str], ...]]:
    plain: set[str] = set()
    filled: list[tuple[int, re.Pattern[str], str]] = []
    for msgid in probe_msgids():
        pieces = list(string.Formatter().parse(msgid))
        if all(field is None for _, field, _, _ in pieces):
            plain.add(msgid)
            continue
        regex, literal = "", 0
        for text, field, _spec, _conv in pieces:
            regex += re.escape(text)
            literal += len(text)
            if field is not None:
                regex += f"(?P<{field}>.+?)" if f"(?P<{field}>" not in regex else f"(?P={field})"
        filled.append((literal, re.compile(regex, re.DOTALL), msgid))
    # The most specific template first: "{x} tensor: ..." before a bare "{x}: {y}".
    filled.sort(key=lambda item: -item[0])
    return frozenset(plain), tuple((p, m) for _, p, m in filled)


def from_target(text: str | None) -> str:
    """`text` (English, from the target) in the current language; as it came when no probe
    template matches or the language is English."""
    if text is None:
        return ""
    if i18n.language() == i18n.ENGLISH:
        return text
    return _translate(text, depth=0)


def _translate(text: str, depth: int) -> str:
    plain, filled = _patterns()
    if text in plain:
        return tr(text)
    if depth > 2:
        return text
    for pattern, msgid in filled:
        m = pattern.fullmatch(text)
        if m is not None:
            values = {k: _translate(v, depth + 1) for k, v in m.groupdict().items()}
            return tr(msgid).format(**values)
    return text
