"""Video clips stored (N, T, C, H, W) must reach Conv3d as (N, C, T, H, W).

The permute is free, but the convolution receives a non-contiguous input and copies
it (about 77 MB here) on every forward pass.
"""

import torch
from torch import nn

clips = torch.randn(32, 16, 3, 112, 112)  # explain: (N, T, C, H, W), contiguous
video = clips.permute(0, 2, 1, 3, 4)  # explain: (N, C, T, H, W), non-contiguous view
conv = nn.Conv3d(3, 8, kernel_size=3, padding=1)
features = conv(video)  # explain: a new contiguous tensor
