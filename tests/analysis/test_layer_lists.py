"""A ModuleList of different layers indexed by a loop's `i` (ConvNeXt's `downsample_layers`: a
stem `Sequential(Conv2d, LayerNorm)`, then three `Sequential(LayerNorm, Conv2d)`).

The list's item is one of those layers (a ModuleChoice); `self.layers[i](x)` gives what every
option's output agrees on: float32 (each option ends, or starts, with a Conv2d), and grad when
autograd is on. A Sequential whose first layer's sizes are not followed (an input of unknown
rank) still follows the file's own layer after it (`q`).

Checked for real (tests/realcode/compare.py): every stated field in every run.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "layer_lists"

SOURCE = """
import torch
from torch import nn


class ChannelNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        return (x - u) * self.weight[:, None, None]


class Net(nn.Module):
    def __init__(self, c, dims):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(c, dims[0], 2, stride=2), ChannelNorm(dims[0]))
        self.layers = nn.ModuleList()
        self.layers.append(self.stem)
        for i in range(2):
            self.layers.append(nn.Sequential(ChannelNorm(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, stride=2)))

    def forward(self, x):
        q = self.stem(x)
        for i in range(3):
            x = self.layers[i](x)
        return q, x
"""


def _entry(ns: dict[str, Any]) -> None:
    net = ns["Net"](3, [4, 5, 6])
    net(torch.randn(1, 3, 16, 16))
    with torch.no_grad():
        net(torch.randn(2, 3, 8, 8))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_an_item_of_a_list_of_different_layers(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    x = next(a for p, a in oracle.answers.items() if p.name == "x" and "self.layers[i](x)" in lines[p.line - 1]) or {}
    assert x.get("dtype") == "float32", x


def test_a_sequential_follows_its_own_layer_after_an_unsized_one(oracle: realcompare.SnippetOracle) -> None:
    q = oracle.answer("q", "forward") or {}
    assert q.get("dtype") == "float32", q
