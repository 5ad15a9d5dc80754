"""A `-1` in `reshape`/`view` is an exact quotient in every run past the call: torch raises
("shape '[2, -1]' is invalid for input of size 5") where the other sizes do not divide the
numel. So the shape after it is stated with no `%` condition to meet, as llama2.c's rotary
embedding needs: `xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)`. The same for an
einops group split, `rearrange(x, 'b n (h d) -> b h n d', h=h)`.
Checked for real (tests/realcode/compare.py), with a head size that does not divide (it raises
there, and the run records nothing past it).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.realcode import compare as realcompare

NAME = "reshape_holes"

SOURCE = """
import torch
from einops import rearrange


def rotate(x, n_heads):
    bsz, seqlen, dim = x.shape
    xq = x.view(bsz, seqlen, n_heads, dim // n_heads)
    xq_r, xq_i = xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)
    pairs = xq.reshape(bsz, -1, 2)
    return xq_r * 2 - xq_i, pairs


def heads(x, h):
    q = rearrange(x, 'b n (h d) -> b h n d', h=h)
    return q
"""


def _entry(ns: dict[str, Any]) -> None:
    for b, t, dim, heads in ((2, 3, 8, 2), (1, 4, 12, 3), (2, 2, 12, 2)):
        ns["rotate"](torch.randn(b, t, dim), heads)
        ns["heads"](torch.randn(b, t, dim), heads)
    with pytest.raises(RuntimeError):
        ns["rotate"](torch.randn(1, 2, 6, dtype=torch.float64), 2)  # head size 3: no pairs


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_shape_after_a_hole_needs_no_condition(oracle: realcompare.SnippetOracle) -> None:
    for name in ("xq_r", "xq_i", "pairs"):
        answer = oracle.answer(name) or {}
        assert answer.get("shape") is not None and None not in answer["shape"][:2], (name, answer)
        assert not any("%" in a for a in answer.get("assumes") or []), (name, answer)
    assert len((oracle.answer("xq_r") or {})["shape"]) == 4


def test_an_einops_group_split_needs_no_condition(oracle: realcompare.SnippetOracle) -> None:
    # einops raises where `h` does not divide the grouped axis.
    q = oracle.answer("q") or {}
    assert q.get("shape") is not None and q["shape"][:3] == ["x.shape[0]", "h", "x.shape[1]"], q
    assert not any("%" in a for a in q.get("assumes") or []), q
