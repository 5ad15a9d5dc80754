"""Layers appended to a ModuleList, buffers, helper functions of sizes, and the grad and view
verdicts that depend on who calls a body.

* `self.layers = nn.ModuleList()` then `self.layers.append(Block(...))` in a loop (llama2.c):
  iterating it applies some number of Blocks, so `h = layer(h)` keeps what every Block keeps;
* `self.layers = nn.ModuleList([])` then `.append(nn.ModuleList([a, b]))`: iterated in pairs;
* `self.register_buffer("mask", t)`: `self.mask` is `t`;
* `self.latents = nn.Parameter(t)`: t's sizes are `self.latents.shape[i]` in every method
  (in `__init__`, only below that line);
* `precompute(dim, end)`, a function of sizes only: followed, its tensors have their dtype;
* `nn.Parameter(t, requires_grad=flag)` with a flag the analysis cannot see: not stated;
* a body called from the file with a tensor that requires grad, and by other code with one
  that does not: requires_grad is not stated from the file's call alone;
* `offsets[i]` with `i` unknown: an int index gives a view, a tensor index a copy: not stated;
* `default(None, h)`, a one-line helper given a tensor: followed;
* a parameter or buffer read in `forward` is on whatever device the module was moved to.

Checked for real (tests/realcode/compare.py): every stated field in every run.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "containers_and_buffers"

SOURCE = """
import torch
from torch import nn


def default(val, d):
    return val if val is not None else d


def precompute(dim, end):
    t = torch.arange(end)
    freqs = torch.outer(t, torch.ones(dim)).float()
    return freqs


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        out = x + self.fc(x)
        return out


class Net(nn.Module):
    def __init__(self, dim, depth, learned=False):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(depth):
            self.layers.append(Block(dim))
        self.register_buffer("table", precompute(dim, 16), persistent=False)
        self.scale = nn.Parameter(torch.ones(dim), requires_grad=learned)

    def forward(self, tokens, offsets):
        b, t = tokens.shape
        h = self.table[tokens]
        for layer in self.layers:
            h = layer(h)
        scaled = h * self.scale
        context = default(None, h)
        i = int(offsets.argmax())
        offset = offsets[i]
        return scaled, offset


class Pairs(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([Block(dim), Block(dim)]))

    def forward(self, x):
        for first, second in self.layers:
            x = first(x) + x
            x = second(x)
        return x


class Latents(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        grid = torch.randn(n, dim)
        self.total = grid.sum(0)
        self.latents = nn.Parameter(grid)

    def forward(self, b):
        x = self.latents.expand(b, -1, -1)
        return x


def helper(x, net):
    y = x * 2
    return y


def run(net, tokens):
    x = torch.randn(2, 4, requires_grad=True)
    z = helper(x, net)
    return z
"""


def _entry(ns: dict[str, Any]) -> None:
    for depth, learned in ((2, False), (0, True), (3, False)):
        net = ns["Net"](4, depth, learned)
        tokens = torch.randint(0, 16, (2, 5))
        scaled, _ = net(tokens, torch.tensor([1, 3, 2]))
        scaled.sum().backward()
        with torch.no_grad():
            net(tokens, torch.tensor([4, 0]))
        ns["run"](net, tokens)
        ns["helper"](torch.randn(2, 4), net)  # another caller: no grad
        ns["Pairs"](4, depth)(torch.randn(3, 4))
        ns["Latents"](depth + 2, 4)(depth + 1)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_module_list_built_by_append_is_iterated_as_its_layers(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    looped = next(a for p, a in oracle.answers.items() if p.name == "h" and lines[p.line - 1].strip() == "h = layer(h)") or {}
    assert looped.get("dtype") == "float32", looped


def test_a_buffer_is_the_tensor_registered(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    gathered = next(a for p, a in oracle.answers.items() if p.name == "h" and "self.table" in lines[p.line - 1]) or {}
    assert gathered.get("dtype") == "float32" and gathered.get("requires_grad") is False, gathered


def test_a_function_of_sizes_is_followed(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("t", "precompute") or {}).get("dtype") == "int64"


def test_grad_verdicts_that_depend_on_the_caller_are_not_stated(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("scaled", "forward") or {}).get("requires_grad") is None
    assert (oracle.answer("y", "helper") or {}).get("requires_grad") is None
    assert (oracle.answer("z", "run") or {}).get("requires_grad") is True


def test_an_unknown_index_gives_no_view_verdict(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("offset", "forward") or {}).get("is_view") is None


def test_a_one_line_helper_is_followed(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("context", "forward") or {}).get("dtype") == "float32"


def test_a_buffer_read_in_forward_has_no_device_stated(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    gathered = next(a for p, a in oracle.answers.items() if p.name == "h" and "self.table" in lines[p.line - 1]) or {}
    assert gathered.get("device") is None, gathered


def test_an_empty_module_list_appended_to_is_iterated_in_pairs(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    summed = next(a for p, a in oracle.answers.items() if p.name == "x" and lines[p.line - 1].strip() == "x = first(x) + x") or {}
    assert summed.get("requires_grad") is True, summed


def test_a_tensor_attributes_sizes_are_named_after_it(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    expanded = next(a for p, a in oracle.answers.items() if p.name == "x" and "self.latents.expand" in lines[p.line - 1]) or {}
    shape = expanded.get("shape") or []
    assert shape[:2] == ["b", "self.latents.shape[0]"], expanded
    assert shape[2] in ("self.latents.shape[1]", "self.total.shape[0]"), expanded  # equal sizes
