"""A layer chosen by a condition the analysis does not decide (CLIP's ModifiedResNet
Bottleneck: `self.avgpool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()`).

Calling it gives what both options' outputs agree on: the rank, the batch and channel sizes
and the dtype stay; the pooled sizes (unknown stride) have no name. What one option proves of
its input (a Linear's weight dtype) is not carried to the other path.

Checked for real (tests/realcode/compare.py): every stated field in every run, both branches.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "module_choice"

SOURCE = """
import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.avgpool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
        self.conv2 = nn.Conv2d(planes, 2 * planes, 1, bias=False)

    def forward(self, x):
        out = self.bn1(self.conv1(x))
        pooled = self.avgpool(out)
        wide = self.conv2(pooled)
        return wide


class Head(nn.Module):
    def __init__(self, dim, project):
        super().__init__()
        self.proj = nn.Linear(dim, dim) if project else nn.Identity()

    def forward(self, x):
        y = self.proj(x)
        z = x * 2
        return y, z
"""


def _entry(ns: dict[str, Any]) -> None:
    for stride in (1, 2, 3):
        ns["Bottleneck"](4, stride)(torch.randn(2, 4, 6, 6))
    ns["Head"](3, True)(torch.randn(2, 3))
    ns["Head"](3, False)(torch.arange(6).view(2, 3))  # int64: fine through the Identity


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_chosen_layer_keeps_what_both_outputs_agree_on(oracle: realcompare.SnippetOracle) -> None:
    pooled = oracle.answer("pooled", "forward") or {}
    shape = pooled.get("shape") or []
    assert len(shape) == 4 and shape[0] == "x.shape[0]" and shape[1] is not None and shape[2:] == [None, None], pooled
    assert pooled.get("dtype") == "float32", pooled
    wide = oracle.answer("wide", "forward") or {}
    assert wide.get("shape") is not None and wide["shape"][0] == "x.shape[0]" and wide["shape"][2:] == [None, None], wide


def test_what_one_option_proves_of_the_input_is_not_carried(oracle: realcompare.SnippetOracle) -> None:
    """After `self.proj(x)`, a bare Linear would prove x has the weight's dtype (float32); with
    the Identity as the other option x may be anything (int64 in one run)."""
    lines = SOURCE.splitlines()
    z = next(a for p, a in oracle.answers.items() if p.name == "z" and "x * 2" in lines[p.line - 1]) or {}
    assert z.get("dtype") is None, z
