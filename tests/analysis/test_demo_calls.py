"""A model file's own demo call (`test()`, a `__main__` block) is one run among others.

Released model files (kuangliu/pytorch-cifar, timm, ...) end with a `test()` that builds the
model and calls it on `torch.randn(1, 3, 32, 32)`; training scripts elsewhere call the same
forward with batch 128, under `no_grad` in their eval loops. The forward's body must state what
holds for every caller: sizes named from its input (`x.shape[0]`), no requires_grad from the
demo's grad mode, dtype or device. The demo's own lines keep the exact answer of their call.

Checked for real: the snippet is analysed as text, then run by an entry that calls the forward
with other batch sizes, in a training step and under `no_grad` (tests/realcode/compare.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.realcode import compare as realcompare

NAME = "demo_calls"

SOURCE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        h = self.fc(x)
        out = self.act(h)
        flat = out.view(out.size(0), -1)
        return flat


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def forward(self, x):
        y = self.net(x)
        return y


def test():
    net = Net()
    x = torch.randn(2, 8)
    y = net(x)
    print(y.size())


if __name__ == "__main__":
    model = Wrapped()
    z = model(torch.randn(3, 8))
"""


def _entry(ns: dict[str, Any]) -> None:
    for batch in (5, 1, 7):
        net = ns["Net"]()
        net(torch.randn(batch, 8)).sum().backward()
        with torch.no_grad():
            net(torch.randn(batch, 8))
            ns["Wrapped"]()(torch.randn(batch + 1, 8))
    ns["test"]()


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> realcompare.SnippetOracle:
    return realcompare.snippet_oracle(SOURCE, NAME, _entry, tmp_path_factory.mktemp(NAME))


def test_every_probe_ran(oracle: realcompare.SnippetOracle) -> None:
    probes = [p for p in oracle.run.runs if p.name in ("h", "out", "flat", "y")]
    assert probes and all(oracle.run.runs[p] for p in probes)


def test_no_wrong_facts(oracle: realcompare.SnippetOracle) -> None:
    if oracle.wrong_lines():
        pytest.fail("wrong facts:\n" + "\n".join(oracle.wrong_lines()), pytrace=False)


def test_the_forward_states_sizes_from_its_input(oracle: realcompare.SnippetOracle) -> None:
    for name in ("h", "out", "flat"):
        answer = oracle.answer(name, "forward") or {}
        assert answer.get("shape") == ["x.shape[0]", 4], (name, answer)
        # Other callers run it on cuda and with grad on and off; the dtype is the Linear's
        # float32 weight's (the file changes no dtype), not the demo's randn.
        assert answer.get("dtype") == "float32" and answer.get("device") is None, name
        assert answer.get("requires_grad") is None, name


def test_the_demo_keeps_its_exact_answer(oracle: realcompare.SnippetOracle) -> None:
    y = oracle.answer("y", "test") or {}
    assert y.get("shape") == [2, 4] and y.get("strides") == [4, 1]
    z = next(a for p, a in oracle.answers.items() if p.name == "z") or {}
    assert z.get("shape") == [3, 4]


def test_a_main_guard_and_its_else_are_two_branches() -> None:
    import ast

    from stridelens.server.analysis import analyze_source

    code = (
        "import torch\n"
        "if __name__ == '__main__':\n    x = torch.zeros(2)\nelse:\n    x = torch.zeros(3)\n"
        "y = x\n"
    )
    analysis = analyze_source(code)
    y = next(n for n in ast.walk(analysis.tree) if isinstance(n, ast.Name) and n.id == "y")
    fact = analysis.fact_of(y)
    assert fact is not None and fact.shape is None  # (2,) on one path, (3,) on the other
