"""The rule catalogue (SL101...): one module per rule or small family, each with its docs.

`run_rules(analysis, select=..., ignore=...)` is the one entry point used by the CLI and
the language server.

Default selection: a rule is on by default only where a fresh hand audit (real code no test
or earlier audit used) measured its precision at 0.9 or more; the others are listed in
`OFF_BY_DEFAULT` with the precision measured and run only when `select` names them. A code,
a prefix (`SL2`) or `ALL` in `select` selects what it matches, off-by-default rules included:
naming a family is asking for it. SL001 (syntax error) is always reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from stridelens.i18n import N_
from stridelens.server.analysis import Analysis
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit
from stridelens.server.rules.suppression import filter_suppressed

ALL_RULES: dict[str, Rule] = {}
# Codes `run_rules` reports whatever `select`, `ignore` and noqa comments say (rules/syntax.py).
ALWAYS_REPORTED = frozenset({"SL001"})

# Rules off by default (issue 30): precision TP / (TP + FP) below 0.9 on the fresh hand audit
# that measured it; `select` turns them on. code -> (precision, the audit). A rule comes back on
# by default only when a later fresh audit measures it at 0.9 or more.
FRESH_AUDIT_2026_12_03 = "bench/audits/fresh-audit-2026-12-03.md"
FRESH_AUDIT_2026_12_07F = "bench/audits/fresh-audit-2026-12-07f.md"
OFF_BY_DEFAULT: dict[str, tuple[str, str]] = {
    "SL104": ("0.00 (0/5)", FRESH_AUDIT_2026_12_03),
    "SL105": ("0.00 (0/4)", FRESH_AUDIT_2026_12_03),
    "SL201": ("0.14 (2/14)", FRESH_AUDIT_2026_12_03),
    "SL202": (N_("0.00 (0/1, and 1 unsure)"), FRESH_AUDIT_2026_12_03),
    "SL204": ("0.32 (14/44)", FRESH_AUDIT_2026_12_03),
    "SL205": ("0.00 (0/4)", FRESH_AUDIT_2026_12_03),
    "SL206": ("0.79 (27/34)", FRESH_AUDIT_2026_12_03),
    "SL210": ("0.63 (12/19)", FRESH_AUDIT_2026_12_03),
    "SL211": ("0.00 (0/6)", FRESH_AUDIT_2026_12_03),
    "SL216": ("0.00 (0/4)", FRESH_AUDIT_2026_12_07F),
    "SL217": ("0.00 (0/4)", FRESH_AUDIT_2026_12_03),
}


def register(rule: Rule) -> Rule:
    if rule.code in OFF_BY_DEFAULT:
        precision, audit = OFF_BY_DEFAULT[rule.code]
        rule = replace(rule, default=False, precision=precision, measured_in=audit)
    ALL_RULES[rule.code] = rule
    return rule


def default_rules() -> list[Rule]:
    """The rules that run when nothing is selected."""
    return [ALL_RULES[code] for code in sorted(ALL_RULES) if ALL_RULES[code].default]


def selected_rules(select: Iterable[str] | None = None, ignore: Iterable[str] | None = None) -> list[Rule]:
    """Rules chosen by code or code prefix (`SL1`, `SL2`, `SL101`; `ALL` is every rule), minus
    those `ignore` names. An empty or absent `select` is the default selection (the rules on by
    default); a selected prefix or `ALL` includes the off-by-default rules it matches."""
    sel = ["SL" if p.upper() == "ALL" else p.upper() for p in select] if select else []
    ign = ["SL" if p.upper() == "ALL" else p.upper() for p in ignore] if ignore else []
    chosen = []
    for code in sorted(ALL_RULES):
        rule = ALL_RULES[code]
        wanted = any(code.startswith(p) for p in sel) if sel else rule.default
        if wanted and not any(code.startswith(p) for p in ign):
            chosen.append(rule)
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
    "FRESH_AUDIT_2026_12_03",
    "OFF_BY_DEFAULT",
    "Finding",
    "Fix",
    "Rule",
    "RuleDoc",
    "Severity",
    "TextEdit",
    "default_rules",
    "register",
    "run_rules",
    "selected_rules",
]


# The catalogue: importing these modules registers their rules (they import `register`).
# One rule per module, in a folder per concern (layout, autograd, training, api).
from stridelens.server.rules import syntax  # noqa: E402, F401
from stridelens.server.rules.api import tensor_from_tensors, typed_storage  # noqa: E402, F401
from stridelens.server.rules.autograd import (  # noqa: E402, F401
    anomaly_detection_on,
    backward_twice,
    data_attr,
    detach_shares_storage,
    graph_kept_alive,
    inplace_on_saved,
    module_requires_grad,
    requires_grad_on_non_leaf,
    retain_grad,
    retain_graph,
)
from stridelens.server.rules.layout import (  # noqa: E402, F401
    noncontiguous_into_module,
    reshape_copies,
    view_noncontiguous,
    view_pins_storage,
    write_through_view,
)
from stridelens.server.rules.training import (  # noqa: E402, F401
    clip_before_unscale,
    clip_grad_order,
    device_mismatch,
    forward_called_directly,
    inference_without_no_grad,
    missing_zero_grad,
)
