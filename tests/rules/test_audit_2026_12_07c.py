"""The false-positive kinds of the on-by-default rules in the fresh audit 2026-12-07c
(bench/audits/fresh-audit-2026-12-07c.md), each snippet in the audited code's shape, analysed
through the real engine: the false-positive form is silent, the true bug still flagged, and
torch on CPU says which backward raises."""

from __future__ import annotations

import ast
import textwrap

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")


def _findings(src: str, code: str) -> list[int]:
    analysis = analyze_source(textwrap.dedent(src), "<snippet>")
    return [f.line for f in run_rules(analysis, select=[code]) if f.code == code]


# egnn's `OurSE3Transformer.forward` (a dict of tensors rescaled per key), face.evoLVe's
# `CurricularFace.forward` (a boolean-mask copy written back), and the true bug: a product
# saved a view that an index write then changes.
SL213_SNIPPET = """\
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.scalar_trick = nn.Parameter(torch.ones(1))

    def forward(self, f0, f1):
        h = {'0': f0, '1': f1}
        for layer in self.blocks:
            h = layer(h)
        for key in h:
            h[key] = h[key] * self.scalar_trick
        return h


class Curricular(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(in_features, out_features))
        self.register_buffer('t', torch.zeros(1))

    def forward(self, embeddings, label):
        cos_theta = torch.mm(embeddings, self.kernel)
        cos_theta = cos_theta.clamp(-1, 1)
        target_logit = cos_theta[torch.arange(0, embeddings.size(0)), label].view(-1, 1)
        mask = cos_theta > target_logit
        hard_example = cos_theta[mask]
        cos_theta[mask] = hard_example * (self.t + hard_example)
        return cos_theta


class Bug(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gain = nn.Parameter(torch.ones(8))

    def forward(self, x):
        out = self.fc(x)
        first = out[:, 0]
        first[0] = first[0] * self.gain[0]
        return out
"""


def test_sl213_a_dict_item_and_a_mask_copy_are_silent_and_a_saved_view_is_flagged() -> None:
    assert _findings(SL213_SNIPPET, "SL213") == [45]


def test_sl213_torch_agrees_only_the_saved_view_raises() -> None:
    scope: dict[str, object] = {}
    exec(compile(SL213_SNIPPET, "<snippet>", "exec"), scope)  # the test's own snippet
    torch.manual_seed(0)

    class Identity(torch.nn.Module):
        def forward(self, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v * 1.0 for k, v in h.items()}

    scaled = scope["Scaled"]([Identity()])  # type: ignore[operator]
    out = scaled(torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True))
    sum(v.sum() for v in out.values()).backward()

    curricular = scope["Curricular"](16, 10)  # type: ignore[operator]
    logits = curricular(torch.randn(8, 16), torch.randint(0, 10, (8,)))
    torch.nn.functional.cross_entropy(logits, torch.randint(0, 10, (8,))).backward()

    out = scope["Bug"]()(torch.randn(2, 8))  # type: ignore[operator]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_sl213_a_zero_dim_integer_index_is_still_a_view() -> None:
    # Why only a bool, rank >= 1 or list index counts as a copy.
    base = torch.randn(4, 3)
    assert base[torch.tensor(1)]._base is base
    assert base[torch.tensor([1, 2])]._base is None
    assert base[base > 0]._base is None


# face.evoLVe's backbone/EfficientNets.py: lines of pasted text at column 0 inside a class.
PASTED_TEXT = """\
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        y = x + 1
这是，简历
更多，文字
        return y

    @staticmethod
    def helper(x):
        return x * 2
"""


def test_sl001_text_pasted_at_column_zero_is_reported_once_per_line_and_the_class_goes_on() -> None:
    analysis = analyze_source(PASTED_TEXT, "<snippet>")
    assert [b.line for b in analysis.broken] == [7, 8]
    net = next(n for n in analysis.tree.body if isinstance(n, ast.ClassDef))
    helper = net.body[-1]
    assert getattr(helper, "name", None) == "helper"  # still a method of Net


def test_sl001_a_block_header_being_typed_keeps_its_own_place() -> None:
    analysis = analyze_source("def f(x):\n    return x\ndef g(x)\n    return x.t()\n", "<snippet>")
    assert [b.line for b in analysis.broken] == [3]
    first = analysis.tree.body[0]
    assert isinstance(first, ast.FunctionDef) and first.name == "f"
    assert len(first.body) == 1  # g's body is not taken into f
