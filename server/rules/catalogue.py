"""The rule catalogue as text: `python -m stridelens.server.rules.catalogue --markdown`.

The README's rule table is generated from the rules' own metadata by this module (between
`<!-- rules:start -->` and `<!-- rules:end -->`); `--write README.md` updates it in place. Its
"default" column says which rules run when nothing is selected, and for the others the
precision a fresh audit measured (`rules.OFF_BY_DEFAULT`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from stridelens import i18n
from stridelens.i18n import N_, tr
from stridelens.server.rules import ALL_RULES, ALWAYS_REPORTED, Rule, Severity

START = "<!-- rules:start -->"
END = "<!-- rules:end -->"


# The severities as the user reads them (the JSON/SARIF values stay these English words).
SEVERITY_NAMES = {
    Severity.ERROR: N_("error"),
    Severity.WARNING: N_("warning"),
    Severity.INFORMATION: N_("information"),
    Severity.HINT: N_("hint"),
}


def severity_name(severity: Severity) -> str:
    return tr(SEVERITY_NAMES[severity])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def default_state(rule: Rule) -> str:
    """The table's "default" cell: always / on / off with the precision measured."""
    if rule.code in ALWAYS_REPORTED:
        return tr("always")
    if rule.default:
        return tr("on")
    return tr("off: precision {precision}").format(precision=tr(rule.precision or "?"))


def off_by_default_note(rule: Rule) -> str | None:
    """What `stridelens rule` says of a rule that is off by default; None for the others."""
    if rule.default:
        return None
    return tr(
        "Off by default (precision {precision} on fresh real code, {audit}: a rule is on by default "
        "only at 0.9 or more). Enable it with `--select {code}` (or a prefix of it such as `{prefix}`, "
        "or `ALL`; `--select` replaces the default selection), or with `select = [\"{code}\"]` in "
        "`[tool.stridelens]` of pyproject.toml."
    ).format(precision=tr(rule.precision or "?"), audit=rule.measured_in or "?", code=rule.code, prefix=rule.code[:3])


def markdown_table() -> str:
    rows = [
        tr("| code | name | what it flags | severity | default | quick fix |"),
        "|---|---|---|---|---|---|",
    ]
    for code in sorted(ALL_RULES):
        rule = ALL_RULES[code]
        fix = _first_sentence(tr(rule.doc.fix))
        if rule.safe_fix:
            fix += tr(" (safe: applied by `--fix`)")
        summary, severity = _cell(tr(rule.summary)), severity_name(rule.severity)
        state = _cell(default_state(rule))
        rows.append(f"| {code} | {rule.name} | {summary} | {severity} | {state} | {_cell(fix)} |")
    return "\n".join(rows) + "\n"


def _first_sentence(text: str) -> str:
    if "。" in text:  # Chinese: the first sentence ends at the first full stop
        return text.split("。")[0] + "。"
    head = text.split(". ")[0].rstrip(".")
    return head + "."


def render_rule(rule: Rule) -> str:
    summary = tr(rule.summary)
    note = off_by_default_note(rule)
    lines = [
        f"# {rule.code} {rule.name}",
        "",
        tr("Severity: {severity}. {summary}.").format(
            severity=severity_name(rule.severity), summary=summary[:1].upper() + summary[1:]
        ),
        "",
        *([note, ""] if note else []),
        tr("## What it does"),
        tr(rule.doc.what),
        "",
        tr("## Why it matters"),
        tr(rule.doc.why),
        "",
        tr("## Example"),
        "```python",
        tr(rule.doc.example),
        "```",
        "",
        tr("## Fix"),
        tr(rule.doc.fix),
        "",
        tr(
            "Suppress on one line with `# noqa: {code}`; project-wide with "
            '`ignore = ["{code}"]` in `[tool.stridelens]` of pyproject.toml.'
        ).format(code=rule.code)
        if rule.code not in ALWAYS_REPORTED
        else tr("Always reported: neither `# noqa` nor `select` or `ignore` hides it."),
    ]
    return "\n".join(lines)


def replace_between(text: str, start_marker: str, end_marker: str, body: str, what: str = "") -> str:
    """`text` with `body` between its two markers (README's generated tables)."""
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"{what}no {start_marker} ... {end_marker} markers")
    return text[: start + len(start_marker)] + "\n" + body + text[end:]


def rewrite_file(path: str, update: Callable[[str], str]) -> None:
    """Write `update(text)` back to the file at `path` when it changes the text."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    new = update(text)
    if new != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(new)


def update_readme(text: str) -> str:
    return replace_between(text, START, END, markdown_table(), "README has ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stridelens.server.rules.catalogue")
    parser.add_argument("--markdown", action="store_true", help="print the rule table as Markdown")
    parser.add_argument("--write", metavar="README", help="rewrite the table between the markers of this file")
    parser.add_argument("--lang", default="en", help="the table's language (zh-CN for README.zh-CN.md)")
    args = parser.parse_args(argv)
    i18n.set_language(args.lang)
    if args.write:
        rewrite_file(args.write, update_readme)
        return 0
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
