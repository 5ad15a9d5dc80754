"""`b, c, *spatial = x.shape` (guided-diffusion's AttentionPool2d and AttentionBlock) on a tensor of
unknown rank: `b` and `c` are its first sizes, a size after the star counts from the end, so
`x.reshape(b, c, -1)` has the shape `(b, c, ?)` whatever the rank.

Checked for real (tests/realcode/compare.py) on inputs of rank 3, 4 and 5.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "star_unpacking"

SOURCE = """
import torch


def pool(x):
    b, c, *spatial = x.shape
    x = x.reshape(b, c, -1)
    y = torch.cat([x.mean(dim=-1, keepdim=True), x], dim=-1)
    return y


def last(x):
    n, *rest, d = x.shape
    z = x.reshape(n, -1, d)
    return z
"""


def _entry(ns: dict[str, Any]) -> None:
    for shape in ((2, 3, 4), (2, 3, 4, 5), (1, 2, 3, 2, 2)):
        ns["pool"](torch.randn(*shape))
        ns["last"](torch.randn(*shape).transpose(0, 1))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_sizes_before_and_after_the_star(oracle: realcompare.SnippetOracle) -> None:
    y = oracle.answer("y", "pool") or {}
    assert y.get("shape") == ["b", "c", None], y
    z = oracle.answer("z", "last") or {}
    assert z.get("shape") == ["n", None, "d"], z
