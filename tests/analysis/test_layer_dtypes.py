"""A layer's output dtype where the file never changes dtypes: the weight's, or the input's.

Conv2d and Linear give their weight's dtype (float32, torch's default: torch raises on an input
of another dtype outside autocast); norms, activations and dropout keep their input's. An
`nn.Sequential` of them gives what its layers give in turn (vit-pytorch's LeViT:
`self.to_q = nn.Sequential(nn.Conv2d(...), nn.BatchNorm2d(...))`).

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
"""


def _entry(ns: dict[str, Any]) -> None:
    projection = ns["Projection"](4, 8)
    for b in (1, 2):
        projection(torch.randn(b, 4, 5, 5))
        with torch.no_grad():
            projection.eval()(torch.randn(b, 4, 3, 3))
        projection.train()


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_sequential_of_layers_has_the_dtype_its_layers_give(oracle: realcompare.SnippetOracle) -> None:
    for name in ("q", "out"):
        assert (oracle.answer(name, "forward") or {}).get("dtype") == "float32", name
