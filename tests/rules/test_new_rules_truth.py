"""SL215, SL216 and SL217 checked against torch itself: each snippet is analysed, then run for
real on CPU, and what the rule's message claims must be what torch does (a flagged
`requires_grad` change raises or leaves the parameter as it was; clipping before `unscale_`
clips the scaled gradients; `.forward` skips the module's hooks). The silent look-alikes
must behave as the rule assumes (`p.float()` is `p`, so freezing through it works)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")

PRELUDE = "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"


def _findings(src: str, code: str) -> list[int]:
    source = PRELUDE + textwrap.dedent(src)
    offset = PRELUDE.count("\n")
    return [f.line - offset for f in run_rules(analyze_source(source, "<snippet>"), select=[code])]


def _run(src: str) -> dict[str, Any]:
    scope: dict[str, Any] = {}
    exec(compile(PRELUDE + textwrap.dedent(src), "<snippet>", "exec"), scope)  # the test's own snippet
    return scope


LEAF_ERROR = "you can only change requires_grad flags of leaf variables"

# (snippet, flagged, what torch does: "raises" or "param unchanged" / "param frozen")
REQUIRES_GRAD_CASES = [
    # a view of a parameter, grad on: raises
    ("emb = nn.Embedding(4, 3)\nemb.weight[0].requires_grad = False\n", True, "raises"),
    ("lin = nn.Linear(3, 2)\nlin.weight.T.requires_grad_(False)\n", True, "raises"),
    ("lin = nn.Linear(3, 2)\nlin.weight[:, :2].requires_grad = True\n", True, "raises"),
    # the same under no_grad: silent, the parameter stays trainable
    ("emb = nn.Embedding(4, 3)\nwith torch.no_grad():\n    emb.weight[:, :2].requires_grad = False\n", True, "unchanged"),
    ("lin = nn.Linear(3, 2)\nwith torch.no_grad():\n    lin.weight.t().requires_grad_(False)\n", True, "unchanged"),
    # through `.data` (transformers' dab_detr) / `.detach()`: silent, no effect
    ("emb = nn.Embedding(4, 3)\nemb.weight.data[:, :2].requires_grad = False\n", True, "unchanged"),
    ("lin = nn.Linear(3, 2)\nlin.weight.data.requires_grad = False\n", True, "unchanged"),
    ("lin = nn.Linear(3, 2)\nlin.weight.detach().requires_grad_(False)\n", True, "unchanged"),
    # a real copy to another dtype: raises with grad on
    ("lin = nn.Linear(3, 2)\nlin.weight.half().requires_grad = False\n", True, "raises"),
    ("lin = nn.Linear(3, 2)\nlin.weight.to(torch.float64).requires_grad_(False)\n", True, "raises"),
    # `requires_grad_(True)` on a view: a silent no-op
    ("lin = nn.Linear(3, 2)\nlin.weight.t().requires_grad_(True)\n", True, "unchanged"),
    # a non-leaf: `= True` and `requires_grad_(False)` raise
    ("w = torch.randn(3, requires_grad=True)\ny = w * 2\ny.requires_grad = True\n", True, "raises"),
    ("w = torch.randn(3, requires_grad=True)\ny = w.exp()\ny.requires_grad_(False)\n", True, "raises"),
    # look-alikes: legal, not flagged
    ("w = torch.randn(3, requires_grad=True)\ny = w * 2\ny.requires_grad_(True)\n", False, "ok"),  # a no-op
    ("lin = nn.Linear(3, 2)\nlin.weight.requires_grad = False\n", False, "frozen"),
    ("lin = nn.Linear(3, 2)\nlin.weight.float().requires_grad_(False)\n", False, "frozen"),  # `.float()` is `p`
    ("lin = nn.Linear(3, 2)\nlin.weight.contiguous().requires_grad_(False)\n", False, "frozen"),
    ("x = torch.randn(3)\ny = x * 2\ny.requires_grad = True\n", False, "ok"),  # no graph: a leaf
    ("w = torch.randn(3, requires_grad=True)\nwith torch.no_grad():\n    y = w * 2\n    y.requires_grad = True\n", False, "ok"),
    ("lin = nn.Linear(3, 2)\nleaf = lin.weight.detach().clone().requires_grad_(True)\n", False, "ok"),
]


@pytest.mark.parametrize(("src", "flagged", "behaviour"), REQUIRES_GRAD_CASES)
def test_sl216_matches_torch(src: str, flagged: bool, behaviour: str) -> None:
    lines = _findings(src, "SL216")
    assert bool(lines) is flagged, lines
    if flagged:
        assert lines == [src.rstrip("\n").count("\n") + 1]  # the last line, only
    if behaviour == "raises":
        with pytest.raises(RuntimeError, match=LEAF_ERROR):
            _run(src)
        return
    scope = _run(src)
    params = [t for v in scope.values() if isinstance(v, torch.nn.Module) for t in v.parameters()]
    if behaviour == "unchanged":
        assert params and all(p.requires_grad for p in params)
    elif behaviour == "frozen":
        assert scope["lin"].weight.requires_grad is False


def test_sl216_message_says_what_happens() -> None:
    src = "emb = nn.Embedding(4, 3)\nemb.weight.data[:, :2].requires_grad = False\n"
    (finding,) = run_rules(analyze_source(PRELUDE + src, "<snippet>"), select=["SL216"])
    assert "never `emb.weight`" in finding.message and "register_hook" in finding.message
    src = "emb = nn.Embedding(4, 3)\nemb.weight[0].requires_grad = False\n"
    (finding,) = run_rules(analyze_source(PRELUDE + src, "<snippet>"), select=["SL216"])
    assert LEAF_ERROR in finding.message and "no_grad" in finding.message


# --------------------------------------------------------------------------------- SL215
SCALER_STEP = """\
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)
loss = model(x).pow(2).sum()
scaler.scale(loss).backward()
{before}
{clip}
{after}
grads = torch.cat([p.grad.flatten() for p in model.parameters()])
scaler.step(optimizer)
scaler.update()
"""


def _step(clip: str, before: str = "", after: str = "") -> str:
    return SCALER_STEP.format(clip=clip, before=before or "pass", after=after or "pass")


NORM_CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
VALUE_CLIP = "torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)"
UNSCALE = "scaler.unscale_(optimizer)"


def test_sl215_clip_before_unscale_clips_the_scaled_gradients() -> None:
    bad = _step(NORM_CLIP, after=UNSCALE)
    good = _step(NORM_CLIP, before=UNSCALE)
    assert _findings(bad, "SL215") == [bad.splitlines().index(NORM_CLIP) + 1]
    assert _findings(good, "SL215") == []
    bad_norm = _run(bad)["grads"].norm().item()
    good_norm = _run(good)["grads"].norm().item()
    # Unscaled then clipped: the norm asked for. Clipped while scaled: that norm / scale.
    assert good_norm == pytest.approx(1.0, rel=1e-4)
    assert bad_norm == pytest.approx(1.0 / 1024.0, rel=1e-3)


def test_sl215_clip_value_before_unscale() -> None:
    bad = _step(VALUE_CLIP, after=UNSCALE)
    good = _step(VALUE_CLIP, before=UNSCALE)
    assert _findings(bad, "SL215") and not _findings(good, "SL215")
    assert _run(good)["grads"].abs().max().item() == pytest.approx(0.5)
    assert _run(bad)["grads"].abs().max().item() == pytest.approx(0.5 / 1024.0)


def test_sl215_without_any_unscale_step_uses_the_clipped_scaled_gradients() -> None:
    """No `unscale_` at all: `scaler.step` unscales after the clip, same result as above."""
    bad = _step(NORM_CLIP)
    assert _findings(bad, "SL215")
    src = bad.replace("grads = torch.cat", "before_step = [p.detach().clone() for p in model.parameters()]\ngrads = torch.cat")
    scope = _run(src)
    moved = torch.cat([(a - b).flatten() for a, b in zip(scope["before_step"], scope["model"].parameters(), strict=True)])
    # SGD moved the weights by lr * (clipped scaled grad / scale): a 1024x smaller step.
    assert moved.norm().item() == pytest.approx(0.1 / 1024.0, rel=1e-3)


def test_sl215_quick_fix_gives_the_unscaled_clip() -> None:
    from stridelens.server.rules.fixes import apply_fixes

    bad = _step(NORM_CLIP)
    source = PRELUDE + bad
    findings = run_rules(analyze_source(source, "<snippet>"), select=["SL215"])
    fixed = apply_fixes(source, findings, unsafe=True).source
    assert "scaler.unscale_(optimizer)\n" + NORM_CLIP in fixed
    assert not run_rules(analyze_source(fixed, "<snippet>"), select=["SL215"])
    scope: dict[str, Any] = {}
    exec(compile(fixed, "<fixed>", "exec"), scope)
    assert scope["grads"].norm().item() == pytest.approx(1.0, rel=1e-4)


# --------------------------------------------------------------------------------- SL217
def test_sl217_forward_skips_the_modules_own_hooks() -> None:
    src = """\
    calls = []
    net = nn.Sequential(nn.Linear(3, 3))
    net.register_forward_hook(lambda m, i, o: calls.append("outer"))
    net[0].register_forward_hook(lambda m, i, o: calls.append("child"))
    x = torch.randn(2, 3)
    direct = net.forward(x)
    called = calls[:]
    net(x)
    """
    assert _findings(src, "SL217") == [6]
    scope = _run(src)
    assert scope["called"] == ["child"]  # the child's hook fired, the module's own did not
    assert scope["calls"] == ["child", "child", "outer"]
