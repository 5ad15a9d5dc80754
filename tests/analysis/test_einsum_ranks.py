"""einsum of operands of unknown shape, and einops.einsum (the pattern last, axes in words).

`torch.einsum('b i d, b j d -> b i j', q, k)` runs only where q and k have 3 dims: the result
has 3, its sizes those the operands share a name for (else none). einops.einsum is the same
contraction written `einsum(q, k, 'b i d, b j d -> b i j')`.

Checked for real (tests/realcode/compare.py) on several sizes, under grad and no_grad.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "einsum_ranks"

SOURCE = """
import torch
from einops import einsum


def attend(q, k, v):
    sim = torch.einsum('b i d, b j d -> b i j', q, k)
    attn = sim.softmax(dim=-1)
    out = einsum(attn, v, 'b i j, b j d -> b i d')
    return out


def scan(u, delta):
    b, l, d_in = u.shape
    deltaB_u = einsum(delta, u, 'b l d_in, b l d_in -> b l d_in')
    return deltaB_u
"""


def _entry(ns: dict[str, Any]) -> None:
    for b, i, j, d in ((2, 3, 4, 5), (1, 1, 6, 2)):
        q = torch.randn(b, i, d, requires_grad=True)
        ns["attend"](q, torch.randn(b, j, d), torch.randn(b, j, d)).sum().backward()
        with torch.no_grad():
            ns["attend"](q, torch.randn(b, j, d), torch.randn(b, j, d))
        ns["scan"](torch.randn(b, i, d), torch.randn(b, i, d))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_equation_gives_the_rank(oracle: realcompare.SnippetOracle) -> None:
    for name in ("sim", "attn", "out"):
        shape = (oracle.answer(name, "attend") or {}).get("shape")
        assert shape is not None and len(shape) == 3, (name, shape)


def test_einops_einsum_names_the_sizes_it_can(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("deltaB_u", "scan") or {}).get("shape") == ["b", "l", "d_in"]
