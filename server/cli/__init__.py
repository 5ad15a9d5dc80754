"""The `stridelens` command line: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stridelens import __version__, i18n
from stridelens.i18n import tr
from stridelens.server.cli import argparse_words


def _not_yet(name: str) -> int:
    print(tr("stridelens {command}: not available yet in this version").format(command=name), file=sys.stderr)
    return 2


_COMMANDS = ("explain", "serve", "check", "rule", "record", "inspect")


def _register(commands: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    if name == "explain":
        from stridelens.server.cli import explain_command

        explain_command.register(commands)
    elif name == "serve":
        from stridelens.server.cli import serve_command

        serve_command.register(commands)
    elif name == "check":
        from stridelens.server.cli import check_command

        check_command.register(commands)
    elif name == "rule":
        from stridelens.server.cli import rule_command

        rule_command.register(commands)
    elif name == "record":
        from stridelens.server.cli import record_command

        record_command.register(commands)
    else:
        from stridelens.inspector import cli as inspect_command

        inspect_command.register(commands)
    # Every command takes `--lang` after its name (`stridelens check --lang zh-CN ...`).
    commands.choices[name].add_argument(
        "--lang",
        metavar="LANG",
        help=tr("language of messages: en, zh-CN (default: from LC_ALL / LC_MESSAGES / LANG)"),
    )


def _choose_language(flag: str | None) -> None:
    """`--lang`, else the POSIX locale variables; an unknown `--lang` is said, then English."""
    if flag and i18n.normalize(flag) is None:
        i18n.set_language(i18n.from_environment())
        print(
            tr("stridelens: no messages in {language!r}; available: {available}").format(
                language=flag, available="en, zh-CN"
            ),
            file=sys.stderr,
        )
        i18n.set_language(i18n.ENGLISH)
        return
    i18n.set_language(flag or i18n.from_environment())


def _peek_language(argv: Sequence[str]) -> str | None:
    """The value of `--lang` (before or after the command name; the last one wins, as argparse
    does), read before the parser exists: its help texts and argparse's own words are chosen
    when it is built. Nothing after `--` (a launched script's arguments) counts."""
    found = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--lang="):
            found = arg.split("=", 1)[1]
    return found


def _command_name(argv: Sequence[str]) -> str | None:
    """The first argument that is neither an option nor the value of a leading `--lang`."""
    value_next = False
    for arg in argv:
        if value_next:
            value_next = False
        elif arg == "--lang":
            value_next = True
        elif not arg.startswith("-"):
            return arg
    return None


class _Parser(argparse.ArgumentParser):
    """argparse ends each section heading with an ASCII colon of its own (`options:`); here it is
    the language's colon (`选项：`). The sub-commands' parsers are of this class too."""

    def format_help(self) -> str:
        text = super().format_help()
        colon = tr(": ").rstrip()
        if colon == ":":
            return text
        for group in self._action_groups:
            if group.title:
                text = text.replace(f"\n{group.title}:\n", f"\n{group.title}{colon}\n")
        return text


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a command, only that command's module is imported
    (`stridelens check` in CI should not pay for the inspector's imports)."""
    parser = _Parser(
        prog="stridelens",
        description=tr("See PyTorch's memory model: strides, views, storages, autograd graphs."),
    )
    parser.add_argument("--version", action="version", version=f"stridelens {__version__}",
                        help=tr("show program's version number and exit"))  # argparse's own text is not marked
    parser.add_argument("--lang", dest="lang_before_command", metavar="LANG", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = _command_name(argv or ())
    for name in [first] if first in _COMMANDS else _COMMANDS:
        _register(commands, name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The language first: `--help`, usage errors and the help texts are made in it.
    _choose_language(_peek_language(argv))
    argparse_words.install()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    flag = getattr(args, "lang", None) or args.lang_before_command
    if flag != _peek_language(argv):  # an abbreviated --la, say: argparse's reading decides
        _choose_language(flag)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
