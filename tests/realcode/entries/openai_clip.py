"""openai/CLIP: clip/model.py, both image towers (ModifiedResNet and VisionTransformer).

As the repository's README and its training recipe use it: a contrastive training step
(cross-entropy of logits_per_image and logits_per_text against the diagonal) on two batch
sizes, encode_image / encode_text under torch.no_grad() in eval mode, zero-shot
classification (image features against the normalised text features of class prompts,
softmax of 100 * similarity), and build_model() from a state dict, as clip.load() does (which
converts the weights to fp16 and returns the model in eval mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_VOCAB, _CONTEXT = 50, 7


def _tokens(batch: int) -> torch.Tensor:
    # clip.tokenize(): tokens, the end-of-text token (the highest id), zero padding
    text = torch.zeros(batch, _CONTEXT, dtype=torch.long)
    for i in range(batch):
        n = 2 + i % (_CONTEXT - 2)
        text[i, :n] = torch.randint(1, _VOCAB - 1, (n,))
        text[i, n] = _VOCAB - 1
    return text


def _train_eval(model: nn.Module, resolution: int) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
    model.train()
    for batch in (2, 3):
        images = torch.randn(batch, 3, resolution, resolution)
        texts = _tokens(batch)
        logits_per_image, logits_per_text = model(images, texts)
        ground_truth = torch.arange(batch)
        loss = (
            nn.functional.cross_entropy(logits_per_image, ground_truth)
            + nn.functional.cross_entropy(logits_per_text, ground_truth)
        ) / 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        image_features = model.encode_image(torch.randn(4, 3, resolution, resolution))
        text_features = model.encode_text(_tokens(5))
        image_features /= image_features.norm(dim=-1, keepdim=True)
        text_features /= text_features.norm(dim=-1, keepdim=True)
        (100.0 * image_features @ text_features.T).softmax(dim=-1).topk(3)
        model(torch.randn(2, 3, resolution, resolution), _tokens(3))


def _clip_model(ns: dict[str, Any]) -> None:
    clip = ns["CLIP"]
    text = {"context_length": _CONTEXT, "vocab_size": _VOCAB, "transformer_width": 64, "transformer_heads": 1, "transformer_layers": 2}
    # ViT image tower: 32x32 images in 8x8 patches, width 64 (one head, as width // 64)
    vit = clip(embed_dim=16, image_resolution=32, vision_layers=2, vision_width=64, vision_patch_size=8, **text)
    _train_eval(vit, 32)
    # ModifiedResNet image tower: width 8, attention pooling over the 2x2 grid of a 64x64 image
    resnet = clip(embed_dim=16, image_resolution=64, vision_layers=(1, 2, 1, 1), vision_width=8, vision_patch_size=None, **text)
    _train_eval(resnet, 64)
    # clip.load(): build_model() on a checkpoint's state dict (it converts the weights to fp16
    # and returns the model in eval mode); on CPU clip.load then calls model.float()
    for model, resolution in ((vit, 32), (resnet, 64)):
        loaded = ns["build_model"](model.state_dict())
        loaded.float()
        with torch.no_grad():
            loaded(torch.randn(2, 3, resolution, resolution), _tokens(2))


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {"clip_model": _clip_model}
