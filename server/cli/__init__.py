"""The `stridelens` command line: one sub-command per module in this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stridelens import __version__


def _not_yet(name: str) -> int:
    print(f"stridelens {name}: not available yet in this version", file=sys.stderr)
    return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stridelens",
        description="See PyTorch's memory model: strides, views, storages, autograd graphs.",
    )
    parser.add_argument("--version", action="version", version=f"stridelens {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    from stridelens.server.cli import explain_command, serve_command

    explain_command.register(commands)
    serve_command.register(commands)
    from stridelens.server.cli import check_command, rule_command

    check_command.register(commands)
    rule_command.register(commands)
    from stridelens.inspector import cli as inspect_cli

    inspect_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
