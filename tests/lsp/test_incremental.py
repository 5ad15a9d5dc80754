"""The language server's incremental answer after an edit equals a whole-file analysis.

After an edit inside a block, the server analyses only the blocks the edit can reach (the
edited ones and every block connected to them by naming, server/lsp/partial.py) and keeps
the previous findings elsewhere; where it calls that answer final (`edit_findings` is not
None), it publishes it as the exact diagnostics. Property: on real files nobody here wrote
(tests/realcode/sources, with ORIGINS.md) and on the generated model, after seeded random
edit sequences (characters typed and deleted anywhere in a body, some of them breaking the
syntax, lines duplicated and removed), every final answer is exactly what a whole-file
analysis of the new text finds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bench.generate_model import generate_model_source
from stridelens.server.analysis import analyze_source
from stridelens.server.lsp.configuration import Settings
from stridelens.server.lsp.diagnostics import check
from stridelens.server.lsp.documents import split_lines
from stridelens.server.lsp.partial import edit_findings
from stridelens.server.rules import Finding

SOURCES = Path(__file__).resolve().parents[1] / "realcode" / "sources"
# Files with blocks that do not all reach each other (helpers, several models, a test()).
FILES = ("cifar_dpn.py", "gan_munit_models.py", "mamba_minimal_model.py", "mingpt_ddp_model.py", "lion_lion.py", "word_language_model.py")
EDITS = 12
BUDGET = 25_000
SETTINGS = Settings(select=("ALL",))
TYPED = "x_.,:()[] 10"


def _key(findings: list[Finding]) -> list[tuple[object, ...]]:
    return sorted((f.line, f.col, f.end_line, f.end_col, f.code, f.message, f.fix) for f in findings)


def _whole(text: str) -> tuple[object, list[Finding]]:
    analysis = analyze_source(text, "model.py", replay=True, budget_steps=BUDGET)
    return analysis, check(analysis, SETTINGS, split_lines(text))


def _edit(lines: list[str], rng: random.Random) -> list[str]:
    body = [n for n, line in enumerate(lines) if line.startswith("    ") and line.strip()]
    n = rng.choice(body)
    line = lines[n]
    indent = len(line) - len(line.lstrip())
    new = list(lines)
    kind = rng.random()
    if kind < 0.45:  # a character typed
        col = rng.randint(indent + 1, len(line))
        new[n] = line[:col] + rng.choice(TYPED) + line[col:]
    elif kind < 0.8 and len(line) > indent + 1:  # a character deleted
        col = rng.randint(indent + 1, len(line) - 1)
        new[n] = line[:col] + line[col + 1 :]
    elif kind < 0.9:  # a line duplicated (the block grows)
        new.insert(n, line)
    else:  # a line removed
        del new[n]
    return new


def _sequence(text: str, seed: int) -> tuple[int, int]:
    """EDITS edits from a settled document each time; (final answers, those over part of the file)."""
    rng = random.Random(seed)
    lines = split_lines(text)
    analysis, findings = _whole(text)
    finals = partial = 0
    for _ in range(EDITS):
        new_lines = _edit(lines, rng)
        new_text = "\n".join(new_lines)
        # every final answer, also where the server would rather run the whole file
        answer = edit_findings(analysis, findings, lines, new_lines, new_text, "model.py", SETTINGS, BUDGET, most_kept=1.0)  # type: ignore[arg-type]
        analysis, findings = _whole(new_text)
        if answer is not None:
            final, kept = answer
            finals += 1
            partial += kept < len(new_lines)
            assert _key(final) == _key(findings), f"seed {seed}: the incremental answer differs after editing to:\n" + "\n".join(
                f"{i + 1}: {line}" for i, line in enumerate(new_lines) if i < len(lines) and line != lines[i]
            )
        lines = new_lines
    return finals, partial


@pytest.mark.parametrize("name", FILES)
def test_incremental_equals_whole_file_on_real_code(name: str) -> None:
    text = (SOURCES / name).read_text(encoding="utf-8")
    finals = sum(_sequence(text, seed)[0] for seed in (1, 2))
    assert finals > 0, f"{name}: no edit was answered incrementally"


def test_incremental_equals_whole_file_on_the_generated_model() -> None:
    finals, partial = _sequence(generate_model_source(400), 7)
    # Its blocks reach one another only in pairs: an edit that leaves the syntax whole (or
    # broken on its own line) is answered from a few lines.
    assert partial >= 2, (finals, partial)
