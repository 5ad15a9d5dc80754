"""The false-positive kind of the on-by-default rules in the fresh audit 2026-12-07d
(bench/audits/fresh-audit-2026-12-07d.md): stable-audio-tools' demo callback sets
`requires_grad = True` on the STFT of a detached tensor, so it is a leaf and `retain_grad()` is
a no-op there. The snippet is analysed through the real engine; torch says which is a leaf."""

from __future__ import annotations

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")

SNIPPET = """\
import torch


def demo(model, x):
    with torch.no_grad():
        fakes = model(x)
    fakes_stft = torch.stft(fakes.detach(), 16, window=torch.hann_window(16), return_complex=True).abs()
    fakes_stft.requires_grad = True
    loss = (fakes_stft * 2).sum()
    fakes_stft.retain_grad()
    loss.backward()
    return fakes_stft.grad


def bug(w, x):
    h = torch.tanh(x @ w)
    h.retain_grad()
    h.sum().backward()
    return h.grad
"""


def test_sl208_a_tensor_given_requires_grad_by_assignment_is_a_leaf() -> None:
    analysis = analyze_source(SNIPPET, "<snippet>")
    assert [f.line for f in run_rules(analysis, select=["SL208"]) if f.code == "SL208"] == [17]


def test_torch_allows_requires_grad_assignment_on_a_leaf_only() -> None:
    scope: dict[str, object] = {}
    exec(compile(SNIPPET, "<snippet>", "exec"), scope)  # the test's own snippet
    grad = scope["demo"](torch.nn.Linear(64, 64), torch.randn(64))  # type: ignore[operator]
    assert grad is not None  # the leaf's own .grad: retain_grad() added nothing
    non_leaf = torch.randn(3, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        non_leaf.requires_grad = True
