"""The hover's "seen at run time" line: a real training script recorded by `stridelens record`
(real torch, a subprocess), then the server shows what the run saw at a line of `forward`
whose sizes come from the data, and marks it stale once the document is edited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_record import TRAIN, _line, _project

from .helpers import Session, start_session, stop_session

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(240)]


async def test_hover_shows_the_recorded_facts(lsp: Session, tmp_path: Path) -> None:
    script = _project(tmp_path, "train.py", TRAIN)
    done = subprocess.run([sys.executable, "-m", "stridelens", "record", "--", sys.executable, str(script), "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    uri = script.as_uri()
    lsp.open(uri, TRAIN)
    await lsp.wait_analyzed(uri)
    line = _line(TRAIN, "heads = q.view") - 1
    col = TRAIN.splitlines()[line].index("heads")
    hover = await lsp.hover(uri, line, col + 1)
    assert hover is not None
    card = hover.contents.value
    # The static card (sizes in the code's names) and, below it, the run's numbers.
    assert "seen at run time (" in card
    assert "(4, 2, 6, 8) float32 cpu, strides (288, 8, 48, 1), not contiguous, a view" in card
    assert "grad_fn TransposeBackward0" in card and "stale" not in card and "disagrees" not in card
    edited = TRAIN.replace("lr=0.1", "lr=0.2")
    lsp.change_full(uri, edited, 2)
    await lsp.wait_analyzed(uri, version=2)
    hover = await lsp.hover(uri, line, col + 1)
    assert hover is not None and "stale: the file changed since" in hover.contents.value


def _record_train(tmp_path: Path) -> Path:
    script = _project(tmp_path, "train.py", TRAIN)
    done = subprocess.run([sys.executable, "-m", "stridelens", "record", "--", sys.executable, str(script), "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    return script


async def test_recorded_hints_fill_what_the_static_facts_leave_unknown(tmp_path: Path) -> None:
    """`recordedHints`: `out = model(xb)` (sizes from a DataLoader the analysis cannot follow)
    gets the run's shape, marked "(run)"; never once the text differs from the recorded one."""
    script = _record_train(tmp_path)
    client, lsp = await start_session(init_options={"recordedHints": True}, root=tmp_path)
    try:
        uri = script.as_uri()
        lsp.open(uri, TRAIN)
        await lsp.wait_analyzed(uri)
        line = _line(TRAIN, "out = model(xb)") - 1
        hints = await lsp.inlay_hints(uri)
        labels = {h.position.line: str(h.label) for h in hints}
        assert labels.get(line) == ": (4, 6, 16) (run)", labels
        static = [text for text in labels.values() if "(run)" not in text]
        assert static, labels  # the static hints are still there
        lsp.change_full(uri, TRAIN.replace("lr=0.1", "lr=0.2"), 2)
        await lsp.wait_analyzed(uri, version=2)
        hints = await lsp.inlay_hints(uri)
        assert not [h for h in hints if "(run)" in str(h.label)], hints
    finally:
        await stop_session(client)


async def test_recorded_hints_are_off_by_default(lsp: Session, tmp_path: Path) -> None:
    script = _record_train(tmp_path)
    uri = script.as_uri()
    lsp.open(uri, TRAIN)
    await lsp.wait_analyzed(uri)
    hints = await lsp.inlay_hints(uri)
    assert hints and not [h for h in hints if "(run)" in str(h.label)], hints
