"""Layers a module is built with, and lists built by appending.

- `PreNorm(dim, Attention(dim))` stores its argument as `self.fn = fn`: a call of that
  instance runs Attention's forward, with the caller's facts (perceiver, vit-pytorch).
- `ys = []; for ...: ys.append(y)` then `torch.stack(ys)`: a list of tensors like `y`
  (mamba-minimal's selective scan).
- CLIP's fp16-safe `class LayerNorm(nn.LayerNorm)` returns `super().forward(x.type(float32))`:
  float32 even in a file that calls `.half()`.
- A module whose forward is not followed returns a tensor that may be a view (a Linear of a
  3-d input is one): its memory is not said to be its own.

Checked for real (tests/realcode/compare.py): every stated field in every run.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "layers_built_with_layers"

SOURCE = """
import torch
from torch import nn


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        x = self.norm(x)
        return self.fn(x, **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x, context=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attn = (q @ k.transpose(-1, -2)).softmax(dim=-1)
        out = attn @ v
        return self.to_out(out)


class Scan(nn.Module):
    def forward(self, x):
        ys = []
        for i in range(x.shape[1]):
            y = x[:, i] * 2.0
            ys.append(y)
        stacked = torch.stack(ys, dim=1)
        counts = torch.full((2,), 3)
        flags = torch.full((2,), fill_value=True)
        return stacked, counts, flags


class HalfSafeNorm(nn.LayerNorm):
    def forward(self, x):
        orig_type = x.dtype
        ret = super().forward(x.type(torch.float32))
        return ret.type(orig_type)


class Model(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.embed = nn.Linear(dim, dim)
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([PreNorm(dim, Attention(dim)), PreNorm(dim, FeedForward(dim))]))
        self.scan = Scan()
        self.norm = HalfSafeNorm(dim)

    def forward(self, x):
        x = self.embed(x)
        for attn, ff in self.layers:
            h = attn(x)
            x = h + x
            x = ff(x) + x
        scanned, counts, flags = self.scan(x)
        normed = self.norm(x.half())
        opaque = self.layers[0][0](x)
        return scanned, normed, opaque


def make_half(model):
    return model.half()
"""


def _entry(ns: dict[str, Any]) -> None:
    model = ns["Model"](4, 2)
    model(torch.randn(2, 3, 4))
    with torch.no_grad():
        model(torch.randn(1, 5, 4))
    ns["make_half"](ns["Model"](4, 1))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_a_layer_given_to_the_constructor_is_followed(oracle: realcompare.SnippetOracle) -> None:
    # `attn(x)` of PreNorm(dim, Attention(dim)), through `self.fn(x, **kwargs)`: Attention's
    # output, a Linear's, which requires grad when autograd is on.
    h = oracle.answer("h") or {}
    assert h.get("requires_grad") is True, h


def test_a_stack_of_an_appended_list_has_the_items_facts(oracle: realcompare.SnippetOracle) -> None:
    stacked = oracle.answer("stacked") or {}
    assert stacked.get("is_view") is False, stacked


def test_a_full_takes_the_dtype_of_its_fill(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("counts") or {}).get("dtype") == "int64"
    assert (oracle.answer("flags") or {}).get("dtype") == "bool"


def test_super_forward_of_a_layer_norm_on_float32_is_float32(oracle: realcompare.SnippetOracle) -> None:
    ret = oracle.answer("ret") or {}
    assert ret.get("dtype") == "float32", ret


def test_a_module_call_not_followed_is_not_said_to_own_its_memory() -> None:
    # Why: a Linear of a 3-d input returns a view of its 2-d result (torch 2.13).
    out = torch.nn.Linear(4, 4)(torch.randn(2, 3, 4))
    assert out._base is not None
