"""SL105's claims, measured on real tensors: what its message says a kept view costs."""

from __future__ import annotations

import io

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")

SOURCE = """import torch
history = []
for step in range(2):
    feats = torch.randn(64, 1024, 196)
    history.append(feats[:, :1])
"""


def test_the_kept_view_holds_the_whole_storage_and_clone_frees_it() -> None:
    (finding,) = run_rules(analyze_source(SOURCE), select=["SL105"])
    assert "49.0 MiB for 49.0 KiB used" in finding.message
    feats = torch.randn(64, 1024, 196)
    view = feats[:, :1]
    assert view.untyped_storage().nbytes() == feats.untyped_storage().nbytes()
    for name, variant in (("detach", view.detach()), ("contiguous of a contiguous view", feats[:1].contiguous())):
        assert variant.untyped_storage().nbytes() == feats.untyped_storage().nbytes(), name
    assert view.clone().untyped_storage().nbytes() == view.numel() * 4


def test_torch_save_of_a_view_writes_the_whole_storage() -> None:
    big = torch.randn(1000, 1000)
    view, copy = io.BytesIO(), io.BytesIO()
    torch.save(big[:10], view)
    torch.save(big[:10].clone(), copy)
    assert view.tell() > big.numel() * 4
    assert copy.tell() < 2 * 10 * 1000 * 4
    source = "import torch\nbig = torch.randn(1000, 1000)\ntorch.save(big[:10], 'rows.pt')\n"
    (finding,) = run_rules(analyze_source(source), select=["SL105"])
    assert "writes its whole storage" in finding.message
