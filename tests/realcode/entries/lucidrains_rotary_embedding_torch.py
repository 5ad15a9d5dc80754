"""lucidrains/rotary-embedding-torch: rotary positional embeddings
(rotary_embedding_torch/rotary_embedding_torch.py).

As the README uses it: one RotaryEmbedding shared by the attention layers of a transformer,
rotating the queries and keys after the heads are split out and before the dot product
(`rotate_queries_or_keys` on (batch, heads, seq, dim_head), or with `seq_before_head_dim` on
(batch, seq, heads, dim_head)); the length-extrapolatable XPos variant through
`rotate_queries_and_keys`; `rotate_queries_with_cached_keys` for one new query against a
key cache at inference; axial frequencies (`get_axial_freqs`, with offsets) applied with
`apply_rotary_emb` to a video-shaped tensor; `interpolate_factor`, a learned frequency,
`custom_freqs`, `freqs_for='constant'`, partial rotation (`start_index`), `broadcat` and
`apply_learned_rotations`. Here a tiny attention model around it takes a training step
(cross-entropy, backward, Adam step) on two (batch, length) sizes, then runs in eval mode
under torch.no_grad(): the rotary module's frequency cache is filled and then read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class _Attention(nn.Module):
    """The README's use: q, k rotated between the head split and the softmax."""

    def __init__(self, rotary: nn.Module, vocab: int, dim: int, heads: int, xpos: bool) -> None:
        super().__init__()
        self.rotary, self.heads, self.xpos = rotary, heads, xpos
        self.seq_first = bool(rotary.seq_before_head_dim)
        self.embed = nn.Embedding(vocab, dim)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_logits = nn.Linear(dim, vocab)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        t = t.view(b, n, self.heads, -1)
        return t if self.seq_first else t.transpose(1, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        q, k, v = (self.split(t) for t in self.to_qkv(x).chunk(3, dim=-1))
        if self.xpos:
            q, k = self.rotary.rotate_queries_and_keys(q, k)
        else:
            q = self.rotary.rotate_queries_or_keys(q)
            k = self.rotary.rotate_queries_or_keys(k)
        if self.seq_first:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.to_logits(out.transpose(1, 2).reshape(x.shape))


def _train(model: _Attention, vocab: int, sizes: tuple[tuple[int, int], ...]) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for b, t in sizes:
        tokens = torch.randint(0, vocab, (b, t + 1))
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, vocab, (3, min(t for _, t in sizes) - 1))).argmax(dim=-1)


def _rotary_embedding(ns: dict[str, Any]) -> None:
    rotary = ns["RotaryEmbedding"]
    apply_rotary_emb = ns["apply_rotary_emb"]
    vocab = 11
    # the README's first use, partial rotation (dim 4 of dim_head 8), a cache of 16 positions
    _train(_Attention(rotary(dim=4, cache_max_seq_len=16), vocab, 16, 2, xpos=False), vocab, ((2, 6), (3, 9)))
    # sequence before heads, NTK-style theta rescaling, interpolated positions
    emb = rotary(dim=6, seq_before_head_dim=True, theta_rescale_factor=2.0, interpolate_factor=2.0, cache_max_seq_len=32)
    _train(_Attention(emb, vocab, 18, 3, xpos=False), vocab, ((2, 7), (3, 5)))
    # XPos: rotate_queries_and_keys, the scale cached alongside the frequencies
    xpos = rotary(dim=8, use_xpos=True, xpos_scale_base=16, cache_max_seq_len=16)
    _train(_Attention(xpos, vocab, 16, 2, xpos=True), vocab, ((2, 8), (3, 6)))
    # a learned frequency (no cache), frequencies given, and constant ones
    learned = rotary(dim=8, learned_freq=True)
    _train(_Attention(learned, vocab, 16, 2, xpos=False), vocab, ((2, 5), (2, 7)))
    assert learned.freqs.grad is not None
    custom = rotary(dim=4, custom_freqs=torch.tensor([1.0, 0.25]), cache_if_possible=False)
    _train(_Attention(custom, vocab, 12, 2, xpos=False), vocab, ((3, 4), (2, 6)))
    constant = rotary(dim=4, freqs_for="constant", num_freqs=2, cache_max_seq_len=12)
    _train(_Attention(constant, vocab, 8, 2, xpos=False), vocab, ((2, 5), (3, 3)))

    with torch.no_grad():
        # inference with a key cache: one new query against the cached keys
        emb = rotary(dim=8, cache_max_seq_len=16)
        for n in (5, 9):
            q, k = torch.randn(2, 2, 1, 8), torch.randn(2, 2, n, 8)
            emb.rotate_queries_with_cached_keys(q, k)
            emb.rotate_queries_or_keys(q, offset=k.shape[-2] - q.shape[-2])
        emb = rotary(dim=8, use_xpos=True, cache_max_seq_len=16)
        emb.rotate_queries_with_cached_keys(torch.randn(1, 2, 2, 8), torch.randn(1, 2, 6, 8))
        emb = rotary(dim=8, seq_before_head_dim=True)
        emb.rotate_queries_with_cached_keys(torch.randn(2, 1, 3, 8), torch.randn(2, 4, 3, 8))
        # xpos with the sequence first
        emb = rotary(dim=8, use_xpos=True, seq_before_head_dim=True)
        emb.rotate_queries_and_keys(torch.randn(2, 5, 3, 8), torch.randn(2, 5, 3, 8))

        # the README's axial embeddings: pixel frequencies over (frames, height, width), the
        # rotation covering 3 * dim of the feature dimension
        pos_emb = rotary(dim=4, freqs_for="pixel", max_freq=16)
        freqs = pos_emb.get_axial_freqs(3, 4, 5)
        apply_rotary_emb(freqs, torch.randn(1, 2, 3, 4, 5, 16))
        freqs = pos_emb.get_axial_freqs(2, 3, offsets=(1, 2))
        apply_rotary_emb(freqs, torch.randn(2, 2, 3, 8))
        lang = rotary(dim=6)
        freqs = lang.get_axial_freqs(4, 2, offsets=torch.tensor([0.5, 1.0]))
        apply_rotary_emb(freqs, torch.randn(3, 4, 2, 12))
        # 3-d inputs (batch, seq, dim): the frequencies of a longer sequence, the last ones
        # taken; rotation starting past the first features
        freqs = lang(torch.arange(9), seq_len=9)
        apply_rotary_emb(freqs, torch.randn(2, 7, 10), start_index=2)
        apply_rotary_emb(freqs, torch.randn(2, 3, 9, 6), seq_dim=-2, freqs_seq_dim=0)
        # broadcat, as tortoise-tts builds 2-d frequencies from 1-d ones
        freqs_h, freqs_w = lang(torch.arange(3)), lang(torch.arange(5))
        freqs = ns["broadcat"]((freqs_h[:, None, :], freqs_w[None, :, :]), dim=-1)
        apply_rotary_emb(freqs, torch.randn(2, 3, 5, 14))

    # learned rotations from the features (as an attention layer predicting its own angles)
    to_rotations = nn.Linear(12, 3)
    for b, n in ((2, 5), (3, 4)):
        x = torch.randn(b, n, 12)
        rotated = ns["apply_learned_rotations"](to_rotations(x), x, freq_ranges=torch.tensor([1.0, 0.5]))
        ns["apply_learned_rotations"](to_rotations(x)[..., :2], x, start_index=4)
        rotated.sum().backward()


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {"rotary_embedding": _rotary_embedding}
