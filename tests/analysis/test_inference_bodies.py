"""Bodies that may run under `torch.inference_mode()` (a decorated `generate` calls the model):
a view there may have no `_base`, so its view verdict is not stated; its `requires_grad: False`
is, where it was computed with grad on (it comes from the base, as in llama2.c's
`torch.arange(0, dim, 2)[: dim // 2]`: False in either mode). A view of a parameter requires
grad even under inference mode. Checked for real, under grad and under inference mode.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "inference_bodies"

SOURCE = """
import torch
from torch import nn


def precompute(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end)
    table = torch.outer(t, freqs)
    return table


class Model(nn.Module):
    def __init__(self, dim, end):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim, dim))
        self.register_buffer("table", precompute(dim, end))

    def forward(self, x):
        column = self.w[:, 0]
        rows = self.table[: x.shape[0]]
        y = x @ self.w + column
        return y, rows

    @torch.inference_mode()
    def generate(self, x, steps):
        for _ in range(steps):
            x, _ = self(x)
        return x
"""


def _entry(ns: dict[str, Any]) -> None:
    for dim, end, n in ((4, 6, 3), (6, 5, 2)):
        model = ns["Model"](dim, end)
        y, _ = model(torch.randn(n, dim))
        y.sum().backward()
        model.generate(torch.randn(n, dim), 2)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_view_of_a_factory_result_requires_no_grad_in_either_mode(oracle: realcompare.SnippetOracle) -> None:
    for name in ("freqs", "table"):
        assert (oracle.answer(name, "precompute") or {}).get("requires_grad") is False, name
