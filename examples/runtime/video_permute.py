"""Video clips stored (N, T, C, H, W) and permuted to (N, C, T, H, W) for Conv3d.

The permute is free (a view with shuffled strides), but the result is not contiguous, so
Conv3d copies it on every forward. Sizes are small by default; the real case is
`python video_permute.py 32 16 112` -> clips of (32, 16, 3, 112, 112).

    stridelens inspect --launch examples/runtime/video_permute.py \
        --break examples/runtime/video_permute.py:25 --expr x --frame
"""

import sys

import torch

n, t, hw = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (4, 8, 32)
clips = torch.randn(n, t, 3, hw, hw)
conv = torch.nn.Conv3d(3, 8, kernel_size=3, padding=1)

x = clips.permute(0, 2, 1, 3, 4)  # (N, C, T, H, W): a non-contiguous view of `clips`
with torch.no_grad():
    out = conv(x)  # copies x into a contiguous buffer first
    fixed = conv(clips.transpose(1, 2).contiguous())  # the explicit copy, made once

print(out.shape)
print("done")  # inspect here
