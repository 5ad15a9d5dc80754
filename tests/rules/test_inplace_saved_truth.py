"""SL213 against torch itself: what each op saves, and every snippet's verdict, come from
real autograd on CPU (mutate, then backward)."""

from __future__ import annotations

import textwrap

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules
from stridelens.server.rules.autograd.inplace_on_saved import MODULE_OPS, SAVES

torch = pytest.importorskip("torch")


def _call(op: str, x: object) -> object:
    fn = getattr(torch, op, None) or getattr(torch.nn.functional, op)
    return fn(x, dim=-1) if op in ("softmax", "log_softmax") else fn(x)


def _raises_at_backward(op: str, mutate: str) -> bool:
    leaf = torch.rand(4, 3, requires_grad=True)
    x = leaf * 1.0 + 0.5  # positive, so log/sqrt/rsqrt stay finite
    out = _call(op, x)
    (out if mutate == "output" else x).mul_(1.5)
    try:
        out.sum().backward()
    except RuntimeError as err:
        assert "modified by an inplace operation" in str(err)
        return True
    return False


@pytest.mark.parametrize("op", sorted(SAVES))
def test_the_saves_table_is_what_autograd_checks(op: str) -> None:
    saved = SAVES[op]
    assert _raises_at_backward(op, "output") == (saved == "output")
    assert _raises_at_backward(op, "input") == (saved == "input")


@pytest.mark.parametrize("module", sorted(MODULE_OPS))
def test_modules_run_the_op_the_table_says(module: str) -> None:
    layer = getattr(torch.nn, module)(dim=-1) if "Softmax" in module else getattr(torch.nn, module)()
    leaf = torch.rand(4, 3, requires_grad=True)
    x = leaf * 1.0 + 0.5
    out = layer(x)
    out.mul_(1.5)
    try:
        out.sum().backward()
        raised = False
    except RuntimeError:
        raised = True
    assert raised == (SAVES[MODULE_OPS[module]] == "output")


SNIPPETS = {
    "sigmoid output, mul_": ("y = torch.sigmoid(x)\ny.mul_(2)", True),
    "relu view, zero_": ("r = torch.relu(x * 1.0)\nv = r[:, 0]\nv.zero_()", True),
    "exp output, +=": ("z = torch.exp(x * 1.0)\nz += 1", True),
    "gelu output, +=": ("import torch.nn.functional as F\ng = F.gelu(x * 1.0)\ng += 1", False),
    "tanh clone, add_": ("c = torch.tanh(x).clone()\nc.add_(1)", False),
    "index write into a multiplied slice": (
        "w = torch.ones(3, requires_grad=True)\nout = x * 1.0\nout[..., 0] = out[..., 0] * w[0]",
        True,
    ),
    "module relu then residual": (
        "layer = torch.nn.Linear(3, 3)\nact = torch.nn.ReLU()\nh = act(layer(x))\nh += x",
        True,
    ),
    "module gelu then residual": (
        "layer = torch.nn.Linear(3, 3)\nact = torch.nn.GELU()\nh = act(layer(x))\nh += x",
        False,
    ),
    "sequential ending in sigmoid, mul_": (
        "h = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Sigmoid())(x)\nh.mul_(2)",
        True,
    ),
    "sequential ending in sigmoid, input without grad": (
        "h = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Sigmoid())(x.detach())\nh.mul_(2)",
        True,
    ),
    "sequential ending in gelu, mul_": (
        "h = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.GELU())(x)\nh.mul_(2)",
        False,
    ),
    "sequential of a sigmoid under no_grad": (
        "with torch.no_grad():\n    h = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Sigmoid())(x)\n    h.mul_(2)\ny = x * 2",
        False,
    ),
    "relu inplace after sigmoid": ("s = torch.sigmoid(x * 1.0)\nF = torch.nn.functional\nt = F.relu(s, inplace=True)", True),
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_rule_and_autograd_agree(name: str) -> None:
    body, raises = SNIPPETS[name]
    source = "import torch\nx = torch.randn(4, 3, requires_grad=True)\n" + textwrap.dedent(body) + "\n"
    flagged = [f for f in run_rules(analyze_source(source), select=["SL213"])]
    scope: dict[str, object] = {}
    exec(compile(source, "<snippet>", "exec"), scope)
    try:
        total = sum(v.sum() for k, v in scope.items() if isinstance(v, torch.Tensor) and v.grad_fn is not None)
        total.backward()
        raised = False
    except RuntimeError as err:
        assert "modified by an inplace operation" in str(err)
        raised = True
    assert raised == raises, "torch's verdict"
    assert bool(flagged) == raises, [f.message for f in flagged]
