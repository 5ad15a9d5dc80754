"""A parameter that holds a Python scalar keeps a tensor's shape and dtype through arithmetic.

llama2.c's RMSNorm adds `self.eps` (its constructor's `eps: float`, given `params.norm_eps`)
inside `torch.rsqrt(...)`. An unknown value there may be a tensor of other sizes; an argument
annotated `float`/`int`/`bool`, or defaulted to a float literal (`eps=1e-5`), is a scalar at
every call that type-checks, so `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` has
x's sizes and x's floating dtype.

Checked for real (tests/realcode/compare.py): the model runs on two sizes, float32 and float64.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "scalar_parameters"

SOURCE = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        normed = self._norm(x.float()).type_as(x)
        return normed * self.weight


class Model(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.emb = nn.Embedding(params.vocab, params.dim)
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)

    def forward(self, tokens):
        b, t = tokens.shape
        h = self.emb(tokens)
        out = self.norm(h)
        return out


def scaled(x, b, t, c, scale=0.5, shift: int = 1):
    a = x.view(b, t, c)
    squared = a.pow(2).mean(-1, keepdim=True) * scale + shift
    return squared
"""


def _entry(ns: dict[str, Any]) -> None:
    params = SimpleNamespace(vocab=11, dim=8, norm_eps=1e-5)
    model = ns["Model"](params)
    for b, t in ((2, 5), (1, 3)):
        model(torch.randint(0, 11, (b, t)))
        ns["scaled"](torch.randn(b * t * 4), b, t, 4)
        ns["scaled"](torch.randn(b * t * 4, dtype=torch.float64), b, t, 4, scale=2.0, shift=3)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_float_attribute_keeps_the_normalised_shape(oracle: realcompare.SnippetOracle) -> None:
    out = oracle.answer("out", "forward(self, tokens)") or {}
    # the last size is the weight's `dim` or the input's (broadcast): not named
    assert out.get("shape") == ["b", "t", None]
    assert out.get("dtype") == "float32"


def test_scalar_parameters_keep_shape_but_not_a_varying_dtype(oracle: realcompare.SnippetOracle) -> None:
    squared = oracle.answer("squared", "scaled") or {}
    assert squared.get("shape") == ["b", "t", 1]
    assert squared.get("dtype") is None  # float32 in one run, float64 in another
