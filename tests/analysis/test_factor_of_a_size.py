"""A size that is a factor of a dim, never a dim alone, can still decide view or copy.

timm's BottleneckAttn: `q` has `num_heads * B` rows, and `(attn @ v).transpose(-1, -2)`
reshaped to `(B, num_heads * dim_v, H, W)` copies for generic sizes, yet is a view when
`num_heads == 1` (B >= 2), or when `H * W == 1`. Asking only "is each dim 1?" (`num_heads * B == 1`)
missed both, and the copy was stated "for every size unless ..." without them. Checked for
real with one head and with a 1x1 map, where torch returns a view.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "factor_of_a_size"

SOURCE = """
import torch
from torch import nn


class BottleneckAttn(nn.Module):
    def __init__(self, dim, num_heads, dim_head):
        super().__init__()
        self.num_heads = num_heads
        self.dim_head = dim_head
        self.dim_out = num_heads * dim_head
        self.qkv = nn.Conv2d(dim, self.dim_out * 3, 1)

    def forward(self, x):
        B, C, H, W = x.shape
        x = self.qkv(x)
        q, k, v = torch.split(x, [self.dim_out, self.dim_out, self.dim_out], dim=1)
        q = q.reshape(B * self.num_heads, self.dim_head, -1).transpose(-1, -2)
        k = k.reshape(B * self.num_heads, self.dim_head, -1)
        v = v.reshape(B * self.num_heads, self.dim_head, -1).transpose(-1, -2)
        attn = (q @ k).softmax(dim=-1)
        out = (attn @ v).transpose(-1, -2).reshape(B, self.dim_out, H, W)
        return out
"""


def _entry(ns: dict[str, Any]) -> None:
    for heads, size in ((4, 3), (1, 3), (4, 1)):
        layer = ns["BottleneckAttn"](8, heads, 2)
        layer(torch.randn(2, 8, size, size))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_copy_names_the_factor_that_would_make_it_a_view(oracle: realcompare.SnippetOracle) -> None:
    out = oracle.answer("out") or {}
    assert out.get("is_view") is False, out
    assumes = out.get("assumes") or []
    assert "self.num_heads != 1" in assumes, out
    assert "H * W != 1" in assumes, out
