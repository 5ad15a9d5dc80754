"""vit-pytorch's patch embedding: `nn.Sequential(Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)',
p1=patch_height, p2=patch_width), nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim))`, with the
patch sizes from a tuple the analysis does not follow. The pattern gives the image its rank and
the batch its name; the axis lengths it cannot name stay unnamed (they are ints in every run).
Checked for real (tests/realcode/compare.py).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.realcode import compare as realcompare

NAME = "patch_embedding"

SOURCE = """
import torch
from einops.layers.torch import Rearrange
from torch import nn


def pair(t):
    return t if isinstance(t, tuple) else (t, t)


class Patches(nn.Module):
    def __init__(self, image_size, patch_size, dim, channels=3):
        super().__init__()
        patch_height, patch_width = pair(patch_size)
        patch_dim = channels * patch_height * patch_width
        self.to_patch_embedding = nn.Sequential(
            Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1=patch_height, p2=patch_width),
            nn.LayerNorm(patch_dim),
            nn.Linear(patch_dim, dim),
        )

    def forward(self, img):
        batch = img.shape[0]
        x = self.to_patch_embedding(img)
        return x
"""


def _entry(ns: dict[str, Any]) -> None:
    for image, patch, dim, b in ((8, 4, 6, 2), (6, 3, 5, 1)):
        ns["Patches"](image, patch, dim)(torch.randn(b, 3, image, image))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_the_pattern_gives_rank_and_batch(oracle: realcompare.SnippetOracle) -> None:
    x = oracle.answer("x", "forward(self, img)") or {}
    assert x.get("shape") is not None and len(x["shape"]) == 3 and x["shape"][0] == "batch", x
    assert x.get("dtype") == "float32", x

