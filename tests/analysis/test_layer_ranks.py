"""The rank a forward's layers prove, and sizes nobody can name.

* `out = F.relu(self.bn1(self.conv1(x)))`: BatchNorm2d raises on anything but 4 dims and the
  conv keeps the rank, so `x` has 4 dims in every run past that line; with `stride=stride` a
  constructor parameter, the output's spatial sizes have no name: `[x.shape[0], C, null, null]`;
* a conv alone proves nothing (it takes 3 or 4 dims): run here with both;
* `b, n, _, h = *x.shape, self.heads` (vit-pytorch): x has 3 dims; `(y, *y.chunk(2, -1))` is a
  tuple of three tensors;
* `out.view(out.size(0), -1)` of a parameter (only a tensor has `size(0)`): 2 dims, the first
  `out.shape[0]`;
* `h.flatten(1)` of a tensor of unknown rank: 2 dims (a lower rank raises); the Linear after
  it proves the second is its in_features;
* an if/else whose branches give the same rank but other sizes (`(b, 2 * n)`, `(b, n)`) keeps
  the rank and the sizes they agree on: `(b, null)`.

Checked for real (tests/realcode/compare.py), with several batch sizes, strides and ranks.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "layer_ranks"

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(cout)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return out


class Plain(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return y


def pick(x, wide):
    b, n = x.shape
    if wide:
        z = torch.cat([x, x], 1)
    else:
        z = x * 2
    w = z + 1
    return w


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        h = self.conv(x)
        f = h.flatten(1)
        logits = self.fc(f)
        return logits


def classify(out):
    flat = out.view(out.size(0), -1)
    return flat


def heads(x, h):
    b, n, _, hh = *x.shape, h
    y = x.transpose(0, 1)
    parts = (y, *y.chunk(2, dim=-1))
    whole, left, right = parts
    return whole, left, right
"""


def _entry(ns: dict[str, Any]) -> None:
    for batch, stride in ((2, 1), (3, 2), (1, 2)):
        block = ns["Block"](3, 8, stride)
        block(torch.randn(batch, 3, 9, 7)).sum().backward()
        with torch.no_grad():
            block.eval()(torch.randn(batch + 1, 3, 5, 5))
    plain = ns["Plain"](3, 4)
    plain(torch.randn(2, 3, 6, 6))
    plain(torch.randn(3, 6, 6))  # unbatched: a conv takes it
    for wide in (True, False):
        ns["pick"](torch.randn(3, 6), wide)
    head = ns["Head"]()
    head(torch.randn(2, 3, 3, 3)).sum().backward()
    head(torch.randn(5, 3, 3, 3))
    ns["classify"](torch.randn(2, 3, 4))
    ns["classify"](torch.randn(5, 7))
    for shape in ((2, 5, 8), (1, 3, 4)):
        ns["heads"](torch.randn(*shape), 4)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_batchnorm2d_proves_four_dims(oracle: realcompare.SnippetOracle) -> None:
    shape = (oracle.answer("out", "forward") or {}).get("shape")
    assert shape is not None and len(shape) == 4 and shape[0] == "x.shape[0]" and shape[2:] == [None, None], shape


def test_a_conv_alone_proves_no_rank(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    y = next(a for p, a in oracle.answers.items() if p.name == "y" and "self.conv(x)" in lines[p.line - 1]) or {}
    assert y.get("shape") is None, y


def test_branches_of_one_rank_keep_it(oracle: realcompare.SnippetOracle) -> None:
    joined = (oracle.answer("w", "pick") or {}).get("shape")
    assert joined == ["b", None], joined


def test_a_spread_shape_gives_the_rank(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("y", "heads") or {}).get("shape") == ["n", "b", "x.shape[2]"]
    assert (oracle.answer("left", "heads") or {}).get("is_view") is True


def test_a_view_of_a_parameter_spells_its_rank(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("flat", "classify") or {}).get("shape") == ["out.shape[0]", None]


def test_flatten_spells_its_rank(oracle: realcompare.SnippetOracle) -> None:
    shape = (oracle.answer("f", "forward") or {}).get("shape")
    assert shape is not None and len(shape) == 2 and shape[1] == 8, shape
