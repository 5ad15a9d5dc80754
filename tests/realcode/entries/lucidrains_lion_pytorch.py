"""lucidrains/lion-pytorch: the Lion optimizer (lion_pytorch/lion_pytorch.py), its foreach version
(lion_pytorch/foreach.py) and the cautious variant (lion_pytorch/cautious_lion.py).

As the README uses it: `Lion(model.parameters(), lr=1e-4, weight_decay=1e-2)` in place of Adam,
then the usual loop (forward, loss, backward, opt.step(), opt.zero_grad()). Here a small
two-layer model on two batch sizes, a few steps each; with the README's options (weight decay,
decoupled weight decay, betas, the cautious factor), a parameter that gets no gradient (the
step filters it out), two parameter groups, and a step given a closure, as torch optimizers
take it. The Triton kernel (`use_triton=True`) needs CUDA and is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(6, 8)
        self.out = nn.Linear(8, 3)
        self.unused = nn.Parameter(torch.randn(4, 2))  # never in the loss: p.grad stays None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


def _loss(model: nn.Module, batch: int) -> torch.Tensor:
    return nn.functional.cross_entropy(model(torch.randn(batch, 6)), torch.randint(0, 3, (batch,)))


def _train(make: Callable[[_Model], torch.optim.Optimizer]) -> None:
    model = _Model()
    opt = make(model)
    for batch in (2, 3, 2, 5):
        loss = _loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
    # a closure re-evaluates the loss with gradients on, as torch.optim expects
    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = _loss(model, 4)
        loss.backward()
        return loss

    opt.step(closure)
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 6)).argmax(dim=-1)


def _groups(model: _Model, wd: float) -> list[dict[str, Any]]:
    return [
        {"params": [*model.hidden.parameters(), model.unused], "weight_decay": wd},
        {"params": model.out.parameters(), "lr": 3e-4, "betas": (0.95, 0.98)},
    ]


def _entry(**options: Any) -> Callable[[dict[str, Any]], None]:
    def run(ns: dict[str, Any]) -> None:
        lion = ns["Lion"]
        _train(lambda m: lion(m.parameters(), lr=1e-4, weight_decay=1e-2, **options))
        _train(lambda m: lion(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=1e-5, decoupled_weight_decay=True))
        _train(lambda m: lion(_groups(m, 0.1), lr=1e-3))
        _train(lambda m: lion(m.parameters()))  # defaults: no weight decay

    return run


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "lion_lion": _entry(),
    "lion_foreach": _entry(),
    "lion_cautious": _entry(cautious_factor=0.2),
}
