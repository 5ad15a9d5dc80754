"""lucidrains/perceiver-pytorch: Perceiver (perceiver_pytorch/perceiver_pytorch.py) and Perceiver IO
with its language-model example (perceiver_pytorch/perceiver_io.py).

As the README uses them: Perceiver on channel-last images (b, h, w, c) with the positions
Fourier-encoded for each axis, PerceiverIO on a (b, n, dim) sequence with decoder queries of
(n, d) or (b, n, d), PerceiverLM on token ids with a boolean mask; train_cifar10.py's step
(cross-entropy on the logits, backward, an optimizer step) on two batch sizes, then
predictions under torch.no_grad() in eval mode. The README's options are varied on small widths:
weight-tied layers (the cached blocks), several self-attentions per cross-attention, inverted
cross-attention with a mask, data already Fourier-encoded, no classifier head, structured
sequence dropout with and without a mask, a decoder feedforward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _classify(model: torch.nn.Module, make: Callable[[int], tuple[torch.Tensor, torch.Tensor | None]], classes: int) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model.train()
    for batch in (2, 3):
        data, mask = make(batch)
        logits = model(data, mask=mask)
        loss = F.cross_entropy(logits, torch.randint(0, classes, (batch,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        data, mask = make(4)
        model(data, mask=mask).softmax(dim=-1).argmax(dim=-1)


def _perceiver(ns: dict[str, Any]) -> None:
    perceiver = ns["Perceiver"]
    # the README's image model: (b, h, w, c), two self-attentions per cross-attention
    model = perceiver(input_channels=3, input_axis=2, num_freq_bands=3, max_freq=10.0, depth=2, num_latents=6, latent_dim=16, cross_heads=1, latent_heads=2, cross_dim_head=8, latent_dim_head=4, num_classes=5, attn_dropout=0.1, ff_dropout=0.1, self_per_cross_attn=2)
    _classify(model, lambda b: (torch.randn(b, 6, 5, 3), None), 5)
    # weight-tied layers, inverted cross-attention on the first layer, a mask over the pixels
    model = perceiver(input_channels=2, input_axis=2, num_freq_bands=2, max_freq=6.0, depth=3, num_latents=5, latent_dim=12, cross_heads=2, latent_heads=3, cross_dim_head=4, latent_dim_head=4, num_classes=3, weight_tie_layers=True, inverted_cross_attn=(True, False, True))
    _classify(model, lambda b: (torch.randn(b, 4, 7, 2), torch.rand(b, 4, 7) > 0.3), 3)
    # video (three axes); a sequence whose positions are already encoded, embeddings out
    model = perceiver(input_channels=3, input_axis=3, num_freq_bands=2, max_freq=4.0, depth=1, num_latents=4, latent_dim=8, latent_heads=2, cross_dim_head=4, latent_dim_head=4, num_classes=4)
    _classify(model, lambda b: (torch.randn(b, 2, 3, 4, 3), None), 4)
    model = perceiver(input_channels=10, input_axis=1, num_freq_bands=2, max_freq=4.0, depth=2, num_latents=3, latent_dim=8, latent_heads=2, cross_dim_head=4, latent_dim_head=4, fourier_encode_data=False, final_classifier_head=False)
    model(torch.randn(2, 9, 10), return_embeddings=True).sum().backward()
    model(torch.randn(3, 5, 10)).mean().backward()


def _perceiver_io(ns: dict[str, Any]) -> None:
    # the README's PerceiverIO: decoder queries without a batch dimension, structured dropout
    model = ns["PerceiverIO"](dim=12, queries_dim=10, logits_dim=7, depth=2, num_latents=6, latent_dim=16, cross_heads=1, latent_heads=2, cross_dim_head=8, latent_dim_head=4, seq_dropout_prob=0.25)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model.train()
    for b, n, q in ((2, 9, 5), (3, 8, 4)):
        logits = model(torch.randn(b, n, 12), queries=torch.randn(q, 10))
        loss = F.cross_entropy(logits.transpose(1, 2), torch.randint(0, 7, (b, q)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # with a mask: the dropout keeps as many of each row's tokens as it can
        mask = torch.rand(b, n) > 0.3
        model(torch.randn(b, n, 12), mask=mask, queries=torch.randn(b, q, 10)).sum().backward()
    model.eval()
    with torch.no_grad():
        model(torch.randn(4, 6, 12), queries=torch.randn(3, 10))
        model(torch.randn(2, 5, 12))  # no queries: the latents
    # weight-tied layers, a decoder feedforward, no logits projection
    model = ns["PerceiverIO"](dim=8, queries_dim=8, depth=3, num_latents=4, latent_dim=12, cross_heads=2, latent_heads=3, cross_dim_head=4, latent_dim_head=4, weight_tie_layers=True, decoder_ff=True)
    model(torch.randn(2, 7, 8), mask=torch.rand(2, 7) > 0.2, queries=torch.randn(2, 3, 8)).sum().backward()

    # the README's language model: logits for every position, a boolean mask
    vocab = 13
    model = ns["PerceiverLM"](num_tokens=vocab, dim=12, depth=2, max_seq_len=10, num_latents=5, latent_dim=16, cross_heads=1, latent_heads=2, cross_dim_head=4, latent_dim_head=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model.train()
    for b, t in ((2, 7), (3, 10)):
        tokens = torch.randint(0, vocab, (b, t + 1))
        mask = torch.ones(b, t).bool()
        logits = model(tokens[:, :-1], mask=mask)
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, vocab, (4, 6))).argmax(dim=-1)


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "perceiver_perceiver": _perceiver,
    "perceiver_io": _perceiver_io,
}
