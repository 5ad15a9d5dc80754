"""The rule catalogue (SL101...): one module per rule or small family, each with its docs.

`run_rules(analysis, select=..., ignore=...)` is the one entry point used by the CLI and
the language server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from stridelens.server.analysis import Analysis
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit
from stridelens.server.rules.suppression import filter_suppressed

ALL_RULES: dict[str, Rule] = {}
# Codes `run_rules` reports whatever `select`, `ignore` and noqa comments say (rules/syntax.py).
ALWAYS_REPORTED = frozenset({"SL001"})


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
    analysis: Analysis,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    severity: Mapping[str, Severity] | None = None,
    no_grad_functions: Iterable[str] = (),
) -> list[Finding]:
    """Findings of the selected rules, `# noqa` applied, sorted by position; syntax errors
    (SL001) always.

    `severity` overrides a rule's default severity by code (from `[tool.stridelens.severity]`).
    `no_grad_functions` names functions a framework runs with grad disabled
    (`[tool.stridelens] no-grad-functions`), on top of `grad_mode.NO_GRAD_CONVENTIONS`.
    """
    analysis.no_grad_functions = tuple(no_grad_functions)
    findings: list[Finding] = []
    for rule in selected_rules(select, ignore):
        if rule.code in ALWAYS_REPORTED:
            continue
        try:
            found = rule.check(analysis)
        except RecursionError:  # a pathologically deep expression: skip the rule, not the file
            continue
        level = severity.get(rule.code) if severity else None
        for finding in found:
            if finding.fix is not None and finding.fix.safe != (rule.safe_fix and finding.fix.proven):
                finding = replace(finding, fix=replace(finding.fix, safe=rule.safe_fix and finding.fix.proven))
            if level is not None and finding.severity != level:
                finding = replace(finding, severity=level)
            findings.append(finding)
    findings = filter_suppressed(findings, analysis.lines)
    # Syntax errors (SL001) whatever `select`, `ignore` and noqa comments say: a file Python refuses
    # must not pass. A severity override still applies.
    for code in sorted(ALWAYS_REPORTED):
        level = severity.get(code) if severity else None
        for finding in ALL_RULES[code].check(analysis):
            findings.append(finding if level is None or finding.severity == level else replace(finding, severity=level))
    findings.sort(key=lambda f: (f.line, f.col, f.code, f.end_line, f.end_col))
    return findings


__all__ = [
    "ALL_RULES",
    "ALWAYS_REPORTED",
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


# The catalogue: importing these modules registers their rules (they import `register`).
from stridelens.server.rules import (  # noqa: E402, F401
    api,
    autograd,
    data_attr,
    device_mismatch,
    forward_call,
    grad_scaler,
    inplace_saved,
    layout,
    requires_grad,
    syntax,
    training,
    view_pins,
)
