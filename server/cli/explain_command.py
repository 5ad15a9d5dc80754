"""`stridelens explain FILE:LINE:COL ...`: what the analysis knows of an expression."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(commands: Any) -> None:
    sub = commands.add_parser("explain", help="explain the tensor expression at FILE:LINE:COL")
    sub.add_argument("positions", nargs="+", metavar="FILE:LINE:COL")
    sub.add_argument("--format", choices=("text", "json"), default="text")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print("stridelens explain: engine not wired yet", file=sys.stderr)
    return 2
