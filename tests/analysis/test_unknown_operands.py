"""An operand the analysis cannot tell from a tensor, and the methods torch has that it follows.

- `a.mul(w)`, `torch.cat([a, w])`, `torch.where(m, a, w)` of a detached `a` and a parameter `w`
  of unknown type: `w` may be an `nn.Parameter` (it is in one run below), so the result's
  requires_grad and layout are not stated. They were stated False / dense, wrong for that run.
- `torch.ones_like(g)` of an unknown `g` has `g`'s device, which is unknown.
- Lion's update under `no_grad`: `exp_avg.clone().mul_(b).add(g, alpha=...).sign_()` is the
  receiver of `sign_` (in place), and `(update * g) > 0` is bool in every run.
- A `dtype=torch.float32` parameter that no call in the file passes keeps its default in a file
  that never changes dtypes (minGPT's `EmbeddingStem`): the embedding's output is float32.

Checked for real (tests/realcode/compare.py): every stated field in every run.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "unknown_operands"

SOURCE = """
import torch
from torch import nn


def mix(x, w, m):
    a = x.detach()
    y = a.mul(w)
    c = torch.cat([a, w])
    r = torch.where(m, a, w)
    return y, c, r


@torch.no_grad()
def lion_update(g, exp_avg, beta1):
    update = exp_avg.clone().mul_(beta1).add(g, alpha=1.0 - beta1).sign_()
    align = (update * g) > 0
    ones = torch.ones_like(g)
    return update, align, ones


class Stem(nn.Module):
    def __init__(self, vocab, dim, dtype=torch.float32):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim, dtype=dtype)

    def forward(self, idx):
        emb = self.tok_emb(idx)
        return emb
"""


def _entry(ns: dict[str, Any]) -> None:
    x = torch.randn(2, 3)
    ns["mix"](x, torch.randn(2, 3), x > 0)
    ns["mix"](x, torch.nn.Parameter(torch.randn(2, 3)), x > 0)  # the result requires grad
    ns["lion_update"](torch.randn(4), torch.zeros(4), 0.9)
    ns["Stem"](10, 4)(torch.tensor([[1, 2, 3]]))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_maybe_tensor_operand_leaves_grad_and_layout_unstated(oracle: realcompare.SnippetOracle) -> None:
    for name in ("y", "c", "r"):
        answer = oracle.answer(name, "mix") or {}
        assert answer.get("requires_grad") is None, (name, answer)
        assert answer.get("contiguous") is None, (name, answer)


def test_lion_update_is_followed_under_no_grad(oracle: realcompare.SnippetOracle) -> None:
    update = oracle.answer("update", "lion_update") or {}
    assert update.get("requires_grad") is False, update
    align = oracle.answer("align", "lion_update") or {}
    assert align.get("dtype") == "bool" and align.get("requires_grad") is False, align
    ones = oracle.answer("ones", "lion_update") or {}
    assert ones.get("device") is None, ones


def test_a_dtype_default_nobody_passes_is_kept(oracle: realcompare.SnippetOracle) -> None:
    emb = oracle.answer("emb", "forward") or {}
    assert emb.get("dtype") == "float32", emb


def test_a_dtype_some_call_passes_is_not_assumed(tmp_path: Any) -> None:
    """The same class built once with `dtype=torch.long` in the file: no default is assumed."""
    source = SOURCE + "\n\ndef build():\n    return Stem(10, 4, dtype=torch.long)\n"
    answers = realcompare.answers_of(source, tmp_path / "passed.py")
    emb = next(a for p, a in answers.items() if p.name == "emb") or {}
    assert emb.get("dtype") is None, emb
