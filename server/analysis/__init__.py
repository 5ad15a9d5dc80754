"""The static analysis engine: parse, interpret, replay on meta. No LSP code here.

Entry points: `analyze_source` / `analyze_file` give an `Analysis`; `Analysis.explain_at`
answers "what is known of the expression at this position".
"""

from __future__ import annotations

from stridelens.server.analysis.engine import (
    DEFAULT_BUDGET_STEPS,
    Analysis,
    Explanation,
    SourceError,
    SourceText,
    analyze_file,
    analyze_source,
    decode_source,
    read_source,
    read_source_text,
)
from stridelens.server.analysis.facts import Provenance, ReplayEvent, TensorFact

__all__ = [
    "DEFAULT_BUDGET_STEPS",
    "Analysis",
    "Explanation",
    "Provenance",
    "ReplayEvent",
    "SourceError",
    "SourceText",
    "TensorFact",
    "analyze_file",
    "analyze_source",
    "decode_source",
    "read_source",
    "read_source_text",
]
