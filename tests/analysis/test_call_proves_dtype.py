"""What a call of the file's own module proves of its argument's dtype.

`a = self.attn(self.ln(x))` where `Attn.forward` passes its `x` to a Linear first: past that
line `x` is float32 in every run (a Linear raises on another dtype; the LayerNorm keeps it), so
`x + 1` is float32. Not where the body may return before the Linear (`Maybe`), nor where the
Linear is under a condition (`Gated`). A `Sequential` whose first dtype-checking layer is a
Conv proves the same (LeViT's FeedForward: `Conv2d, Hardswish, Dropout, Conv2d`). A method other
than `forward` given a tensor is followed too (mamba's `self.ssm(x)`).

Checked for real (tests/realcode/compare.py): every stated field in every run, with an int64
input through `Maybe`'s early return and `Gated`'s skipped branch.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "call_proves_dtype"

SOURCE = """
import torch
from torch import nn


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, d)

    def forward(self, x):
        y = self.qkv(x)
        return y


class Maybe(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x, skip):
        if skip:
            return x
        return self.proj(x)


class Gated(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x, use):
        out = self.proj(x) if use else x
        return out


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attn(d)
        self.ln = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Dropout(0.0), nn.Linear(d, d))
        self.maybe = Maybe(d)
        self.gated = Gated(d)

    def forward(self, x, z, w):
        a = self.attn(self.ln(x))
        b = x + 1
        m = self.maybe(z, z.dtype != torch.float32)
        e = z * 2
        g = self.gated(w, w.dtype == torch.float32)
        f = w * 2
        return a, b, m, e, g, f


class Stack(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Sequential(nn.Dropout(0.0), nn.Linear(d, d))
        self.proj = nn.Linear(d, d)

    def mix(self, x):
        h = self.proj(x)
        return h * 2

    def forward(self, x):
        s = self.ff(x) + x
        t = self.mix(s)
        return t
"""


def _entry(ns: dict[str, Any]) -> None:
    block = ns["Block"](3)
    block(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))
    block(torch.randn(2, 3), torch.arange(6).view(2, 3), torch.arange(6).view(2, 3))  # int64
    ns["Stack"](3)(torch.randn(2, 3))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_call_whose_body_starts_with_a_linear_proves_float32(oracle: realcompare.SnippetOracle) -> None:
    b = oracle.answer("b", "forward(self, x, z, w)") or {}
    assert b.get("dtype") == "float32", b


def test_no_proof_past_an_early_return_or_a_condition(oracle: realcompare.SnippetOracle) -> None:
    for name in ("e", "f"):
        answer = oracle.answer(name, "forward(self, x, z, w)") or {}
        assert answer.get("dtype") is None, (name, answer)


def test_a_sequential_and_a_method_other_than_forward(oracle: realcompare.SnippetOracle) -> None:
    s = oracle.answer("s", "forward(self, x)") or {}
    assert s.get("dtype") == "float32", s
    t = oracle.answer("t", "forward(self, x)") or {}
    assert t.get("dtype") == "float32", t
