"""SL214 against torch: every module the rule flags raises torch's device-mismatch error when
its input lives on CUDA, and every module it leaves alone runs. A fake CUDA device stands in
for the GPU here (in a subprocess: fake CUDA on a CPU-only build can abort the interpreter);
on a machine with CUDA, the same modules run for real."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

MODULES = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class Positions(nn.Module):
        def forward(self, x):
            pos = torch.arange(x.shape[2])
            return x + pos


    class OneElement(nn.Module):
        def forward(self, x):
            return x * torch.tensor([0.5])


    class Concat(nn.Module):
        def forward(self, x):
            cls = torch.zeros(x.shape[0], 1, x.shape[2])
            return torch.cat([cls, x], dim=1)


    class Scalar(nn.Module):
        def forward(self, x):
            return x * torch.tensor(0.5)


    class SameDevice(nn.Module):
        def forward(self, x):
            a = torch.ones(x.shape[0], x.shape[1], x.shape[2], device=x.device)
            return x + a + torch.zeros_like(x) + x.new_ones(x.shape)


    class Moved(nn.Module):
        def forward(self, x):
            pos = torch.arange(x.shape[2]).to(x.device)
            return x + pos


    class Embedded(nn.Module):
        def __init__(self):
            super().__init__()
            self.wpe = nn.Embedding(8, 4)

        def forward(self, x):
            pos = torch.arange(0, x.shape[2], dtype=torch.long)
            return x + self.wpe(pos)


    class Masked(nn.Module):
        def forward(self, x):
            mask = torch.ones(x.shape[0], x.shape[1], x.shape[2], dtype=torch.bool)
            return x.masked_fill(mask, 0.0)


    class Gathered(nn.Module):
        def forward(self, x):
            index = torch.zeros(x.shape[0], x.shape[1], 1, dtype=torch.long)
            return x.gather(2, index)


    class NoParameters(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.0)

        def forward(self, x):
            return self.drop(torch.zeros(x.shape[2])).sum() + x.sum()


    class TimesSize(nn.Module):
        def forward(self, x):
            offset = torch.arange(0, x.size(0)) * x.size(1)
            return x.sum() + offset.to(x.device).sum()
    '''
)
NAMES = ["Positions", "OneElement", "Concat", "Scalar", "SameDevice", "Moved", "Embedded", "Masked", "Gathered", "NoParameters", "TimesSize"]

RUNNER = textwrap.dedent(
    '''
    import json, sys, torch
    fake = sys.argv[1] == "fake"
    scope = {}
    exec(sys.stdin.read(), scope)
    verdicts = {}
    context = None
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode
        context = FakeTensorMode()
        context.__enter__()
    with torch.no_grad():
        x = torch.empty(2, 3, 4, device="cuda:0") if fake else torch.randn(2, 3, 4, device="cuda")
        for name in sys.argv[2:]:
            try:
                with torch.device(x.device):  # the model's parameters live with its input, as in training
                    module = scope[name]()
                module(x)
                verdicts[name] = False
            except Exception as err:
                if "same device" not in str(err):
                    raise
                verdicts[name] = True
    print(json.dumps(verdicts))
    '''
)


def flagged_classes() -> set[str]:
    analysis = analyze_source(MODULES)
    lines = {f.line for f in run_rules(analysis, select=["SL214"])}
    found = set()
    for name in NAMES:
        start = next(i for i, text in enumerate(MODULES.splitlines(), 1) if text.startswith(f"class {name}("))
        end = next((i for i, text in enumerate(MODULES.splitlines(), 1) if i > start and text.startswith("class ")), start + 99)
        if any(start < line < end for line in lines):
            found.add(name)
    return found


def torch_verdicts(mode: str) -> dict[str, bool]:
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, mode, *NAMES], input=MODULES, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rule_matches_fake_cuda() -> None:
    verdicts = torch_verdicts("fake")
    assert {name for name, raised in verdicts.items() if raised} == flagged_classes()
    assert flagged_classes() == {"Positions", "OneElement", "Concat", "Embedded", "Masked", "Gathered"}


@pytest.mark.cuda
def test_rule_matches_real_cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine: the fake-CUDA test stands in")
    verdicts = torch_verdicts("real")
    assert {name for name, raised in verdicts.items() if raised} == flagged_classes()
