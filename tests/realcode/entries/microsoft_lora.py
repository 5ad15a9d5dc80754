"""microsoft/LoRA: loralib/layers.py, the LoRA layers (Embedding, Linear, MergedLinear, Conv).

As the repository's README and its GPT-2 example (examples/NLG) use them: a small GPT-2-style
language model whose token embedding, fused qkv projection (MergedLinear with
enable_lora=[True, False, True] and fan_in_fan_out, like GPT-2's Conv1D), output projection and an
image stem (Conv2d) are LoRA layers (its Conv1d/Conv3d shape B @ A as a 2-D kernel and fail); only the LoRA parameters train
(mark_only_lora_as_trainable). Training steps on two batch shapes, then eval() merges the
low-rank update into the weights (forward under torch.no_grad()), and train() unmerges it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def _model(ns: dict[str, Any], vocab: int, dim: int, r: int) -> nn.Module:
    lora = ns

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = lora["MergedLinear"](dim, 3 * dim, r=r, lora_alpha=8, lora_dropout=0.1, enable_lora=[True, False, True], fan_in_fan_out=True, merge_weights=True)
            self.c_proj = lora["Linear"](dim, dim, r=r, lora_alpha=8, lora_dropout=0.1)
            self.ln = nn.LayerNorm(dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.c_attn(self.ln(x)).split(dim, dim=2)
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.c_proj(y)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = lora["Embedding"](vocab, dim, r=r, lora_alpha=8)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.head = lora["Linear"](dim, vocab, r=r, lora_alpha=8, fan_in_fan_out=True)
            self.image_stem = lora["Conv2d"](3, dim, 3, r=2, lora_alpha=2, padding=1)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return Model()


def _mark_only_lora_as_trainable(model: nn.Module) -> None:
    # loralib/utils.py (bias="none")
    for n, p in model.named_parameters():
        if "lora_" not in n:
            p.requires_grad = False


def _loralib_layers(ns: dict[str, Any]) -> None:
    vocab, dim = 13, 16
    model = _model(ns, vocab, dim, r=4)
    _mark_only_lora_as_trainable(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for cycle in range(2):
        model.train()  # unmerges what eval() merged
        for b, t in ((2, 5), (3, 8)):
            idx = torch.randint(0, vocab, (b, t))
            logits = model(idx)
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), torch.randint(0, vocab, (b * t,)))
            loss = loss + model.image_stem(torch.randn(b, 3, t, t + 1)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()  # merges B @ A into the frozen weights
        with torch.no_grad():
            model(torch.randint(0, vocab, (4, 6 + cycle)))
            model.image_stem(torch.randn(2, 3, 7, 5))
    # r = 0: the plain layers (no LoRA parameters), and a MergedLinear with LoRA on one slot
    plain = _model(ns, vocab, dim, r=0)
    plain(torch.randint(0, vocab, (2, 4))).sum().backward()
    merged = ns["MergedLinear"](dim, 2 * dim, r=2, enable_lora=[False, True])
    merged(torch.randn(3, 2, dim)).sum().backward()
    merged.eval()
    with torch.no_grad():
        merged(torch.randn(2, dim))
    merged.train()


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {"loralib_layers": _loralib_layers}
