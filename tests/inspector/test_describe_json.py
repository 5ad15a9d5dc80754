"""`describe_json` writes its card by hand (one f-string, the chain's text remembered by its rows).
Whatever it writes must be, byte for byte, what the generic JSON encoder writes for `describe`'s
dict: the VS Code client, `inspect` and the notebook magics all parse this text."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from stridelens.inspector import probe, probe_describe


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


# A node type whose name JSON must escape (an identifier may be any Unicode letter).
Dobro = type("Dobro\u00e7", (torch.autograd.Function,), {"forward": Twice.forward, "backward": Twice.backward})


def _leaf_with_grad() -> torch.Tensor:
    w = torch.randn(3, 4, requires_grad=True)
    (w * 3).sum().backward()
    return w


def _retained() -> torch.Tensor:
    x = torch.randn(5, requires_grad=True)
    y = x.exp()
    y.retain_grad()
    y.sum().backward(retain_graph=True)
    return y


def _after_backward() -> torch.Tensor:
    x = torch.randn(4, 4, requires_grad=True)
    loss = (x @ x).tanh().sum()
    loss.backward()  # frees the saved tensors
    return loss


def _modified_after_save() -> torch.Tensor:
    x = torch.randn(6, requires_grad=True)
    y = x.sigmoid()
    z = y * 2
    with torch.no_grad():
        y.add_(1)  # sigmoid's saved result changed in place: a problem note
    return z


def _branching() -> torch.Tensor:
    a = torch.randn(8, 8, requires_grad=True)
    b = torch.randn(8, 8, requires_grad=True)
    h = a @ b
    return (h.relu() + h.sigmoid() * a).mean()


def _stats_tensor() -> torch.Tensor:
    x = torch.randn(10)
    x[0] = float("nan")
    x[1] = float("inf")
    return x


KINDS: dict[str, Callable[[], Any]] = {
    "plain": lambda: torch.randn(64, 128),
    "scalar": lambda: torch.tensor(3.5),
    "empty": lambda: torch.empty(0, 3),
    "int64": lambda: torch.arange(12),
    "bool": lambda: torch.ones(4, dtype=torch.bool),
    "complex": lambda: torch.randn(3, dtype=torch.complex64),
    "transposed view": lambda: torch.randn(64, 128).t()[3:],
    "expanded": lambda: torch.randn(3, 1).expand(3, 5),
    "channels_last": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    "parameter": lambda: torch.nn.Parameter(torch.randn(4)),
    "leaf with grad": _leaf_with_grad,
    "non-leaf retaining grad": _retained,
    "3-op graph": lambda: ((torch.randn(64, 128) @ torch.randn(128, 32, requires_grad=True)).relu() * 2).sum(),
    "branching graph": _branching,
    "custom Function": lambda: Twice.apply(torch.randn(3, requires_grad=True)).sum(),
    "escaped node name": lambda: Dobro.apply(torch.randn(3, requires_grad=True)).sum(),
    "after backward": _after_backward,
    "modified after save": _modified_after_save,
    "meta": lambda: torch.empty(2, 3, device="meta"),
    "sparse coo": lambda: torch.randn(3, 3).to_sparse(),
    "sparse csr": lambda: torch.randn(3, 3).to_sparse_csr(),
    "nested": lambda: torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)]),
    "quantized": lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8),
    "not a tensor": lambda: [1, 2],
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_card_text_is_the_generic_encoders(kind: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors' prototype warning
        t = KINDS[kind]()
    for _ in range(2):  # cold caches (first node of its type, first chain), then warm ones
        text = probe_describe.describe_json(t)
        assert text == probe._json(probe_describe.describe, t, False)
        assert json.loads(text)["ok"] is (kind != "not a tensor")


@pytest.mark.parametrize("kind", ["plain", "3-op graph", "complex", "bool"])
def test_card_with_stats_is_the_generic_encoders(kind: str) -> None:
    t = KINDS[kind]() if kind != "plain" else _stats_tensor()
    assert probe_describe.describe_json(t, True) == probe._json(probe_describe.describe, t, True)


def test_expression_card_names_the_base_as_the_generic_encoder_would() -> None:
    base = torch.randn(8, 16)
    frame = {"base": base, "v": base.t()[2:], "w": base[1:].t()[:, 1:], "fresh": torch.randn(4, 4)[1:]}
    for expr in ("v", "w", "fresh", "base", "v[0]", "nope", "1 +"):  # (v[0]: a new view, same storage)
        text = probe_describe.describe_expr_json(expr, frame, {})
        assert text == probe._json(probe_describe.describe_expr, expr, frame, {}, False)
    assert json.loads(probe_describe.describe_expr_json("v", frame, {}))["result"]["base"]["name"] == "base"


def test_remembered_chains_stay_bounded_and_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_describe, "CHAIN_TEXTS_KEPT", 2)
    monkeypatch.setattr(probe_describe, "_CHAIN_TEXTS", {})
    x = torch.randn(5, requires_grad=True)
    graphs = [x.exp().sum(), x.sin().sum(), x.cos().mean(), (x * 2).tanh().sum(), x.exp().sum()]
    for g in graphs * 2:
        assert probe_describe.describe_json(g) == probe._json(probe_describe.describe, g, False)
        assert len(probe_describe._CHAIN_TEXTS) <= 2
