"""A realistic, generated model file of about N lines for the benchmarks.

Blocks mix what real model code does: nn modules built in `__init__`, forwards with
permutes, reshapes, views, attention-style chunking, training and eval loops.
"""

from __future__ import annotations

import sys

HEADER = '''import torch
from torch import nn
import torch.nn.functional as F

'''

BLOCK = '''
class Block{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d({c}, {c2}, 3, padding=1)
        self.norm = nn.BatchNorm2d({c2})
        self.proj = nn.Linear({c2}, {c2} * 3)
        self.out = nn.Linear({c2}, {c})

    def forward(self, x):
        h = F.relu(self.norm(self.conv(x)))
        b, c, height, width = h.shape
        tokens = h.flatten(2).transpose(1, 2)
        q, k, v = self.proj(tokens).chunk(3, dim=-1)
        att = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        y = att @ v
        y = y.transpose(1, 2).reshape(b, c, height, width)
        return self.out(y.mean(dim=(2, 3)))


def run_block{i}():
    model = Block{i}()
    images = torch.randn(2, {c}, 8, 8)
    result = model(images)
    clips = torch.randn(2, 4, {c}, 8, 8)
    video = clips.permute(0, 2, 1, 3, 4)
    flat = video.reshape(2, -1)
    losses = []
    for step in range(3):
        loss = result.sum() * step
        losses.append(loss.item())
    with torch.no_grad():
        pred = model(images)
    return flat, pred, losses
'''


def generate_model_source(lines: int = 3000) -> str:
    parts = [HEADER]
    count = len(HEADER.splitlines())
    i = 0
    while count < lines:
        c = 8 * (1 + i % 4)
        block = BLOCK.format(i=i, c=c, c2=c * 2)
        parts.append(block)
        count += len(block.splitlines())
        i += 1
    return "".join(parts)


if __name__ == "__main__":
    sys.stdout.write(generate_model_source(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
