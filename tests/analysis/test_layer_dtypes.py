"""A layer's output dtype where the file never changes dtypes: the weight's, or the input's.

Conv2d and Linear give their weight's dtype (float32, torch's default: torch raises on an input
of another dtype outside autocast); norms, activations and dropout keep their input's. An
`nn.Sequential` of them gives what its layers give in turn (vit-pytorch's LeViT:
`self.to_q = nn.Sequential(nn.Conv2d(...), nn.BatchNorm2d(...))`). Past `self.proj(q)` or
`self.attn(q, q, value=x)`, q and x have the weight's dtype too: torch raises on any other.
MultiheadAttention returns a pair (output, weights), never one tensor.

Checked for real (tests/realcode/compare.py) on two batch sizes, with grad on and under no_grad.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "layer_dtypes"

SOURCE = """
import torch
from torch import nn


class Projection(nn.Module):
    def __init__(self, dim, inner):
        super().__init__()
        self.to_q = nn.Sequential(nn.Conv2d(dim, inner, 1), nn.BatchNorm2d(inner))
        self.to_out = nn.Sequential(nn.GELU(), nn.Conv2d(inner, dim, 1), nn.Dropout(0.1))

    def forward(self, x):
        q = self.to_q(x)
        out = self.to_out(q)
        return out


class Attend(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, pos):
        q = x + pos
        pair = self.attn(q, q, value=x)
        attended = self.attn(q, q, value=x)[0]
        mixed = x + attended
        projected = self.proj(q)
        scaled = q * 2
        return mixed, projected, scaled
"""


def _entry(ns: dict[str, Any]) -> None:
    projection = ns["Projection"](4, 8)
    for b in (1, 2):
        projection(torch.randn(b, 4, 5, 5))
        with torch.no_grad():
            projection.eval()(torch.randn(b, 4, 3, 3))
        projection.train()
    attend = ns["Attend"](8, 2)
    for length in (3, 1):
        attend(torch.randn(length, 2, 8), torch.randn(length, 1, 8))
        with torch.no_grad():
            attend(torch.randn(length, 2, 8), torch.randn(1, 1, 8))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_sequential_of_layers_has_the_dtype_its_layers_give(oracle: realcompare.SnippetOracle) -> None:
    for name in ("q", "out"):
        assert (oracle.answer(name, "forward") or {}).get("dtype") == "float32", name


def test_an_input_has_the_weight_dtype_past_the_layer(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("q", "forward(self, x, pos)") or {}).get("dtype") is None  # x + pos: not known yet
    for name in ("attended", "mixed", "projected", "scaled"):
        assert (oracle.answer(name, "forward(self, x, pos)") or {}).get("dtype") == "float32", name


def test_attention_returns_a_pair_not_a_tensor(oracle: realcompare.SnippetOracle) -> None:
    assert oracle.answer("pair", "forward(self, x, pos)") is None
