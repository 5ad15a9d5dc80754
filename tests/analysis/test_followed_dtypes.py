"""A body reached only through the file's own calls gets the dtype those calls give it.

llama2.c's `RMSNorm.forward(x)` runs `self._norm(x.float()).type_as(x)`: the dtype of `x`.
`TransformerBlock.forward`'s own pass (its `x` of any dtype) calls it too, on `h = x + ...`, and that unknown
dtype used to win the join, though the file runs the block only from `Transformer.forward`,
where `x` is an embedding's float32 output. The block's followed passes make the same nested
calls with float32, so the own pass's say on the dtype is dropped. Its say on sizes and grad
facts is kept: the entry below also calls the norm directly with another rank and without grad.
"""

from __future__ import annotations

from typing import Any

import torch

from stridelens.server.analysis import analyze_source
from tests.realcode import compare as realcompare

NAME = "followed_dtypes"

SOURCE = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attention_norm = RMSNorm(dim, eps=1e-5)
        self.attention = nn.Linear(dim, dim)
        self.ffn_norm = RMSNorm(dim, eps=1e-5)
        self.feed_forward = nn.Linear(dim, dim)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Model(nn.Module):
    def __init__(self, vocab, dim, n_layers):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim) for _ in range(n_layers)])
        self.norm = RMSNorm(dim, eps=1e-5)

    def forward(self, tokens):
        h = self.emb(tokens)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        return h
"""


def _entry(ns: dict[str, Any]) -> None:
    for vocab, dim, n_layers, b, t in ((11, 8, 2, 2, 3), (7, 4, 1, 1, 5)):
        model = ns["Model"](vocab, dim, n_layers)
        model(torch.randint(0, vocab, (b, t))).sum().backward()
        # Another caller, another rank, no grad on the input.
        ns["RMSNorm"](dim, 1e-5)(torch.randn(t, dim))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_norm_body_has_the_callers_dtype(oracle: realcompare.SnippetOracle) -> None:
    output = oracle.answer("output", "forward(self, x)") or {}
    assert output.get("dtype") == "float32", output


def test_sizes_and_grad_still_hold_for_every_caller(oracle: realcompare.SnippetOracle) -> None:
    # The direct call has rank 2 and an input without grad: neither is stated for the body.
    output = oracle.answer("output", "forward(self, x)") or {}
    assert output.get("shape") is None, output
    assert output.get("requires_grad") is None, output


def test_a_file_that_changes_dtypes_keeps_the_body_unknown() -> None:
    code = SOURCE + "\n\ndef half_model():\n    return Model(11, 8, 2).half()\n"
    line = next(i for i, t in enumerate(code.splitlines(), 1) if "output = self._norm" in t)
    explanation = analyze_source(code).explain_at(line, 8)
    assert explanation is None or explanation.fact is None or explanation.fact.dtype is None
