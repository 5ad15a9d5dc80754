"""The generated parts of the documentation: nothing here is typed by hand.

- the CLI reference, from the argparse parsers the `stridelens` command builds (`cli_reference`);
- the rule reference: one page per rule from the rule's own docs (`rule_pages`, the text of
  `stridelens rule CODE`) and the full table (`rules.catalogue.markdown_table`, linked);
- README.md's short rule table between `<!-- rule-summary:start -->` and `-end -->`
  (`python -m stridelens.server.cli.reference --write README.md`; a test fails when it is stale).

The documentation site (`make docs`, mkdocs.yml) calls these from `docs/hooks.py` at build time,
in English and in Simplified Chinese (the parsers' help texts and the rule docs are translated).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Iterator

from stridelens import i18n
from stridelens.i18n import tr

SUMMARY_START = "<!-- rule-summary:start -->"
SUMMARY_END = "<!-- rule-summary:end -->"
# argparse wraps usage lines at the terminal's width: the reference is made at one fixed width.
USAGE_WIDTH = 96


@contextlib.contextmanager
def language(lang: str) -> Iterator[None]:
    """Build texts in `lang`, then put the language back as it was."""
    before = i18n.language()
    i18n.set_language(lang)
    try:
        yield
    finally:
        i18n.set_language(before)


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def parsers() -> tuple[argparse.ArgumentParser, list[tuple[str, argparse.ArgumentParser]]]:
    """The top-level parser and each sub-command's, in the order `stridelens --help` lists them
    (built in the current language, with argparse's own words in it too)."""
    from stridelens.server.cli import _COMMANDS, argparse_words, build_parser

    argparse_words.install()
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return top, [(name, sub.choices[name]) for name in _COMMANDS]


def _visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)]


def undocumented_options() -> list[str]:
    """`stridelens COMMAND --option` for every option or argument shown without a help text."""
    top, commands = parsers()
    missing = [f"stridelens {a.dest}" for a in _visible(top) if not a.help]
    for name, parser in commands:
        for action in _visible(parser):
            if not action.help:
                missing.append(f"stridelens {name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def _inline(text: str) -> str:
    """Help text as one Markdown table cell: `|` escaped, `<` kept as text outside code spans."""
    parts = text.replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # outside backticks
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = [f"| {tr('option')} | {tr('meaning')} |", "|---|---|"]
    for action in _visible(parser):
        invocation = formatter._format_action_invocation(action)
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{invocation.replace('|', '¦')}` | {_inline(help_text)} |")
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    with _columns(USAGE_WIDTH):
        return parser.format_usage().strip()


def command_markdown(name: str, parser: argparse.ArgumentParser, level: int = 2) -> str:
    lines = [f"{'#' * level} `stridelens {name}`", ""]
    if parser.description:
        lines += [_inline(parser.description).replace("\\|", "|"), ""]
    lines += ["```text", _usage(parser), "```", "", *_options_table(parser), ""]
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    return "\n".join(lines)


def cli_reference(level: int = 2) -> str:
    """Every sub-command's usage, description and options, as `stridelens COMMAND --help` says them."""
    top, commands = parsers()
    lines = ["```text", _usage(top), "```", "", *_options_table(top), ""]
    lines += [command_markdown(name, parser, level) for name, parser in commands]
    return "\n".join(lines)


def rule_pages() -> dict[str, str]:
    """Rule code -> its page: `stridelens rule CODE`'s Markdown (what it does, why, example, fix)."""
    from stridelens.server.rules import ALL_RULES
    from stridelens.server.rules.catalogue import render_rule

    return {code: render_rule(ALL_RULES[code]) + "\n" for code in sorted(ALL_RULES)}


def rule_table(link: str = "{code}.md") -> str:
    """The full rule table (`rules.catalogue.markdown_table`), each code linked to its page."""
    from stridelens.server.rules.catalogue import markdown_table

    return re.sub(r"^\| (SL\d{3}) \|", lambda m: f"| [{m[1]}]({link.format(code=m[1])}) |", markdown_table(), flags=re.M)


def rule_summary() -> str:
    """README's short table: code, name, what it flags, and whether it runs by default."""
    from stridelens.server.rules import ALL_RULES
    from stridelens.server.rules.catalogue import default_state

    rows = [tr("| code | name | what it flags | default |"), "|---|---|---|---|"]
    for code in sorted(ALL_RULES):
        rule = ALL_RULES[code]
        state = re.split("[:：]", default_state(rule))[0]  # always / on / off (the precision: the docs)
        summary = tr(rule.summary).replace("|", "\\|")
        rows.append(f"| {code} | {rule.name} | {summary} | {state} |")
    return "\n".join(rows) + "\n"


def update_summary(text: str) -> str:
    from stridelens.server.rules.catalogue import replace_between

    return replace_between(text, SUMMARY_START, SUMMARY_END, rule_summary())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stridelens.server.cli.reference")
    parser.add_argument("--write", metavar="README", help="rewrite the short rule table between the markers of this file")
    parser.add_argument("--cli", action="store_true", help="print the CLI reference as Markdown")
    parser.add_argument("--lang", default="en", help="the language (zh-CN)")
    args = parser.parse_args(argv)
    with language(args.lang):
        if args.write:
            from stridelens.server.rules.catalogue import rewrite_file

            rewrite_file(args.write, update_summary)
        elif args.cli:
            sys.stdout.write(cli_reference())
        else:
            sys.stdout.write(rule_summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
