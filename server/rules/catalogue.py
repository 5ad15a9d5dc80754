"""The rule catalogue as text: `python -m stridelens.server.rules.catalogue --markdown`.

The README's rule table is generated from the rules' own metadata by this module (between
`<!-- rules:start -->` and `<!-- rules:end -->`); `--write README.md` updates it in place.
"""

from __future__ import annotations

import argparse
import sys

from stridelens.server.rules import ALL_RULES, Rule

START = "<!-- rules:start -->"
END = "<!-- rules:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table() -> str:
    rows = [
        "| code | name | what it flags | severity | quick fix |",
        "|---|---|---|---|---|",
    ]
    for code in sorted(ALL_RULES):
        rule = ALL_RULES[code]
        fix = _first_sentence(rule.doc.fix)
        if rule.safe_fix:
            fix += " (safe: applied by `--fix`)"
        rows.append(f"| {code} | {rule.name} | {_cell(rule.summary)} | {rule.severity.value} | {_cell(fix)} |")
    return "\n".join(rows) + "\n"


def _first_sentence(text: str) -> str:
    head = text.split(". ")[0].rstrip(".")
    return head + "."


def render_rule(rule: Rule) -> str:
    lines = [
        f"# {rule.code} {rule.name}",
        "",
        f"Severity: {rule.severity.value}. {rule.summary[:1].upper() + rule.summary[1:]}.",
        "",
        "## What it does",
        rule.doc.what,
        "",
        "## Why it matters",
        rule.doc.why,
        "",
        "## Example",
        "```python",
        rule.doc.example,
        "```",
        "",
        "## Fix",
        rule.doc.fix,
        "",
        f"Suppress on one line with `# noqa: {rule.code}`; project-wide with "
        f'`ignore = ["{rule.code}"]` in `[tool.stridelens]` of pyproject.toml.',
    ]
    return "\n".join(lines)


def update_readme(text: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {START} ... {END} markers")
    return text[: start + len(START)] + "\n" + markdown_table() + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stridelens.server.rules.catalogue")
    parser.add_argument("--markdown", action="store_true", help="print the rule table as Markdown")
    parser.add_argument("--write", metavar="README", help="rewrite the table between the markers of this file")
    args = parser.parse_args(argv)
    if args.write:
        with open(args.write, encoding="utf-8") as handle:
            text = handle.read()
        new = update_readme(text)
        if new != text:
            with open(args.write, "w", encoding="utf-8") as handle:
                handle.write(new)
        return 0
    sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
