"""SL207 anomaly-detection-on: `set_detect_anomaly(True)` / `detect_anomaly()` left in code."""

from __future__ import annotations

import ast
import re

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity, TextEdit
from stridelens.server.rules.shared.ast_index import (
    dotted,
    enclosing_stmt,
    index_of,
    torch_path,
    walk,
)
from stridelens.server.rules.shared.edits import line_indent, make_finding, node_range
from stridelens.server.rules.shared.guards import guarding_tests

_ANOMALY_SET = ("torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly")
_ANOMALY_CTX = ("torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly")


# Words of a debug switch, and the roots of configuration objects (`args.debug`,
# `config.detect_anomaly`, `cfg.TRAIN.CHECK_NAN`, `os.environ.get("DEBUG")`).
_FLAG_WORDS = re.compile(r"debug|anomal|detect|sanity|check|verbose|flag|strict|profil|diagnos", re.IGNORECASE)
_CONFIG_ROOTS = frozenset(
    {"args", "arguments", "opt", "opts", "options", "config", "cfg", "conf", "configs", "hparams", "hp", "flags",
     "FLAGS", "settings", "params", "environ", "getenv", "cli", "parsed"}
)  # fmt: skip


def _flag_condition(test: ast.expr) -> bool:
    """`test` reads a configuration value or a debug switch: a name or attribute path with a
    word like debug / anomaly / check in it, rooted at args / config / cfg / opt / flags /
    os.environ, or any part of it so rooted."""
    for node in walk(test):
        path = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if path is None:
            continue
        parts = path.split(".")
        if any(part in _CONFIG_ROOTS or part.lower() in _CONFIG_ROOTS for part in parts):
            return True
        if _FLAG_WORDS.search(path):
            return True
    return False


def _flag_guarded(analysis: Analysis, call: ast.Call) -> bool:
    """Under a condition on a configuration value or debug flag (`if args.debug:`, `with
    detect_anomaly() if cfg.anomaly else nullcontext():`), or after an early exit on one."""
    return any(_flag_condition(test) for test, _ in guarding_tests(index_of(analysis), call))


def check_anomaly_detection(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    for call in [*index.by_name.get("set_detect_anomaly", ()), *index.by_name.get("detect_anomaly", ())]:
        path = torch_path(analysis, call.func)
        if path in _ANOMALY_SET:
            flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                continue  # `set_detect_anomaly(args.detect_anomaly)`: the flag decides
        elif path not in _ANOMALY_CTX:
            continue
        if _flag_guarded(analysis, call):
            continue  # the rule's own advice: behind a debug flag
        stmt = enclosing_stmt(index, call)
        fix = None
        if isinstance(stmt, ast.Expr) and stmt.value is call:
            fix = _remove_statement(analysis, index, stmt)
        message = tr(
            "autograd anomaly detection left on: every op records a traceback and backward "
            "checks for NaN, a large slowdown (about 2x); remove it once debugging is done"
        )
        out.append(make_finding(analysis, SL207, node_range(analysis, call), message, fix))
    return out


def _remove_statement(analysis: Analysis, index: object, stmt: ast.stmt) -> Fix | None:
    line, end_line = stmt.lineno, stmt.end_lineno or stmt.lineno
    indent = line_indent(analysis, line)
    if analysis.char_col(line, stmt.col_offset) != len(indent):
        return None
    tail = analysis.lines[end_line - 1][analysis.char_col(end_line, stmt.end_col_offset or 0) :].strip()
    if tail and not tail.startswith("#"):
        return None
    parent_body = _body_holding(analysis, stmt)
    if parent_body is not None and len(parent_body) == 1:
        edit = TextEdit(line, 1, end_line, len(analysis.lines[end_line - 1]) + 1, f"{indent}pass")
    elif end_line < len(analysis.lines):
        edit = TextEdit(line, 1, end_line + 1, 1, "")
    else:
        edit = TextEdit(line, 1, end_line, len(analysis.lines[end_line - 1]) + 1, "")
    return Fix(tr("Remove the anomaly-detection call"), (edit,))


def _body_holding(analysis: Analysis, stmt: ast.stmt) -> list[ast.stmt] | None:
    parent = index_of(analysis).parents.get(stmt)
    if parent is None:
        return None
    for name in ("body", "orelse", "finalbody"):
        body = getattr(parent, name, None)
        if isinstance(body, list) and stmt in body:
            return body
    return None


SL207 = register(
    Rule(
        code="SL207",
        name="anomaly-detection-on",
        severity=Severity.WARNING,
        summary="`set_detect_anomaly(True)` / `detect_anomaly()` left in code",
        doc=RuleDoc(
            what="Flags `torch.autograd.set_detect_anomaly(True)` and `torch.autograd.detect_anomaly()` "
            "(as a call, context manager or decorator), whatever the import alias. Silent when "
            "the flag is not the literal True (`set_detect_anomaly(args.detect_anomaly)`), and "
            "when the call runs under a condition on a configuration value or debug flag, which "
            "is this rule's own advice: an `if` or conditional expression (or an earlier `if` "
            "that returns early) testing a name or attribute rooted at `args`, `config`, `cfg`, "
            "`opt`, `flags`, `hparams`, `settings` or `os.environ`, or one whose name says debug, "
            "anomaly, detect, check, verbose, strict or flag (`if config.detect_anomaly:`, `if "
            "args.debug:`, `if os.environ.get('ANOMALY'):`). A module-level call, or one under "
            "`if __name__ == '__main__':` or another condition, is still flagged.",
            why="Anomaly mode records a Python traceback for every op in the forward and checks "
            "every backward result for NaN: useful to find where a NaN came from, a large "
            "slowdown (2.2x measured on a small CPU loop) when left on.",
            example="torch.autograd.set_detect_anomaly(True)  # SL207",
            fix="Remove it (the quick fix removes a standalone call), or guard it behind a debug flag.",
        ),
        check=check_anomaly_detection,
    )
)
