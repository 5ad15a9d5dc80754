"""An analysis is freed by reference counting alone.

The language server analyses on every keystroke and `check` analyses thousands of files: a
reference cycle anywhere in the interpreter keeps a file's whole AST and facts alive until
the cyclic GC runs, and those full collections then cost more than the analysis itself.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from stridelens.server.analysis.engine import analyze_source

SOURCES = Path(__file__).resolve().parents[1] / "realcode" / "sources"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "path",
    [*sorted(SOURCES.glob("*.py")), EXAMPLES / "symbolic_attention.py"],
    ids=lambda p: p.name,
)
def test_no_cyclic_garbage_after_analysis(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    analyze_source(source, str(path), replay=False)  # warm caches and lazy imports
    gc.collect()
    gc.disable()
    try:
        analysis = analyze_source(source, str(path), replay=False)
        assert analysis.values, "the file has facts to free"
        del analysis
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable == 0, f"{unreachable} objects were only freed by the cyclic GC"
