"""The false-positive kinds of the on-by-default rules in the fresh audit of 2026-12-07
(bench/audits/fresh-audit-2026-12-07.md), each snippet in the audited code's shape, analysed
through the real engine: the false-positive form is silent, the true bug still flagged, and
where the verdict rests on what torch does, torch is asked on CPU."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")


def _findings(src: str, code: str) -> list[tuple[int, str]]:
    analysis = analyze_source(textwrap.dedent(src), "<snippet>")
    return [(f.line, f.message) for f in run_rules(analysis, select=[code]) if f.code == code]


# ------------------------------------------------------------------------ SL102
# Informer2020 models/embed.py, Time-Series-Library layers/Embed.py: a circular-padded Conv1d
# of a permuted input. The padding builds a new tensor from any layout first.
SL102_PADDING = """\
import torch
from torch import nn

class Embed(nn.Module):
    def __init__(self, c_in, d_model, mode):
        super().__init__()
        self.circular = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular")
        self.replicate = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="replicate")
        self.unknown = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode=mode)
        self.zeros = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1)

    def forward(self, x):
        a = self.circular(x.permute(0, 2, 1))
        b = self.replicate(x.permute(0, 2, 1))
        c = self.unknown(x.permute(0, 2, 1))
        d = self.zeros(x.permute(0, 2, 1))
        return a + b + c + d
"""


def test_sl102_a_circular_padding_copies_first_so_no_hidden_copy_is_reported() -> None:
    assert [line for line, _ in _findings(SL102_PADDING, "SL102")] == [14, 16]


def _copies(run: Callable[[], object]) -> int:
    from torch.profiler import profile

    with profile() as prof:
        run()
    return sum(e.name in ("aten::copy_", "aten::clone") for e in prof.events())


@pytest.mark.parametrize(("mode", "explicit_adds_a_copy"), [("circular", True), ("replicate", False), ("zeros", False)])
def test_sl102_what_an_explicit_contiguous_costs_per_padding_mode(mode: str, explicit_adds_a_copy: bool) -> None:
    """The finding says the conv copies anyway: true for zeros/replicate (the explicit copy
    replaces the hidden one), false for circular (the explicit one comes on top)."""
    conv = torch.nn.Conv1d(4, 8, 3, padding=1, padding_mode=mode)
    x = torch.randn(2, 10, 4).permute(0, 2, 1)
    assert (_copies(lambda: conv(x.contiguous())) > _copies(lambda: conv(x))) is explicit_adds_a_copy


# PCT_Pytorch model.py Local_op: `permute(0, 1, 3, 2)` then `reshape(-1, d, s)`; the message
# named `b * n == 1` as a way out, but merging the leading dims leaves the swap in place.
SL102_PCT = """\
import torch
from torch import nn

class Local(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv1d(c, 8, kernel_size=1, bias=False)

    def forward(self, x):
        b, n, s, d = x.size()
        x = x.permute(0, 1, 3, 2)
        x = x.reshape(-1, d, s)
        return self.conv1(x)
"""


def test_sl102_names_only_the_sizes_that_make_the_tensor_contiguous() -> None:
    [(line, message)] = _findings(SL102_PCT, "SL102")
    assert line == 13
    assert "unless `d == 1` or `s == 1`" in message and "b * n" not in message
    for b, n, s, d, contiguous in [(1, 1, 4, 3, False), (2, 3, 4, 1, True), (2, 3, 1, 3, True)]:
        x = torch.randn(b, n, s, d).permute(0, 1, 3, 2).reshape(-1, d, s)
        assert x.is_contiguous() is contiguous, (b, n, s, d)


# ------------------------------------------------------------------------ SL213
# pytorch-book Chapter13/model.py: `generate`, called only under `@t.no_grad()` in another file,
# writes in place into a sigmoid's output. Nobody in the file decides its grad mode.
SL213_MODES = """\
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Conv2d(4, 2, 1)

    def generate(self, x):
        cls_pred = torch.sigmoid(self.head(x))
        keep = (cls_pred > 0.5).float()
        cls_pred *= keep
        return cls_pred.cpu().numpy()

    def train_step(self, x, opt):
        h = torch.sigmoid(self.head(x))
        h *= 2
        h.sum().backward()
        opt.step()

    def _decode(self, x):
        h = torch.sigmoid(self.head(x))
        h *= 2
        return h

    def forward(self, x):
        return self._decode(x)
"""


def test_sl213_is_silent_where_the_file_does_not_decide_the_grad_mode() -> None:
    """`generate` (no caller here) is silent; a method that calls backward, and a helper only
    `forward` calls, are on the training path and stay flagged."""
    assert [line for line, _ in _findings(SL213_MODES, "SL213")] == [17, 23]


def test_sl213_the_flagged_forms_raise_in_backward_and_generate_runs_under_no_grad() -> None:
    scope: dict[str, object] = {}
    exec(compile(SL213_MODES, "<snippet>", "exec"), scope)  # the test's own snippet
    model = scope["Model"]()  # type: ignore[operator]
    x = torch.randn(1, 4, 3, 3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        model(x).sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        model.train_step(x, torch.optim.SGD(model.parameters(), lr=0.1))
    with torch.no_grad():
        assert model.generate(x).shape == (1, 2, 3, 3)


# ------------------------------------------------------- the second audit, 2026-12-07b
# pytorch_geometric_temporal evolvegcno_example.py: `retain_grad()` on parameters (leaves).
SL208_LEAVES = """\
import torch
from torch import nn

def inspect(model, x):
    for param in model.parameters():
        param.retain_grad()
    w = torch.randn(3, requires_grad=True)
    w.retain_grad()
    h = x * 2
    h.retain_grad()
    e = torch.tanh(model(x))
    e.retain_grad()
    return h, e
"""


def test_sl208_only_a_non_leaf_is_flagged() -> None:
    assert [line for line, _ in _findings(SL208_LEAVES, "SL208")] == [10, 12]


def test_sl208_retain_grad_does_nothing_on_a_leaf_and_keeps_a_non_leaf_gradient() -> None:
    scope: dict[str, object] = {}
    exec(compile(SL208_LEAVES, "<snippet>", "exec"), scope)  # the test's own snippet
    model = torch.nn.Linear(3, 3)
    h, e = scope["inspect"](model, torch.randn(2, 3, requires_grad=True))  # type: ignore[operator]
    (h.sum() + e.sum()).backward()
    assert all(p.is_leaf and not p.retains_grad for p in model.parameters())
    assert h.retains_grad and h.grad is not None and e.retains_grad


# Point-NN models/point_pn.py: an in-place division of a tensor `abs` saved, where the tensor
# comes from a forward's raw input (point coordinates, which never require grad).
SL213_RAW_INPUT = """\
import torch
from torch import nn

class Local(nn.Module):
    def forward(self, xyz, idx):
        knn_xyz = xyz[:, idx]
        knn_xyz /= torch.abs(knn_xyz).max(dim=-1, keepdim=True)[0]
        return knn_xyz
"""


def test_sl213_an_unknown_input_is_not_taken_to_require_grad() -> None:
    assert _findings(SL213_RAW_INPUT, "SL213") == []
    scope: dict[str, object] = {}
    exec(compile(SL213_RAW_INPUT, "<snippet>", "exec"), scope)  # the test's own snippet
    local = scope["Local"]()  # type: ignore[operator]
    idx = torch.tensor([0, 2])
    local(torch.randn(2, 4, 3), idx)  # raw coordinates: runs, and nothing to backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        local(torch.randn(2, 4, 3, requires_grad=True) * 1, idx).sum().backward()
