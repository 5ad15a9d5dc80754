"""lucidrains/vit-pytorch: vision transformers (vit_pytorch/<model>.py), one file each.

Each entry builds the model as the repository's README shows for it (keyword arguments, the
README's options: pooling, dropout, distillation head, ...) with tiny widths, and uses it as
the README and its examples (examples/cats_and_dogs.ipynb) do: a classification training step
(cross-entropy on the logits, backward, Adam step) on two batch sizes, for models whose
positional table fixes the input size on two models of distinct image sizes; then predictions
under torch.no_grad() in eval mode. Inputs always have the size the model was built for.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def _fit(model: nn.Module, make: Callable[[int], torch.Tensor], classes: int, batches: tuple[int, ...] = (2, 3)) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    model.train()
    for batch in batches:
        out = model(make(batch))
        logits = out[0] if isinstance(out, tuple) else out
        loss = nn.functional.cross_entropy(logits, torch.randint(0, classes, (batch,)))
        if isinstance(out, tuple):  # LeViT's distillation head
            loss = loss + nn.functional.cross_entropy(out[1], torch.randint(0, out[1].shape[-1], (batch,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        out = model(make(4))
        logits = out[0] if isinstance(out, tuple) else out
        logits.softmax(dim=-1).argmax(dim=-1)


def _images(h: int, w: int | None = None, channels: int = 3) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, channels, h, h if w is None else w)


def _vit(ns: dict[str, Any]) -> None:
    vit = ns["ViT"]
    model = vit(image_size=16, patch_size=4, num_classes=5, dim=16, depth=2, heads=2, mlp_dim=24, dim_head=8, dropout=0.1, emb_dropout=0.1)
    _fit(model, _images(16), 5)
    # rectangular images and patches, mean pooling, one channel
    model = vit(image_size=(12, 20), patch_size=(6, 4), num_classes=3, dim=12, depth=2, heads=3, mlp_dim=16, pool="mean", channels=1, dim_head=4)
    _fit(model, _images(12, 20, channels=1), 3)
    # one head of dim_head == dim: no output projection; num_classes=0: the tokens out
    model = vit(image_size=8, patch_size=4, num_classes=0, dim=8, depth=1, heads=1, mlp_dim=8, dim_head=8)
    model(torch.randn(2, 3, 8, 8)).sum().backward()


def _simple_vit(ns: dict[str, Any]) -> None:
    for (h, w), patch, dim in (((16, 16), 4, 16), ((12, 24), (6, 8), 12)):
        model = ns["SimpleViT"](image_size=(h, w), patch_size=patch, num_classes=4, dim=dim, depth=2, heads=2, mlp_dim=20, dim_head=6)
        _fit(model, _images(h, w), 4)


def _vit_3d(ns: dict[str, Any]) -> None:
    model = ns["ViT"](image_size=16, frames=6, image_patch_size=8, frame_patch_size=2, num_classes=4, dim=16, depth=2, heads=2, mlp_dim=24, dim_head=8, dropout=0.1, emb_dropout=0.1)
    _fit(model, lambda b: torch.randn(b, 3, 6, 16, 16), 4)
    model = ns["ViT"](image_size=(8, 12), frames=4, image_patch_size=4, frame_patch_size=4, num_classes=3, dim=12, depth=1, heads=3, mlp_dim=12, pool="mean", channels=2, dim_head=4)
    _fit(model, lambda b: torch.randn(b, 2, 4, 8, 12), 3)


def _simple_vit_3d(ns: dict[str, Any]) -> None:
    # dim 16 is not a multiple of 6: the sin-cos table is padded; dim 24 is
    for (h, w), frames, fp, dim in (((16, 16), 4, 2, 16), ((8, 12), 6, 3, 24)):
        model = ns["SimpleViT"](image_size=(h, w), image_patch_size=4, frames=frames, frame_patch_size=fp, num_classes=4, dim=dim, depth=2, heads=2, mlp_dim=20, dim_head=8)
        _fit(model, lambda b, h=h, w=w, f=frames: torch.randn(b, 3, f, h, w), 4)


def _cait(ns: dict[str, Any]) -> None:
    random.seed(0)
    model = ns["CaiT"](image_size=16, patch_size=4, num_classes=5, dim=16, depth=2, cls_depth=2, heads=2, mlp_dim=24, dim_head=8, dropout=0.1, emb_dropout=0.1, layer_dropout=0.05)
    _fit(model, _images(16), 5)
    # a deep class-attention stack (LayerScale's smaller init past depth 18 and 24) and a
    # layer dropout high enough that all layers are sometimes drawn to drop (one is kept)
    model = ns["CaiT"](image_size=12, patch_size=6, num_classes=3, dim=8, depth=2, cls_depth=26, heads=2, mlp_dim=8, dim_head=4, layer_dropout=0.9)
    _fit(model, _images(12), 3, batches=(2, 3, 2, 3))


def _deepvit(ns: dict[str, Any]) -> None:
    model = ns["DeepViT"](image_size=16, patch_size=4, num_classes=5, dim=16, depth=2, heads=4, mlp_dim=24, dim_head=4, dropout=0.1, emb_dropout=0.1)
    _fit(model, _images(16), 5)
    model = ns["DeepViT"](image_size=12, patch_size=3, num_classes=3, dim=12, depth=2, heads=2, mlp_dim=12, pool="mean", channels=1, dim_head=6)
    _fit(model, _images(12, channels=1), 3)


def _levit(ns: dict[str, Any]) -> None:
    # the README: three stages, a distillation head; image_size // 16 is the first feature map
    model = ns["LeViT"](image_size=64, num_classes=5, stages=3, dim=(16, 24, 32), depth=2, heads=(2, 3, 4), mlp_mult=2, dim_key=4, dim_value=8, dropout=0.1, num_distill_classes=6)
    _fit(model, _images(64), 5)
    model = ns["LeViT"](image_size=32, num_classes=3, stages=2, dim=12, depth=(1, 2), heads=2, mlp_mult=2, dim_key=4, dim_value=4)
    _fit(model, _images(32), 3)


def _mobile_vit(ns: dict[str, Any]) -> None:
    # channels: 11 widths as the README's mbv2 list; images a multiple of 32 (five stride-2 steps)
    channels = [4, 8, 8, 8, 8, 8, 12, 12, 16, 16, 32]
    model = ns["MobileViT"](image_size=(64, 64), dims=[8, 8, 12], channels=channels, num_classes=5, expansion=2, depths=(1, 2, 1))
    _fit(model, _images(64), 5)
    model = ns["MobileViT"](image_size=(64, 128), dims=[8, 12, 12], channels=channels, num_classes=3, expansion=1, kernel_size=3, depths=(1, 1, 1))
    _fit(model, _images(64, 128), 3)


def _pit(ns: dict[str, Any]) -> None:
    # patches overlap (stride patch_size // 2); each Pool halves the token grid, doubles dim
    model = ns["PiT"](image_size=16, patch_size=4, num_classes=5, dim=8, depth=(1, 1, 1), heads=2, mlp_dim=16, dim_head=4, dropout=0.1, emb_dropout=0.1)
    _fit(model, _images(16), 5)
    model = ns["PiT"](image_size=12, patch_size=4, num_classes=3, dim=6, depth=(2, 1), heads=(2, 3), mlp_dim=8, dim_head=4, channels=1)
    _fit(model, _images(12, channels=1), 3)


def _vit_for_small_dataset(ns: dict[str, Any]) -> None:
    model = ns["ViT"](image_size=16, patch_size=4, num_classes=5, dim=16, depth=2, heads=2, mlp_dim=24, dim_head=8, dropout=0.1, emb_dropout=0.1)
    _fit(model, _images(16), 5)
    model = ns["ViT"](image_size=(12, 8), patch_size=4, num_classes=3, dim=12, depth=1, heads=3, mlp_dim=12, pool="mean", channels=1, dim_head=4)
    _fit(model, _images(12, 8, channels=1), 3)


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "vitp_vit": _vit,
    "vitp_simple_vit": _simple_vit,
    "vitp_vit_3d": _vit_3d,
    "vitp_simple_vit_3d": _simple_vit_3d,
    "vitp_cait": _cait,
    "vitp_deepvit": _deepvit,
    "vitp_levit": _levit,
    "vitp_mobile_vit": _mobile_vit,
    "vitp_pit": _pit,
    "vitp_vit_for_small_dataset": _vit_for_small_dataset,
}
