"""SL101, SL103 and SL203 checked against torch itself: each snippet is analysed, then run
for real on CPU. A flagged `view` must raise, a flagged `reshape` must copy (new data_ptr),
a flagged second backward must fail; the silent look-alikes must succeed / not copy."""

from __future__ import annotations

import textwrap

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")

VIEW_CASES = [
    ("x = torch.randn(2, 3, 4)\nout = x.transpose(0, 1).view(-1)", True),
    ("x = torch.randn(2, 3, 4)\nout = x.permute(2, 0, 1).view(4, 6)", False),
    ("x = torch.randn(2, 3, 4)\nout = x.permute(0, 2, 1).view(2, 12)", True),
    ("x = torch.randn(2, 3, 4)\nout = x.permute(0, 2, 1).view(2, 4, 3, 1)", False),
    ("x = torch.randn(4, 3).t()\nout = x.view(12)", True),
    ("x = torch.randn(4, 3).t()\nout = x.view(3, 2, 2)", False),
    ("x = torch.randn(1, 5, 7)\nout = x.transpose(0, 1).view(-1)", False),
    ("x = torch.randn(8, 6)[:, :3]\nout = x.view(24)", True),
    ("x = torch.randn(8, 6)[:, :3]\nout = x.view(8, 3, 1)", False),
    ("x = torch.randn(2, 3, 4, 5)\nout = x.permute(0, 2, 3, 1).view(2, 20, 3)", False),
    ("x = torch.randn(2, 3, 4, 5)\nout = x.permute(0, 2, 3, 1).view(2, 60)", True),
    ("x = torch.randn(6, 4).unsqueeze(1).expand(6, 3, 4)\nout = x.view(18, 4)", True),
    ("import torch.nn.functional as F\nx = F.relu(torch.randn(3, 5).t())\nout = x.view(15)", True),
]

RESHAPE_CASES = [
    ("x = torch.randn(4, 8, 16)\nout = x.transpose(1, 2).reshape(4, -1)", True),
    ("x = torch.randn(4, 8, 16)\nout = x.reshape(32, 16)", False),
    ("x = torch.randn(4, 8, 16)\nout = x.permute(0, 2, 1).reshape(4, 128)", True),
    ("x = torch.randn(4, 8, 16)\nout = x.permute(0, 2, 1).reshape(4, 16, 8)", False),
    ("x = torch.randn(4, 8, 16)\nout = torch.reshape(x.permute(1, 0, 2), (-1,))", True),
    ("x = torch.randn(4, 8, 16)\nout = x[:, :4].reshape(4, 4, 16)", False),
    ("x = torch.randn(4, 8, 16)\nout = x[:, :, :4].reshape(-1)", True),
]

BACKWARD_CASES = [
    ("w = torch.randn(3, requires_grad=True)\nloss = (w * w).sum()\nloss.backward()\nloss.backward()", True),
    ("w = torch.randn(3, requires_grad=True)\nloss = (w * w).sum()\nloss.backward(retain_graph=True)\nloss.backward()", False),
    ("w = torch.randn(3, requires_grad=True)\nloss = (w * w).sum()\nloss.backward()\nloss = (w * w).sum()\nloss.backward()", False),
    ("w = torch.randn(3, requires_grad=True)\nloss = (w.exp() * w).sum()\nfor _ in range(2):\n    loss.backward()", True),
    ("w = torch.randn(3, requires_grad=True)\nfor _ in range(2):\n    loss = (w.exp() * w).sum()\n    loss.backward()", False),
    (
        "from torch import nn\nm = nn.Linear(3, 3)\n"
        "def step(x):\n    out = m(x)\n    loss = (out * out).mean()\n    loss.backward()\n    loss.backward()\n"
        "step(torch.randn(2, 3))",
        True,
    ),
]


def _flagged(src: str, code: str) -> bool:
    source = "import torch\n" + textwrap.dedent(src) + "\n"
    return any(f.code == code for f in run_rules(analyze_source(source, "<snippet>"), select=[code]))


def _run(src: str) -> dict[str, object]:
    scope: dict[str, object] = {"torch": torch}
    exec(compile("import torch\n" + src, "<snippet>", "exec"), scope)  # the test's own snippet
    return scope


@pytest.mark.parametrize(("src", "expect"), VIEW_CASES)
def test_sl101_matches_torch(src: str, expect: bool) -> None:
    assert _flagged(src, "SL101") is expect
    raised = False
    try:
        _run(src)
    except RuntimeError as err:
        assert "view size is not compatible" in str(err)
        raised = True
    assert raised is expect


@pytest.mark.parametrize(("src", "expect"), RESHAPE_CASES)
def test_sl103_matches_torch(src: str, expect: bool) -> None:
    assert _flagged(src, "SL103") is expect
    scope = _run(src)
    out, x = scope["out"], scope["x"]
    copied = out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()  # type: ignore[attr-defined]
    assert copied is expect


@pytest.mark.parametrize(("src", "expect"), BACKWARD_CASES)
def test_sl203_matches_torch(src: str, expect: bool) -> None:
    assert _flagged(src, "SL203") is expect
    failed = False
    try:
        _run(src)
    except RuntimeError as err:
        assert "backward through the graph a second time" in str(err)
        failed = True
    assert failed is expect
