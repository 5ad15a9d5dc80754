"""Storage identity is stated only when certain: regressions found on real code.

Each case was wrong before: `frozen = weights.detach()` read "view of `out`" (a freed meta
storage's address reused), a fresh `buffer` read "view of `loss`", and attention's `k`, `v`
read "view of `q`" (siblings of one `split`, none the others' base).
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.analysis.oracle import run_for_real
from tests.analysis.test_unknowns_and_safety import fact_at_name

ROOT = Path(__file__).resolve().parents[2]

TRAINING = """
import torch
from torch import nn

model = nn.Linear(8, 1)
inputs = torch.randn(64, 8)
for step in range(3):
    out = model(inputs)
    loss = (out * out).mean()
    loss.backward()
buffer = torch.randn(100, 10)
weights = torch.randn(4, 4, requires_grad=True)
frozen = weights.detach()
"""

ATTENTION = """
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        return q, k, v
"""


def test_a_fresh_tensor_is_nobody_s_view_and_detach_names_its_source() -> None:
    for _ in range(3):  # the old failure depended on which addresses the allocator reused
        assert fact_at_name(TRAINING, "buffer").view_of is None
        frozen = fact_at_name(TRAINING, "frozen")
        assert frozen.view_of == "weights"
    real = run_for_real(TRAINING)
    by_name = {probe.name: value for probe, value in real.items()}
    assert by_name["frozen"].untyped_storage().data_ptr() == by_name["weights"].untyped_storage().data_ptr()
    assert by_name["buffer"]._base is None


def test_the_pieces_of_one_split_are_views_of_no_name() -> None:
    for name in ("q", "k", "v"):
        fact = fact_at_name(ATTENTION, name)
        assert fact is not None and fact.is_view is True, name
        assert fact.view_of is None, name
    # They do share one storage: the unnamed output of c_attn.
    q, k = torch.randn(2, 3, 12).split(4, dim=2)[:2]
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() and k._base is not q


def test_the_demo_example_says_frozen_shares_weights() -> None:
    source = (ROOT / "examples" / "training_pitfalls.py").read_text(encoding="utf-8")
    assert fact_at_name(source, "frozen").view_of == "weights"
