"""The false-positive kind of the on-by-default rules in the fresh audit 2026-12-07f
(bench/audits/fresh-audit-2026-12-07f.md): learn2learn's ProMP examples call
`p.detach_().requires_grad_()` on each parameter. `detach_()` detaches `p` itself and returns
it, so the flag is set on `p`, not on a throwaway alias (SL216 took it for `detach()`). The
snippet is analysed through the real engine; torch says what `detach_()` returns."""

from __future__ import annotations

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")

SNIPPET = """\
import torch.nn as nn

m = nn.Linear(2, 2)
for p in m.parameters():
    p.detach_().requires_grad_()
for p in m.parameters():
    p.detach().requires_grad_()
"""


def test_sl216_is_silent_on_detach_in_place_and_flags_detach() -> None:
    analysis = analyze_source(SNIPPET, "<snippet>")
    assert [f.line for f in run_rules(analysis, select=["SL216"]) if f.code == "SL216"] == [7]


def test_torch_detach_in_place_returns_the_parameter_itself() -> None:
    p = torch.nn.Parameter(torch.randn(2))
    same = p.detach_()
    assert same is p
    same.requires_grad_()
    assert p.requires_grad and p.is_leaf
    alias = p.detach()
    alias.requires_grad_(False)
    assert alias is not p and p.requires_grad
