"""A forward called by the file's functions with grad on and under no_grad.

`train()` calls the model with autograd on, `evaluate()` and `generate()` under no_grad (the
nanoGPT shape). The forward's body states requires_grad only as "when autograd is on", never
as the training call's unconditional True; `torch.multinomial(...)` in `generate` is an int64
tensor that needs no grad, whatever it was given.

Checked for real (tests/realcode/compare.py): the functions run as the file's users run them.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "no_grad_callers"

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, idx):
        b, t = idx.shape
        h = self.emb(idx)
        logits = self.head(h)
        return logits


def train(model, idx):
    logits = model(idx)
    loss = logits.sum()
    loss.backward()
    return loss


@torch.no_grad()
def evaluate(model, idx):
    logits = model(idx)
    return logits


@torch.no_grad()
def generate(model, idx, steps):
    for _ in range(steps):
        logits = model(idx)[:, -1, :]
        probs = F.softmax(logits, dim=-1)
        top, top_idx = torch.topk(probs, 2)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx
"""


def _entry(ns: dict[str, Any]) -> None:
    model = ns["Model"]()
    for t in (3, 5):
        idx = torch.randint(0, 10, (2, t))
        ns["train"](model, idx)
        ns["evaluate"](model, idx)
        ns["generate"](model, idx, 2)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_forward_states_grad_only_when_autograd_is_on(oracle: realcompare.SnippetOracle) -> None:
    for name in ("h", "logits"):
        answer = oracle.answer(name, "forward") or {}
        if answer.get("requires_grad") is not None:
            assert "torch.is_grad_enabled()" in (answer.get("assumes") or []), (name, answer)


def test_sampled_indices_are_int64_without_grad(oracle: realcompare.SnippetOracle) -> None:
    answer = oracle.answer("idx_next", "generate") or {}
    assert answer.get("dtype") == "int64" and answer.get("requires_grad") is False, answer


def test_top_k_under_no_grad_needs_no_grad_and_its_indices_are_int64(oracle: realcompare.SnippetOracle) -> None:
    # (`model` is a parameter: the values' dtype is the unknown model's)
    top = oracle.answer("top", "generate") or {}
    assert top.get("requires_grad") is False, top
    top_idx = oracle.answer("top_idx", "generate") or {}
    assert top_idx.get("dtype") == "int64" and top_idx.get("requires_grad") is False, top_idx
