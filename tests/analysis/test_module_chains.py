"""Facts through a chain of the file's own modules, as in nanoGPT's forward.

What used to stop them, each checked here against real runs of the snippet:

* `for block in self.blocks: x = block(x)`: the loop's two passes joined the block's output
  `(B, T, n_embd)` with its input `(B, T, C)` as different shapes, though a Linear had proved
  them equal; the join now reads both in the sizes proved equal.
* `att.masked_fill(self.bias[:, :, :T, :T] == 0, ...)`: the slice's `T <= block_size` followed
  every later tensor, and no caller could name it; a broadcast against `att` does not need it.
* `view(B, T, nh, C // nh)`: torch checks the element count, so `C % nh == 0` holds past it.
* a caller passing a tensor of unknown shape (`generate`'s `idx_cond`) to a body that unpacks it
  (`b, t = idx.size()`): the body names its sizes as in its own pass, and both callers agree.
* module outputs that are new tensors whatever the input (conv, norms, activations) are no view.
* `nn.Sequential(*[Block() for _ in range(n)])`: n >= 0 blocks (was: the identity, so the
  output was stated a view of a permuted input).
* `q, k, v = map(lambda t: rearrange(t, ...), qkv)`: the lambda's body for each item.
* a layer of a class defined further down the file, called on a parameter of unknown rank.
"""

from __future__ import annotations

from typing import Any

import torch

from stridelens.server.analysis import TensorFact, analyze_source
from tests.realcode import compare as realcompare

NAME = "module_chains"

SOURCE = """
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = q @ k.transpose(-2, -1)
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.c_proj(y)
        return y


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        h = self.fc(x)
        h = F.gelu(h)
        h = self.proj(h)
        return h


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx):
        b, t = idx.size()
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)
        return logits

    def generate(self, idx, steps):
        for _ in range(steps):
            idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size :]
            logits = self(idx_cond)
            nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            idx = torch.cat((idx, nxt), dim=1)
        return idx


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        x = x + self.fc(x)
        return x


class Tower(nn.Module):
    def __init__(self, width, layers):
        super().__init__()
        self.blocks = nn.Sequential(*[Residual(width) for _ in range(layers)])

    def forward(self, x):
        x = x.permute(1, 0, 2)
        x = self.blocks(x)
        return x


class Heads(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)

    def forward(self, x):
        qkv = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = map(lambda t: rearrange(t, "b n (h d) -> b h n d", h=self.heads), qkv)
        return q, k, v


class Conv(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.ReLU()

    def forward(self, x):
        out = self.bn(self.conv(x))
        out = self.act(out)
        return out


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = LateConv(3, 4)
        self.act = nn.ReLU()

    def forward(self, X):
        stem_out = self.act(self.conv(X))
        return stem_out


class LateConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return self.conv(x)
"""


class Config:
    def __init__(self, **kw: int) -> None:
        self.__dict__.update(kw)


def _entry(ns: dict[str, Any]) -> None:
    for n_embd, n_head, block_size, n_layer, b, t in ((8, 2, 6, 2, 2, 3), (12, 3, 5, 1, 1, 5), (6, 1, 4, 3, 3, 1)):
        config = Config(n_embd=n_embd, n_head=n_head, block_size=block_size, n_layer=n_layer, vocab_size=11)
        model = ns["GPT"](config)
        idx = torch.randint(0, 11, (b, t))
        model(idx).sum().backward()
        with torch.no_grad():
            model.generate(idx, block_size - t + 2)
        ns["Tower"](n_embd, n_layer)(torch.randn(b, t, n_embd))
        ns["MLP"](config)(torch.randn(t, n_embd))  # another caller, another rank
        ns["Heads"](n_embd, n_head)(torch.randn(b, t, n_embd))
        ns["Conv"](3)(torch.randn(b, 3, 4, 5))
        ns["Stem"]()(torch.randn(b, 3, 5, 6))
        ns["Conv"](2)(torch.randn(b, 5, 4, 2).permute(0, 3, 1, 2))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_block_loop_keeps_the_shape(oracle: realcompare.SnippetOracle) -> None:
    x = oracle.answer("x", "forward(self, idx)") or {}
    assert x.get("shape") is not None and len(x["shape"]) == 3 and x["shape"][:2] == ["b", "t"], x
    logits = oracle.answer("logits", "forward(self, idx)") or {}
    assert logits.get("shape") == ["b", "t", "self.head.out_features"], logits


def test_the_mask_and_the_heads_split_are_no_assumptions(oracle: realcompare.SnippetOracle) -> None:
    att = oracle.answer("att", "forward(self, x)") or {}
    assert att.get("shape") == ["B", "self.n_head", "T", "T"], att
    for name in ("att", "y"):
        answer = oracle.answer(name, "forward(self, x)") or {}
        assert not any("<=" in a or "%" in a for a in answer.get("assumes") or []), (name, answer)


def test_the_mlp_body_states_what_holds_for_every_caller(oracle: realcompare.SnippetOracle) -> None:
    # GPT reaches the MLP with 3-d input, a direct caller with 2-d input: the body's `h` has
    # the weight's dtype for both, and no rank (was the last call's rank 3: wrong for the other).
    h = oracle.answer("h", "forward(self, x)") or {}
    assert h.get("dtype") == "float32", h
    assert h.get("shape") is None, h


def test_module_outputs_are_new_tensors(oracle: realcompare.SnippetOracle) -> None:
    out = oracle.answer("out", "forward(self, x)") or {}
    assert out.get("is_view") is False, out


def test_a_sequential_of_a_repeated_block_is_not_the_identity(oracle: realcompare.SnippetOracle) -> None:
    # `nn.Sequential(*[Residual(w) for _ in range(n)])`: its output is not the permuted view it
    # was given (CLIP's Transformer); with n unknown, is_view is not stated, the shape is.
    lines = SOURCE.splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "x = self.blocks(x)" in t)
    answer = next(a for p, a in oracle.answers.items() if p.line == line) or {}
    assert answer.get("is_view") is not True, answer
    assert answer.get("shape") == ["x.shape[0]", "x.shape[1]", "x.shape[2]"], answer


def test_layer_outputs_are_float32_where_the_file_never_changes_dtypes(oracle: realcompare.SnippetOracle) -> None:
    # Parameters are torch's default float32; Linear/Conv/Embedding require their input to match.
    for name, function in (("logits", "forward(self, idx)"), ("h", "forward(self, x)"), ("out", "forward(self, x)")):
        assert (oracle.answer(name, function) or {}).get("dtype") == "float32", name


def _logits_with(extra: str) -> TensorFact:
    """The fact of GPT.forward's `logits` in SOURCE with `extra` code appended."""
    code = SOURCE + extra
    line = next(i for i, t in enumerate(code.splitlines(), 1) if "logits = self.head(x)" in t)
    explanation = analyze_source(code).explain_at(line, 8)
    assert explanation is not None and explanation.fact is not None
    return explanation.fact


def test_a_file_that_changes_dtypes_gets_no_default_dtype() -> None:
    assert _logits_with("\n\ndef half_model(config):\n    return GPT(config).half()\n").dtype is None


def test_grad_facts_in_a_forward_hold_when_autograd_is_on(oracle: realcompare.SnippetOracle) -> None:
    # The entry runs the model in a training step and under no_grad (generate): the fact is
    # True with its condition, checked in the grad runs only.
    logits = oracle.answer("logits", "forward(self, idx)") or {}
    assert logits.get("requires_grad") is True and "torch.is_grad_enabled()" in logits.get("assumes", []), logits


def test_a_file_that_freezes_parameters_states_no_assumed_grad() -> None:
    frozen = _logits_with("\n\ndef freeze(model):\n    for p in model.parameters():\n        p.requires_grad = False\n")
    assert frozen.stated_requires_grad is None


def test_map_of_a_lambda_gives_each_item(oracle: realcompare.SnippetOracle) -> None:
    # vit-pytorch's `q, k, v = map(lambda t: rearrange(t, ...), qkv)`
    line = next(i for i, t in enumerate(SOURCE.splitlines(), 1) if "q, k, v = map(" in t)
    for name in ("q", "k", "v"):
        answer = next(a for p, a in oracle.answers.items() if p.line == line and p.name == name) or {}
        assert answer.get("shape") is not None and answer["shape"][1] == "self.heads", (name, answer)


def test_a_layer_of_a_class_defined_further_down_is_followed(oracle: realcompare.SnippetOracle) -> None:
    # fast-neural-style's TransformerNet builds ConvLayer, defined after it; its input `X`
    # has no known rank: the layer's forward still gives the caller a float32 new tensor.
    answer = next(a for p, a in oracle.answers.items() if p.name == "stem_out") or {}
    assert answer.get("is_view") is False and answer.get("dtype") == "float32", answer
