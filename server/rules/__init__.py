"""The rule catalogue (SL101...): one module per rule or small family, each with its docs.

`run_rules(analysis, select=..., ignore=...)` is the one entry point used by the CLI and
the language server.
"""

from __future__ import annotations

from collections.abc import Iterable

from stridelens.server.analysis import Analysis
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit

ALL_RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    ALL_RULES[rule.code] = rule
    return rule


def selected_rules(select: Iterable[str] | None = None, ignore: Iterable[str] | None = None) -> list[Rule]:
    """Rules chosen by code or code prefix (`SL1`, `SL2`, `SL101`)."""
    chosen = []
    sel = list(select) if select else ["SL"]
    ign = list(ignore) if ignore else []
    for code in sorted(ALL_RULES):
        if any(code.startswith(p) for p in sel) and not any(code.startswith(p) for p in ign):
            chosen.append(ALL_RULES[code])
    return chosen


def run_rules(
    analysis: Analysis, select: Iterable[str] | None = None, ignore: Iterable[str] | None = None
) -> list[Finding]:
    findings: list[Finding] = []
    for rule in selected_rules(select, ignore):
        findings.extend(rule.check(analysis))
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return findings


__all__ = [
    "ALL_RULES",
    "Finding",
    "Fix",
    "Rule",
    "RuleDoc",
    "Severity",
    "TextEdit",
    "register",
    "run_rules",
    "selected_rules",
]
