"""`stridelens rule SL101` prints a rule's documentation; `stridelens rule --all` lists them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from stridelens.i18n import tr


def register(commands: Any) -> None:
    sub = commands.add_parser(
        "rule",
        help=tr("show a rule's documentation (`stridelens rule SL101`, `stridelens rule --all`)"),
        description=tr("Print the documentation of a rule: what it does, why it matters, an example and the fix."),
    )
    sub.add_argument("code", nargs="?", help=tr("a rule code (SL101) or name (view-noncontiguous)"))
    sub.add_argument("--all", action="store_true", help=tr("list every rule"))
    sub.add_argument("--format", choices=("text", "json"), default="text", help=tr(
        "text for people; json for tools (the rule's fields, always in English)"))
    sub.set_defaults(handler=run)


def _rule_json(rule: Any) -> dict[str, Any]:
    """The machine interface: English in every locale (the docs are kept in English)."""
    return {
        "code": rule.code,
        "name": rule.name,
        "severity": rule.severity.value,
        "summary": rule.summary,
        "what": rule.doc.what,
        "why": rule.doc.why,
        "example": rule.doc.example,
        "fix": rule.doc.fix,
        "safe_fix": rule.safe_fix,
        # Whether it runs when nothing is selected; for an off-by-default rule, the precision a
        # fresh audit measured on real code and that audit.
        "default": rule.default,
        "precision": rule.precision,
        "measured_in": rule.measured_in,
    }


def run(args: argparse.Namespace) -> int:
    from stridelens.server.rules import ALL_RULES
    from stridelens.server.rules.catalogue import render_rule, severity_name

    if args.all:
        rules = [ALL_RULES[c] for c in sorted(ALL_RULES)]
        if args.format == "json":
            print(json.dumps([_rule_json(r) for r in rules], indent=2))
        else:
            width = max(len(r.name) for r in rules)
            for r in rules:
                severity = severity_name(r.severity)
                off = "" if r.default else tr(" (off by default: precision {precision})").format(precision=tr(r.precision or "?"))
                print(f"{r.code}  {r.name.ljust(width)}  {severity:<11}  {tr(r.summary)}{off}")
        return 0
    if not args.code:
        print(tr("stridelens rule: give a rule code (e.g. SL101) or --all"), file=sys.stderr)
        return 2
    wanted = args.code.strip()
    rule = ALL_RULES.get(wanted.upper()) or next((r for r in ALL_RULES.values() if r.name == wanted.lower()), None)
    if rule is None:
        print(tr("stridelens rule: unknown rule {rule!r} (see `stridelens rule --all`)").format(rule=wanted), file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(_rule_json(rule), indent=2))
    else:
        print(render_rule(rule))
    return 0
