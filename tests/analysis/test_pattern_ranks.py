"""An einops or einsum pattern fixes the rank of a parameter it is given: any other rank raises.

`rearrange(x, 'b n (h d) -> b h n d', h=h)` in a function whose `x` nothing else describes:
`x` has 3 dims in every run that gets past that line, so its sizes get names (`x.shape[i]`)
and what follows has a shape. Checked against real runs, with a caller of other sizes.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "pattern_ranks"

SOURCE = """
import torch
from einops import einsum, rearrange, reduce


def split_heads(x, h):
    q = rearrange(x, 'b n (h d) -> b h n d', h=h)
    return q


def pool(x):
    pooled = reduce(x, 'b c h w -> b c', 'mean')
    return pooled


def scan_weights(delta, A):
    d, n = A.shape
    deltaA = torch.exp(einsum(delta, A, 'b l d, d n -> b l d n'))
    return deltaA


def spread(xs):
    out = rearrange(xs, '... d -> d ...')
    return out
"""


def _entry(ns: dict[str, Any]) -> None:
    for b, n, h, d in ((2, 3, 2, 4), (1, 5, 3, 2)):
        ns["split_heads"](torch.randn(b, n, h * d), h)
        ns["pool"](torch.randn(b, h, n, d))
        ns["scan_weights"](torch.randn(b, n, d), torch.randn(d, h))
        ns["spread"](torch.randn(b, n, d))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_rearrange_and_reduce_name_the_sizes(oracle: realcompare.SnippetOracle) -> None:
    q = oracle.answer("q") or {}
    assert q.get("shape") is not None and len(q["shape"]) == 4 and q["shape"][0] == "x.shape[0]", q
    pooled = oracle.answer("pooled") or {}
    assert pooled.get("shape") == ["x.shape[0]", "x.shape[1]"], pooled


def test_einsum_operands_keep_the_sizes_their_letters_share(oracle: realcompare.SnippetOracle) -> None:
    # No names of its own for `delta`: its letters take A's sizes where A has them.
    delta_a = oracle.answer("deltaA") or {}
    assert delta_a.get("shape") is not None and len(delta_a["shape"]) == 4, delta_a
    assert delta_a["shape"][2:] == ["d", "n"], delta_a


def test_an_ellipsis_fixes_no_rank(oracle: realcompare.SnippetOracle) -> None:
    out = oracle.answer("out") or {}
    assert out.get("shape") is None, out
