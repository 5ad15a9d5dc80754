"""One verdict everywhere: the hover's tensor card states what `explain` states at the same
position (is_view / view_of, contiguity, requires_grad), and nothing `explain` leaves unknown.

Measured on held-out code: on nanoGPT's `y = y.transpose(1, 2).contiguous().view(B, T, C)`
(tests/realcode/sources/nanogpt_model.py line 72) the hover said "a view — shares the storage
of another tensor" where `explain` said nothing. The card and the JSON read the same fact
(`TensorFact.to_json` and `hover.fact_lines`); this checks them against each other at every
column of that line and at every assigned name of the file, in the exact and the symbolic
(before torch has loaded) analyses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, analyze_source
from stridelens.server.lsp.documents import Encoding
from stridelens.server.lsp.hover import hover
from tests.realcode.driver import probes_of

SOURCE = Path(__file__).resolve().parents[1] / "realcode" / "sources" / "nanogpt_model.py"
LINE = 72  # y = y.transpose(1, 2).contiguous().view(B, T, C)


def _memory(card: str) -> str | None:
    for line in card.splitlines():
        if "**memory**" in line:
            return line
    return None


def _check(analysis: Analysis, lines: list[str], line: int, col: int) -> bool:
    """The card at (line, col) against `explain` there; True when a tensor card was shown."""
    found = hover(analysis, analysis.exact, lines, Encoding("utf-32"), line - 1, col)
    explanation = analysis.explain_at(line, col)
    card = found.contents.value if found is not None else None
    if card is None or "— tensor" not in card.splitlines()[0]:
        return False  # an operation card, a rule card, or nothing
    assert explanation is not None, f"{line}:{col}: a tensor card where explain has no expression"
    answer: dict[str, Any] = explanation.answer() or {}
    memory = _memory(card)
    where = f"{line}:{col} `{explanation.expr}`"
    if answer.get("view_of"):
        assert memory is not None and f"`{answer['view_of']}`" in memory, where
    elif answer.get("is_view") is True:
        assert memory == "- " + tr("**memory** a view — shares the storage of another tensor"), where
    elif answer.get("is_view") is False:
        assert memory == "- " + tr("**memory** a copy — its own storage"), where
    else:
        assert memory is None, f"{where}: the card says {memory!r}, explain says nothing"
    contiguous = answer.get("contiguous")
    if contiguous is None:
        assert tr("**contiguous** {answer}").format(answer=tr("yes")) not in card, where
        assert tr("**contiguous** {answer}").format(answer=tr("no")) not in card, where
    else:
        expected = tr("**contiguous** {answer}").format(answer=tr("yes") if contiguous else tr("no"))
        assert expected in card, where
    grad = answer.get("requires_grad")
    if grad is None:
        assert "**requires_grad**" not in card, where
    else:
        assert tr("**requires_grad** {answer}").format(answer=tr("yes") if grad else tr("no")) in card, where
    return True


@pytest.mark.parametrize("replay", [True, False], ids=["exact", "symbolic"])
def test_hover_and_explain_agree_on_nanogpt(replay: bool) -> None:
    text = SOURCE.read_text(encoding="utf-8")
    lines = text.splitlines()
    analysis = analyze_source(text, str(SOURCE), replay=replay)
    cards = sum(_check(analysis, lines, LINE, col) for col in range(len(lines[LINE - 1])))
    assert cards >= 5  # `y`, `y.transpose(1, 2)`, the `.view(...)` result, ...
    # nanoGPT is ASCII: `ast` byte columns are character columns.
    for probe in probes_of(text):
        _check(analysis, lines, probe.line, probe.col)


def test_line_72_states_one_verdict() -> None:
    text = SOURCE.read_text(encoding="utf-8")
    lines = text.splitlines()
    analysis = analyze_source(text, str(SOURCE))
    col = lines[LINE - 1].index("y = ")
    answer = analysis.explain_at(LINE, col).answer()
    found = hover(analysis, analysis.exact, lines, Encoding("utf-32"), LINE - 1, col)
    assert found is not None and answer is not None
    # `.contiguous().view(...)` is a view in every run (of the copy, or of `y` when the
    # transpose was already contiguous): both say so, or both would say nothing.
    assert answer["is_view"] is True
    assert _memory(found.contents.value) is not None
