"""karpathy/llama2.c: model.py, the Llama 2 Transformer trained by train.py.

As train.py uses it: ModelArgs with explicit sizes, configure_optimizers(), forward with
targets (the loss read from model.last_loss), backward, gradient clipping and an AdamW step, on
two batches of distinct (batch, sequence) sizes; estimate_loss() under torch.no_grad() in eval
mode; estimate_mfu(). As sample.py uses it: generate() with temperature and top_k, and with
temperature 0.0 (greedy). Two configurations: multi-head attention with the FeedForward's
default hidden size, and grouped-query attention (n_kv_heads < n_heads, the repeat_kv path) with
an explicit hidden_dim. The attention path of torch < 2.0 (no scaled_dot_product_attention: the
constructor builds the causal mask buffer) is exercised by building one model with that function
hidden, as on such a torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_VOCAB = 13


def _train_eval_sample(ns: dict[str, Any], model: torch.nn.Module, sizes: tuple[tuple[int, int], ...]) -> None:
    optimizer = model.configure_optimizers(0.1, 5e-4, (0.9, 0.95), "cpu")
    model.train()
    for b, t in sizes:
        x = torch.randint(0, _VOCAB, (b, t))
        y = torch.randint(0, _VOCAB, (b, t))
        model(x, y)
        loss = model.last_loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():  # estimate_loss()
        model(torch.randint(0, _VOCAB, (4, 6)), torch.randint(0, _VOCAB, (4, 6)))
    model.estimate_mfu(fwdbwd_per_iter=4, dt=0.5)
    # sample.py: a start token, temperature sampling with top_k, and greedy decoding; more new
    # tokens than max_seq_len so that the context is cropped
    model.generate(torch.randint(0, _VOCAB, (2, 3)), max_new_tokens=8, temperature=0.8, top_k=5)
    model.generate(torch.randint(0, _VOCAB, (1, 2)), max_new_tokens=3, temperature=0.0)
    model.generate(torch.randint(0, _VOCAB, (3, 4)), max_new_tokens=2, temperature=1.0, top_k=None)


def _llama2c_model(ns: dict[str, Any]) -> None:
    args = ns["ModelArgs"](dim=16, n_layers=2, n_heads=4, n_kv_heads=4, vocab_size=_VOCAB, multiple_of=8, max_seq_len=8, dropout=0.0)
    _train_eval_sample(ns, ns["Transformer"](args), ((2, 5), (3, 8)))
    args = ns["ModelArgs"](dim=24, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=_VOCAB, hidden_dim=20, max_seq_len=9, dropout=0.1)
    _train_eval_sample(ns, ns["Transformer"](args), ((3, 7), (2, 9)))
    # torch < 2.0: no scaled_dot_product_attention, the manual attention with the mask buffer
    functional = torch.nn.functional
    sdpa = functional.scaled_dot_product_attention
    del functional.scaled_dot_product_attention
    try:
        args = ns["ModelArgs"](dim=12, n_layers=2, n_heads=3, n_kv_heads=1, vocab_size=_VOCAB, multiple_of=4, max_seq_len=7, dropout=0.1)
        model = ns["Transformer"](args)
    finally:
        functional.scaled_dot_product_attention = sdpa
    _train_eval_sample(ns, model, ((2, 6), (4, 3)))


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {"llama2c_model": _llama2c_model}
