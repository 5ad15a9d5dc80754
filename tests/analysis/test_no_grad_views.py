"""Under `torch.no_grad()` a view of a tensor that requires grad still requires grad.

Measured on torch 2.13: `w[:, 0]`, `w.view(-1)`, `w.t()`, `w.chunk(2)[0]` of a parameter made
under no_grad have `requires_grad=True` (and no `grad_fn`); `w * 2` and a copying `reshape`
do not. The analysis said False for every result under no_grad: a wrong fact for the views.

Checked for real (tests/realcode/compare.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "no_grad_views"

SOURCE = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, 3))

    def peek(self):
        with torch.no_grad():
            w = self.weight
            column = w[:, 0]
            flat = w.view(-1)
            turned = w.t()
            half = w.chunk(2)[0]
            doubled = w * 2
            copied = turned.reshape(-1)
        return column, flat, turned, half, doubled, copied
"""


def _entry(ns: dict[str, Any]) -> None:
    for dim in (4, 6):
        model = ns["Model"](dim)
        model.peek()
        with torch.no_grad():
            model.peek()


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_views_of_a_parameter_require_grad_under_no_grad(oracle: realcompare.SnippetOracle) -> None:
    for name in ("column", "flat", "turned", "half"):
        assert (oracle.answer(name, "peek") or {}).get("requires_grad") is True, name


def test_new_tensors_under_no_grad_do_not(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("doubled", "peek") or {}).get("requires_grad") is False
    assert (oracle.answer("copied", "peek") or {}).get("requires_grad") in (False, None)
