"""`stridelens/explain`: the `stridelens explain --format json` facts, as an LSP request.

Params: `{"textDocument": {"uri"}, "positions": [{"line", "character"}, ...]}` (0-based,
in the negotiated position encoding). Result: one explain object per position, `null`
where nothing is known. Editors use it to compare runtime facts with the static ones
without starting a process per stop.
"""

from __future__ import annotations

from typing import Any

from stridelens.server.analysis import Analysis
from stridelens.server.lsp.documents import Encoding

METHOD = "stridelens/explain"


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def explain_positions(
    analysis: Analysis, lines: list[str], enc: Encoding, positions: list[Any]
) -> list[dict[str, Any] | None]:
    answers: list[dict[str, Any] | None] = []
    for position in positions:
        line0, character = _field(position, "line"), _field(position, "character")
        if not isinstance(line0, int) or not isinstance(character, int) or not 0 <= line0 < len(lines):
            answers.append(None)
            continue
        if analysis.line_is_broken(line0 + 1) is not None:
            answers.append(None)
            continue
        explanation = analysis.explain_at(line0 + 1, enc.to_char(lines[line0], character))
        answers.append(explanation.answer() if explanation is not None else None)
    return answers


def uri_and_positions(params: Any) -> tuple[str | None, list[Any]]:
    document = _field(params, "textDocument") or _field(params, "text_document")
    uri = _field(document, "uri")
    positions = _field(params, "positions") or []
    return (uri if isinstance(uri, str) else None), list(positions) if isinstance(positions, (list, tuple)) else []
