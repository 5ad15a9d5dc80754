"""Ops that hand back their input itself, checked against real torch.

`F.dropout(x, p, training=False)` (or `p=0`) is `x`, not a new tensor; so is
`F.relu(x, inplace=True)` (any functional activation with `inplace`), `torch.relu_(x)` and
`torch.real(x)` of a real `x`. Under `no_grad` the result then still requires grad when `x`
does, and it shares `x`'s storage. The engine used to state these as new tensors that need no
grad ("its own storage", `requires_grad: false`): wrong facts on every eval-mode dropout.

Two kinds of check (the harness of test_wrong_facts_regressions.py): literal sizes, the
snippet run for real and every stated field compared with the real tensor; symbolic sizes, the
functions analysed as text and run for real in training and eval mode, with grad on and off.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.analysis.oracle import analyse, assert_stated_facts_hold, probes_of, run_for_real_all
from tests.realcode import compare as realcompare

# --------------------------------------------------------------------------- literal sizes

LITERAL = """
import torch
import torch.nn.functional as F

w = torch.randn(4, 4, requires_grad=True)
h = torch.randn(2, 4) @ w
with torch.no_grad():
    kept = F.dropout(h, 0.1, training=False)
    zero = F.dropout(h, 0.0)
    relu_in_place = F.relu(h, inplace=True)
    silu_in_place = F.silu(h, True)
    leaky_in_place = F.leaky_relu(h, 0.1, True)
    torch_dropout = torch.dropout(h, 0.1, False)
    sampled = F.dropout(h, 0.5, training=True)
real_part = torch.real(h)
"""


@pytest.fixture(scope="module")
def literal() -> tuple[dict[Any, list[Any]], Any]:
    return run_for_real_all(LITERAL), analyse(LITERAL)


@pytest.mark.parametrize("probe", probes_of(LITERAL), ids=lambda p: f"{p.line}:{p.name}")
def test_literal_facts_hold(literal: tuple[dict[Any, list[Any]], Any], probe: Any) -> None:
    real_values, analysis = literal
    assert_stated_facts_hold(analysis, real_values, probe)


def test_literal_results_that_are_their_input(literal: tuple[dict[Any, list[Any]], Any]) -> None:
    _, analysis = literal
    for name in ("kept", "zero", "relu_in_place", "silu_in_place", "leaky_in_place", "torch_dropout", "real_part"):
        probe = next(p for p in probes_of(LITERAL) if p.name == name)
        answer = analysis.explain_at(probe.line, probe.col).answer() or {}
        # `h` itself: it requires grad (no_grad does not change an existing tensor)
        assert answer.get("requires_grad") is True, (name, answer)
        assert answer.get("is_view") is False, (name, answer)


# --------------------------------------------------------------------------- symbolic sizes

NAME = "ops_returning_their_input"

SOURCE = '''"""Symbolic sizes only (a stridelens oracle input): nothing here calls these functions."""
import torch
import torch.nn.functional as F
from torch import nn


class Head(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            dropped = F.dropout(h, 0.1, self.training)
            kept = F.dropout(h, 0.1, training=False)
            activated = F.relu(h, inplace=True)
        return dropped + kept + activated


def unknown_mode(h: torch.Tensor, training: bool, inplace: bool):
    with torch.no_grad():
        maybe = F.dropout(h, 0.2, training)
        maybe_in_place = F.gelu(h) if inplace else F.relu(h, inplace)
        real_part = torch.real(h)
    return maybe, maybe_in_place, real_part
'''

SIZES = ((1, 3), (2, 5), (4, 1))


def _entry(ns: dict[str, Any]) -> None:
    for batch, dim in SIZES:
        head = ns["Head"](dim)
        x = torch.randn(batch, dim)
        head(x)  # training mode: a new tensor from the dropout
        head.eval()
        head(x)  # eval mode: the dropout hands back h itself, which requires grad
        h = torch.randn(batch, dim, requires_grad=True) * 2
        for training in (True, False):
            for inplace in (True, False):
                ns["unknown_mode"](h.clone(), training, inplace)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_symbolic_results_that_may_be_their_input(oracle: realcompare.SnippetOracle) -> None:
    for name, function in (("dropped", "forward"), ("maybe", "unknown_mode"), ("maybe_in_place", "unknown_mode")):
        answer = oracle.answer(name, function) or {}
        assert answer.get("requires_grad") is not False, (name, answer)
        assert answer.get("is_view") is None, (name, answer)
    # eval-mode dropout: `h` itself, the Linear's output, which requires grad under no_grad too
    kept = oracle.answer("kept", "forward") or {}
    assert kept.get("requires_grad") is True and kept.get("dtype") == "float32", kept
