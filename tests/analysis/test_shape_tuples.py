"""Shapes built as tuples and lists keep their sizes, item by item.

llama2.c's rotary embedding reshapes with `xq.shape[:-1] + (-1, 2)`, splits the pair with
`.unbind(-1)`, and builds a broadcast shape with a comprehension over `enumerate(x.shape)`;
lucidrains' perceiver splits heads with `q, k, v = (rearrange(t, ...) for t in (q, k, v))` and
projects a value that came through `default(context, x)`. Each keeps its sizes (or its rank)
when the analysis reads the tuple item by item.

Checked for real (tests/realcode/compare.py) on two sizes, with grad on and under no_grad.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "shape_tuples"

SOURCE = """
import torch
from einops import rearrange
from torch import nn


def broadcast_like(freqs, x):
    ndim = x.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs.view(shape)


def rotate(xq, freqs_cos, b, t, h, d):
    xq = xq.view(b, t, h, d)
    pairs = xq.float().reshape(xq.shape[:-1] + (-1, 2))
    xq_r, xq_i = pairs.unbind(-1)
    cos = broadcast_like(freqs_cos.float(), xq_r)
    rotated = xq_r * cos - xq_i * cos
    return rotated


def default(val, d):
    return val if val is not None else d


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(dim, 2 * dim)

    def forward(self, x, context=None):
        h = self.heads
        q = self.to_q(x)
        context = default(context, x)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (rearrange(t, 'b n (h d) -> (b h) n d', h=h) for t in (q, k, v))
        return q, k, v
"""


def _entry(ns: dict[str, Any]) -> None:
    attention = ns["Attention"](8, 2)
    for b, t in ((2, 5), (1, 3)):
        ns["rotate"](torch.randn(b * t * 2 * 4), torch.randn(t, 2), b, t, 2, 4)
        attention(torch.randn(b, t, 8))
        attention(torch.randn(b, t, 8), context=torch.randn(b, t + 1, 8))
        with torch.no_grad():
            attention(torch.randn(b, t, 8))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_shape_sliced_and_extended_gives_the_reshape(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("pairs", "rotate") or {}).get("shape") == ["b", "t", "h", "d // 2", 2]


def test_unbind_of_the_last_dim_drops_it(oracle: realcompare.SnippetOracle) -> None:
    for name in ("xq_r", "xq_i"):
        assert (oracle.answer(name, "rotate") or {}).get("shape") == ["b", "t", "h", "d // 2"], name


def test_a_broadcast_shape_from_a_comprehension(oracle: realcompare.SnippetOracle) -> None:
    cos = oracle.answer("cos", "rotate") or {}
    assert cos.get("shape") == [1, "t", 1, "d // 2"]
    assert (oracle.answer("rotated", "rotate") or {}).get("shape") == ["b", "t", "h", "d // 2"]


def test_heads_split_from_a_generator_keep_each_projection(oracle: realcompare.SnippetOracle) -> None:
    # `context` went through `default(...)` and is unknown; the layer makes a tensor of it,
    # and each of q, k, v is the pattern's rank-3 float32 result.
    split = [p for p in oracle.answers if p.name in ("q", "k", "v") and "rearrange" in oracle.source.splitlines()[p.line - 1]]
    assert len(split) == 3
    for probe in split:
        answer = oracle.answers[probe] or {}
        assert answer.get("dtype") == "float32", probe
        assert answer.get("shape") is not None and len(answer["shape"]) == 3, probe
