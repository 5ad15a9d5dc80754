"""The sampling step of nanoGPT/llama2.c's `generate`, over symbolic sizes:
`logits[:, [-1], :]` (a list index keeps the dim: a copy of length 1), `torch.topk(logits,
min(top_k, logits.size(-1)))` (k an int nobody can name: rank and dtypes stay) and
`torch.multinomial(probs, num_samples=1)` (int64 of shape (*probs.shape[:-1], 1)).
Checked for real (tests/realcode/compare.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "sampling_step"

SOURCE = """
import torch
import torch.nn.functional as F


def sample(h, top_k):
    B, T, C = h.shape
    last = h[:, [-1], :]
    logits = last[:, -1, :]
    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
    logits[logits < v[:, [-1]]] = -float('Inf')
    probs = F.softmax(logits, dim=-1)
    idx_next = torch.multinomial(probs, num_samples=1)
    return idx_next
"""


def _entry(ns: dict[str, Any]) -> None:
    for b, t, c, k in ((2, 3, 5, 2), (1, 4, 3, 7)):
        ns["sample"](torch.randn(b, t, c), k)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_list_index_keeps_the_dim(oracle: realcompare.SnippetOracle) -> None:
    last = oracle.answer("last") or {}
    assert last.get("shape") == ["B", 1, "C"] and last.get("is_view") is False, last


def test_topk_of_an_unnamed_k_keeps_rank_and_dtype(oracle: realcompare.SnippetOracle) -> None:
    v = oracle.answer("v") or {}
    assert v.get("shape") == ["B", None], v


def test_multinomial_gives_int64_samples(oracle: realcompare.SnippetOracle) -> None:
    idx = oracle.answer("idx_next") or {}
    assert idx.get("shape") == ["B", 1] and idx.get("dtype") == "int64" and idx.get("requires_grad") is False, idx
