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
    deltaA = torch.exp(einsum(delta, A, 'b l d, d n -> b l d n'))
    return deltaA


def attend(q, k):
    scores = torch.einsum('bhid,bhjd->bhij', q, k)
    return scores


def spread(xs):
    out = rearrange(xs, '... d -> d ...')
    return out
"""


def _entry(ns: dict[str, Any]) -> None:
    for b, n, h, d in ((2, 3, 2, 4), (1, 5, 3, 2)):
        ns["split_heads"](torch.randn(b, n, h * d), h)
        ns["pool"](torch.randn(b, h, n, d))
        ns["scan_weights"](torch.randn(b, n, d), torch.randn(d, h))
        ns["attend"](torch.randn(b, h, n, d), torch.randn(b, h, n + 1, d))
        ns["spread"](torch.randn(b, n, d))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_rearrange_and_reduce_name_the_sizes(oracle: realcompare.SnippetOracle) -> None:
    q = oracle.answer("q") or {}
    assert q.get("shape") is not None and len(q["shape"]) == 4 and q["shape"][0] == "x.shape[0]", q
    pooled = oracle.answer("pooled") or {}
    assert pooled.get("shape") == ["x.shape[0]", "x.shape[1]"], pooled


def test_einsum_operands_get_their_ranks(oracle: realcompare.SnippetOracle) -> None:
    delta_a = oracle.answer("deltaA") or {}
    assert delta_a.get("shape") is not None and len(delta_a["shape"]) == 4, delta_a
    assert delta_a["shape"][0] == "delta.shape[0]" and delta_a["shape"][3] == "A.shape[1]", delta_a
    scores = oracle.answer("scores") or {}
    # `b` and `h` of q and k may each be 1 and broadcast: those sizes have no one name.
    assert scores.get("shape") is not None and scores["shape"][2:] == ["q.shape[2]", "k.shape[2]"], scores


def test_an_ellipsis_fixes_no_rank(oracle: realcompare.SnippetOracle) -> None:
    out = oracle.answer("out") or {}
    assert out.get("shape") is None, out
