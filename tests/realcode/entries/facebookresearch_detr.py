"""facebookresearch/detr: models/transformer.py, the DETR encoder-decoder.

Used as models/detr.py uses it: a backbone feature map projected to hidden_dim, its padding
mask (True on padded positions) and sine-style positional encodings, learnt object queries;
the decoder's stacked intermediate outputs feed the class and box heads (aux losses), here
with a fixed matching in place of the Hungarian matcher (which needs scipy). Post-norm and
pre-norm variants are built through build_transformer(args) as main.py does, trained on two
batches of distinct sizes, then evaluated under torch.no_grad() in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn


def _batch(batch: int, channels: int, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    features = torch.randn(batch, channels, h, w)
    mask = torch.zeros(batch, h, w, dtype=torch.bool)
    for i in range(1, batch):  # images padded to the batch's largest: right and bottom edges
        mask[i, h - i :, :] = True
        mask[i, :, w - 1 :] = True
    return features, mask


def _run(transformer: nn.Module, hidden_dim: int, num_queries: int = 5, num_classes: int = 4) -> None:
    backbone_channels = 12
    input_proj = nn.Conv2d(backbone_channels, hidden_dim, kernel_size=1)
    query_embed = nn.Embedding(num_queries, hidden_dim)
    class_embed = nn.Linear(hidden_dim, num_classes + 1)
    bbox_embed = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 4))
    modules = nn.ModuleList([transformer, input_proj, query_embed, class_embed, bbox_embed])
    optimizer = torch.optim.AdamW(modules.parameters(), lr=1e-4, weight_decay=1e-4)

    def forward(features: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.randn(features.shape[0], hidden_dim, *features.shape[-2:])
        hs = transformer(input_proj(features), mask, query_embed.weight, pos)[0]
        return class_embed(hs), bbox_embed(hs).sigmoid()

    modules.train()
    for batch, (h, w) in ((2, (5, 7)), (3, (6, 4))):
        features, mask = _batch(batch, backbone_channels, h, w)
        outputs_class, outputs_coord = forward(features, mask)
        labels = torch.randint(0, num_classes + 1, (batch, num_queries))
        boxes = torch.rand(batch, num_queries, 4)
        # every decoder layer's output is supervised (aux_loss)
        loss = sum(
            nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()) + nn.functional.l1_loss(coords, boxes)
            for logits, coords in zip(outputs_class, outputs_coord, strict=True)
        )
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(modules.parameters(), 0.1)
        optimizer.step()
    modules.eval()
    with torch.no_grad():
        features, mask = _batch(4, backbone_channels, 3, 8)
        outputs_class, outputs_coord = forward(features, mask)
        outputs_class[-1].softmax(-1)[..., :-1].max(-1)


def _detr_transformer(ns: dict[str, Any]) -> None:
    for pre_norm in (False, True):
        args = SimpleNamespace(hidden_dim=16, dropout=0.1, nheads=2, dim_feedforward=24, enc_layers=2, dec_layers=3, pre_norm=pre_norm)
        _run(ns["build_transformer"](args), 16)
    # the class's own defaults for everything but the sizes: no intermediate outputs, GELU
    transformer = ns["Transformer"](d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16, activation="gelu")
    _run(transformer, 8)
    ns["_get_activation_fn"]("glu")


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {"detr_transformer": _detr_transformer}
