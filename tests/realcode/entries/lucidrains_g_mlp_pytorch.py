"""lucidrains/g-mlp-pytorch: gMLP, gMLPVision (g_mlp_pytorch/g_mlp_pytorch.py) and the
AutoregressiveWrapper that train.py wraps a causal gMLP in (g_mlp_pytorch/autoregressive_wrapper.py).

As the README uses them: gMLP as a token model (num_tokens, seq_len, causal, heads, the tiny
attention `attn_dim`, the circulant spatial weights, token shifting, layer dropout through
`prob_survival`) and gMLPVision as an image classifier; a training step (cross-entropy,
backward, Adam step) on two batch sizes and predictions under torch.no_grad() in eval mode.
As train.py uses the wrapper: `AutoregressiveWrapper(gMLP(..., causal=True))`, the loss from
`model(batch)`, backward, an Adam step, then `model.generate(inp, length)` with its top-k
filtering, from a 1-d prompt and from a batch, with an end token. The wrapper's net is the
repository's own gMLP, loaded from the verbatim g_mlp_pytorch.py next to it.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.realcode.driver import SOURCES


def _tokens(model: nn.Module, vocab: int, seq_len: int, batches: tuple[int, ...] = (2, 3)) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model.train()
    for batch in batches:
        logits = model(torch.randint(0, vocab, (batch, seq_len)))
        loss = F.cross_entropy(logits.transpose(1, 2), torch.randint(0, vocab, (batch, seq_len)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, vocab, (4, seq_len))).argmax(dim=-1)


def _g_mlp(ns: dict[str, Any]) -> None:
    random.seed(0)
    gmlp = ns["gMLP"]
    # the README's token model: two heads, the tiny attention, tanh gating
    model = gmlp(num_tokens=11, dim=16, depth=2, seq_len=6, heads=2, ff_mult=2, attn_dim=8, act=nn.Tanh())
    _tokens(model, 11, 6)
    # causal, circulant spatial weights, token shifting; the layer dropout drops all layers
    # of some steps (one is then kept)
    model = gmlp(num_tokens=9, dim=12, depth=3, seq_len=5, causal=True, circulant_matrix=True, shift_tokens=1, prob_survival=0.3)
    _tokens(model, 9, 5, batches=(2, 3, 2, 3))
    # non-causal token shifting (left and right), circulant weights, no attention
    model = gmlp(num_tokens=7, dim=12, depth=2, seq_len=4, heads=3, ff_mult=2, circulant_matrix=True, shift_tokens=1)
    _tokens(model, 7, 4)
    # causal attention and gating on a sequence shorter than seq_len; no token embedding
    model = gmlp(dim=8, depth=2, seq_len=7, causal=True, attn_dim=4, prob_survival=0.5)
    model(torch.randn(2, 5, 8)).sum().backward()

    # the README's vision model: patches of square and rectangular images
    for size, patch, heads in ((8, 4, 1), ((12, 8), (4, 2), 2)):
        model = ns["gMLPVision"](image_size=size, patch_size=patch, num_classes=5, dim=16, depth=2, heads=heads, ff_mult=2, attn_dim=8, prob_survival=0.9)
        h, w = (size, size) if isinstance(size, int) else size
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
        model.train()
        for batch in (2, 3):
            loss = F.cross_entropy(model(torch.randn(batch, 3, h, w)), torch.randint(0, 5, (batch,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 3, h, w)).argmax(dim=-1)


def _load_gmlp() -> Any:
    spec = importlib.util.spec_from_file_location("realcode_gmlp_net", SOURCES / "gmlp_g_mlp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gMLP


def _autoregressive_wrapper(ns: dict[str, Any]) -> None:
    gmlp = _load_gmlp()
    vocab, seq_len = 20, 8  # top_k keeps int((1 - 0.9) * 20) = 1 logit (1 - 0.9 is 0.0999...)
    model = ns["AutoregressiveWrapper"](gmlp(num_tokens=vocab, dim=16, seq_len=seq_len, depth=2, causal=True))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for batch in (2, 3):  # train.py: sequences of seq_len + 1 tokens
        model.train()
        loss = model(torch.randint(0, vocab, (batch, seq_len + 1)))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        model.eval()
        with torch.no_grad():  # validation
            model(torch.randint(0, vocab, (batch, seq_len + 1)))
    # train.py: a 1-d prompt, longer generation than the context (the window slides)
    model.generate(torch.randint(0, vocab, (3,)), 7)
    model.generate(torch.randint(0, vocab, (2, 4)), 3, temperature=0.7, filter_thres=0.8)
    # an end token never drawn, then one drawn at once
    eos_model = ns["AutoregressiveWrapper"](gmlp(num_tokens=20, dim=8, seq_len=6, depth=1, causal=True))
    eos_model.generate(torch.randint(0, 20, (2, 3)), 4, eos_token=-1, filter_thres=0.5)
    with torch.no_grad():
        net = eos_model.net.eval()
        prompt = torch.randint(0, 20, (1, 3))
        token = int(net(prompt)[:, -1, :].argmax())
    # top_k keeps one logit: the draw is the argmax, and the loop stops after one token
    eos_model.generate(prompt, 4, eos_token=token)


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "gmlp_g_mlp": _g_mlp,
    "gmlp_autoregressive_wrapper": _autoregressive_wrapper,
}
