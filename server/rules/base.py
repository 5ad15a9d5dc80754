"""What a rule is and what it reports. Shared by `stridelens check`, the language server
and the fix engine.

Coordinates: `line` 1-based; `col` 1-based, in characters (code points) of the line;
`end_col` is one past the last character (so a 3-character token at the start of a line
is col=1, end_col=4). The LSP layer converts to UTF-16 itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from stridelens.server.analysis import Analysis


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFORMATION = "information"
    HINT = "hint"


@dataclass(frozen=True)
class TextEdit:
    line: int
    col: int
    end_line: int
    end_col: int
    new_text: str


@dataclass(frozen=True)
class Fix:
    title: str  # "Replace `.view(` with `.reshape(`"
    edits: tuple[TextEdit, ...]
    # Safe fixes keep the program's meaning (`stridelens check --fix` applies only these);
    # the others change behaviour on purpose and are offered, not applied, by default.
    safe: bool = False
    # False where what makes the rule's fix safe is not proven at this site (a verdict over
    # symbolic sizes that holds under conditions): `run_rules` then offers it as unsafe.
    proven: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "safe": self.safe,
            "edits": [
                {
                    "line": e.line,
                    "column": e.col,
                    "end_line": e.end_line,
                    "end_column": e.end_col,
                    "new_text": e.new_text,
                }
                for e in self.edits
            ],
        }


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    code: str
    message: str
    severity: Severity
    fix: Fix | None = None
    # In a notebook: the 1-based cell, and `line`/`end_line` (and the fix's edits) count
    # lines inside that cell.
    cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The `stridelens check --format json` schema of DESIGN.md (plus `cell` in notebooks)."""
        out = {
            "path": self.path,
            "line": self.line,
            "column": self.col,
            "end_line": self.end_line,
            "end_column": self.end_col,
            "code": self.code,
            "message": self.message,
            "severity": self.severity.value,
            "fix": self.fix.to_json() if self.fix is not None else None,
        }
        if self.cell is not None:
            out["cell"] = self.cell
        return out


@dataclass(frozen=True)
class RuleDoc:
    what: str
    why: str
    example: str
    fix: str


class Checker(Protocol):
    def __call__(self, analysis: Analysis) -> list[Finding]: ...


@dataclass(frozen=True)
class Rule:
    code: str  # "SL101"
    name: str  # "view-noncontiguous"
    severity: Severity
    summary: str  # one line, for tables
    doc: RuleDoc
    check: Checker = field(compare=False, repr=False)
    # Whether this rule's quick fix keeps the program's meaning (see `Fix.safe`).
    safe_fix: bool = False
    # Whether it runs when nothing is selected. An off-by-default rule runs only where `select`
    # names it (its code, a prefix of it, or ALL); `precision` is what it measured on fresh real
    # code ("0.32 (14/44)") and `measured_in` the audit that measured it (rules.OFF_BY_DEFAULT).
    default: bool = True
    precision: str | None = None
    measured_in: str | None = None

    @property
    def url(self) -> str:
        return f"https://stridelens.invalid/rules/{self.code}"
