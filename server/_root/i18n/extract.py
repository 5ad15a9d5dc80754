"""The catalogue's msgids, read from the code: `python -m stridelens.i18n.extract`.

    --check            exit 1 when a .po lacks a msgid of the code, has one the code no
                       longer uses, or a translation whose {placeholders} differ from its msgid
    --update           rewrite each .po: entries in code order, translations kept, new
                       msgids added untranslated, unused ones dropped

The msgids are the literal first arguments of `tr(...)` and `N_(...)` and both of `ntr(...)`
in the stridelens sources, and the rules' documentation (summary, what, why, example, fix), which
the rule modules keep as data and `tr()` at display time.
"""

from __future__ import annotations

import argparse
import ast
import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

from stridelens.i18n import DOMAIN, LANGUAGES, LOCALE_DIR
from stridelens.i18n.po import Entry, parse_po

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the repository's server/ (server/_root/i18n/..)
SOURCE_DIRS = ("server", "inspector")  # the probes mark theirs with a local N_() (target_text.py)
MARKERS = {"tr": 1, "N_": 1, "ntr": 2}


@dataclass
class Msg:
    msgid: str
    plural: str | None = None
    refs: list[str] = field(default_factory=list)


class NotALiteral(ValueError):
    pass


def scan_file(path: Path, shown: str, found: dict[str, Msg], problems: list[str]) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
    for node in calls:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in MARKERS):
            continue
        want = MARKERS[node.func.id]
        args = node.args[:want]
        if any(isinstance(a, (ast.JoinedStr, ast.BinOp)) for a in args):
            problems.append(f"{shown}:{node.lineno}: {node.func.id}() of a built string (use .format() afterwards)")
            continue
        if len(args) < want or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
            continue  # `tr(value)`: a msgid kept as data, marked with N_() or a rule doc
        texts = [str(a.value) for a in args if isinstance(a, ast.Constant)]
        msg = found.setdefault(texts[0], Msg(texts[0], texts[1] if want == 2 else None))
        msg.refs.append(f"{shown}:{node.lineno}")


def code_messages(root: Path = PACKAGE_ROOT) -> tuple[dict[str, Msg], list[str]]:
    """Every msgid of the code, in a stable order, and the calls that are not literal."""
    found: dict[str, Msg] = {}
    problems: list[str] = []
    repo = root.parent
    for folder in SOURCE_DIRS:
        for path in sorted((repo / folder).rglob("*.py")):
            if "__pycache__" not in path.parts:
                scan_file(path, str(path.relative_to(repo)), found, problems)
    from stridelens.server.rules import ALL_RULES  # the docs are data of the rule modules

    for code in sorted(ALL_RULES):
        rule = ALL_RULES[code]
        for part in ("summary", "what", "why", "example", "fix"):  # an example's comments are translated
            text = rule.summary if part == "summary" else getattr(rule.doc, part)
            found.setdefault(text, Msg(text)).refs.append(f"rule {code} {part}")
    return found, problems


def placeholders(text: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError:
        return {"<unbalanced braces>"}


def po_path(language: str) -> Path:
    return LOCALE_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def compare(language: str, messages: dict[str, Msg]) -> list[str]:
    """What is wrong with `language`'s catalogue against the code's msgids."""
    entries = {e.msgid: e for e in parse_po(po_path(language).read_text(encoding="utf-8")) if e.msgid}
    problems = []
    for msgid, msg in messages.items():
        entry = entries.get(msgid)
        if entry is None or not all(entry.msgstr) or entry.fuzzy:
            problems.append(f"{language}: no translation for {msgid!r} ({msg.refs[0]})")
            continue
        for text in entry.msgstr:
            if placeholders(text) != placeholders(msgid):
                problems.append(f"{language}: placeholders differ in the translation of {msgid!r}: {text!r}")
    for msgid in entries:
        if msgid not in messages:
            problems.append(f"{language}: {msgid!r} is in the catalogue but not in the code")
    return problems


def _quote(text: str) -> str:
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{body}"'


def _field(keyword: str, text: str) -> list[str]:
    if len(text) < 70 and "\n" not in text[:-1]:
        return [f"{keyword} {_quote(text)}"]
    # Wrapped as msgfmt and translators' editors write it: an empty first line, then pieces
    # that end after a newline or a space (joined back they are exactly `text`).
    pieces: list[str] = []
    for line in re.findall(r"[^\n]*\n|[^\n]+", text):
        current = ""
        for word in re.findall(r"\S*\s*", line):
            if current and len(current) + len(word) > 76:
                pieces.append(current)
                current = ""
            current += word
        if current:
            pieces.append(current)
    return [f'{keyword} ""', *(_quote(p) for p in pieces)]


HEADER = (
    "Project-Id-Version: stridelens\n"
    "Language-Team: stridelens\n"
    "MIME-Version: 1.0\n"
    "Content-Type: text/plain; charset=UTF-8\n"
    "Content-Transfer-Encoding: 8bit\n"
    "Language: {language}\n"
    "Plural-Forms: nplurals=1; plural=0;\n"
)


def render_po(language: str, messages: dict[str, Msg], old: dict[str, Entry]) -> str:
    lines = [
        f"# stridelens messages, {language}. Terms: docs/glossary.{language.replace('_', '-')}.md",
        "# Regenerate the entries with `python -m stridelens.i18n.extract --update`.",
        'msgid ""',
        'msgstr ""',
        *(_quote(h + "\n") for h in HEADER.format(language=language).splitlines()),
        "",
    ]
    for msgid, msg in messages.items():
        entry = old.get(msgid)
        lines.append("#: " + " ".join(msg.refs[:3]))
        if any(placeholders(msgid)):
            lines.append("#, python-brace-format")
        lines += _field("msgid", msgid)
        if msg.plural is not None:
            lines += _field("msgid_plural", msg.plural)
            strs = entry.msgstr if entry is not None else [""]
            for i, text in enumerate(strs):
                lines += _field(f"msgstr[{i}]", text)
        else:
            lines += _field("msgstr", entry.msgstr[0] if entry is not None and entry.msgstr else "")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stridelens.i18n.extract")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--update", action="store_true")
    args = parser.parse_args(argv)
    messages, problems = code_messages()
    for language in LANGUAGES[1:]:
        if args.update:
            path = po_path(language)
            old = {e.msgid: e for e in parse_po(path.read_text(encoding="utf-8"))} if path.exists() else {}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_po(language, messages, old), encoding="utf-8")
        problems += compare(language, messages)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(messages)} msgids, {len(problems)} problems", file=sys.stderr)
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
