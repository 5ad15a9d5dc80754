"""SL001: a syntax error, reported where Python reports it, in Python's own words.

Not a rule one can turn off: `run_rules` reports it whatever `select`, `ignore` or `# noqa`
say (as ruff does since it retired E999), because the other rules cannot see the code Python
refuses, and a broken file that passes a lint is the worst outcome. The analysis still runs
on the rest of the file (see `analysis/parsing.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from stridelens.server.analysis import Analysis
from stridelens.server.analysis.parsing import BrokenLine
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Rule, RuleDoc, Severity

CODE = "SL001"


def syntax_findings(path: str, lines: Sequence[str], broken: Sequence[BrokenLine]) -> list[Finding]:
    """One finding per syntax error of the tolerant parse. Its first error is Python's; each
    later one is the first error of the text with the earlier broken lines replaced, kept
    only when it lies below the last one kept (an error at or above it is an artefact of
    the replacement: the placeholder `pass` under an `if`, a line that made no progress), and
    none after a bracket or string left open to the end of the file."""
    out: list[Finding] = []
    last = 0
    for error in broken:
        if error.line <= last:
            continue
        if out and _runs_to_end(out[-1].message):
            break
        last = error.line
        text = lines[error.line - 1] if 1 <= error.line <= len(lines) else ""
        width = len(text) + 1
        col = min(max(error.col or 1, 1), width)
        end_col = max(col, min(error.end_col if error.end_col is not None else col + 1, width))
        out.append(Finding(path, error.line, col, error.line, end_col, CODE, error.message, Severity.ERROR))
    return out


def _runs_to_end(message: str) -> bool:
    """Python's error for a bracket or triple-quoted string still open at the end of the file:
    everything after its opening belongs to it, so an error the tolerant parse finds below it
    is an artefact (a truncated file's dict entries read as statements), not Python's."""
    return message.endswith("was never closed") or message.startswith("unterminated triple-quoted string")


def check_syntax(analysis: Analysis) -> list[Finding]:
    return syntax_findings(analysis.path, analysis.lines, analysis.broken)


SL001 = register(
    Rule(
        code=CODE,
        name="syntax-error",
        severity=Severity.ERROR,
        summary="code Python cannot parse (always reported: `select`, `ignore` and `# noqa` do not hide it)",
        doc=RuleDoc(
            what="Reports each syntax error where Python reports it, with Python's own message "
            "(\"'(' was never closed\", \"invalid syntax. Perhaps you forgot a comma?\"). It is "
            "reported whatever `select`, `ignore` or `# noqa` say.",
            why="Python refuses the whole file, so nothing in it runs, and the other rules "
            "cannot see the broken statement: a lint that passes on such a file says nothing "
            "about it. The rest of the file is still analysed and checked.",
            example="def forward(self, x)  # SL001: expected ':'\n    return x.view(-1)",
            fix="Correct the code at the reported position; `python -m py_compile FILE` shows "
            "the same error.",
        ),
        check=check_syntax,
    )
)
