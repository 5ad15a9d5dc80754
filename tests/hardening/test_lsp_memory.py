"""What the server keeps per message stays bounded over a long session (the editing soak of
bench/lsp_soak.py grew ~70 MB in 10 minutes: pygls kept the future of every didChange).

The real `stridelens serve` over stdio, with its opt-in memory trace
(server/lsp/memtrace.py) writing the JSON-RPC bookkeeping to a file a few times a second.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from stridelens.server.lsp import memtrace

from .lsp_wire import LspProcess

pytestmark = pytest.mark.timeout(120)

SOURCE = "import torch\nx = torch.zeros(2, 3)\ny = x.t()\n"
EDITS = 400


def reports(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def next_report(path: Path, after: int, timeout: float = 30.0) -> dict[str, Any]:
    """The first report written after the first `after` ones."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = reports(path)
        if len(found) > after:
            return found[after]
        time.sleep(0.05)
    raise TimeoutError(f"no memory report in {path} within {timeout} s")


def test_handler_bookkeeping_stays_bounded_over_many_edits(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    env = {memtrace.ENV: str(trace), memtrace.INTERVAL_ENV: "0.2"}
    with LspProcess(cwd=tmp_path, env=env) as lsp:
        lsp.request("initialize", {"processId": os.getpid(), "rootUri": tmp_path.as_uri(), "capabilities": {},
                                   "initializationOptions": {"replay": False}})  # fmt: skip
        lsp.notify("initialized", {})
        uri = (tmp_path / "edited.py").as_uri()
        lsp.open(uri, SOURCE)
        for version in range(2, EDITS + 2):  # type a line, one didChange per key, then delete it
            col = (version - 2) % 20
            edit = ({"start": {"line": 3, "character": col}, "end": {"line": 3, "character": col}}, "z")
            if col == 19:
                edit = ({"start": {"line": 3, "character": 0}, "end": {"line": 3, "character": 19}}, "")
            lsp.change(uri, version, [{"range": edit[0], "text": edit[1]}])
            if version % 50 == 0:
                assert "result" in lsp.hover(uri, 2, 0)
        lsp.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        lsp.open(uri, SOURCE, version=EDITS + 2)
        # Messages are handled in order: once this hover is answered, every edit before it was.
        assert "result" in lsp.hover(uri, 2, 0)
        report = next_report(trace, len(reports(trace)))
        lsp.shutdown_and_exit()
    # Before the fix: one finished future per didOpen/didChange/didClose (~400 here).
    assert report["request_futures"] <= 5, report
    assert report["result_types"] <= 5, report
