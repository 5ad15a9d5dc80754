"""A tensor is a window onto a storage: shape, strides and a storage offset.

Run `stridelens explain` on the lines marked `# explain` (or `make demo`).
"""

import torch

a = torch.arange(12.0).reshape(3, 4)  # explain: 3x4, strides (4, 1)
col = a[:, 1:3]  # explain: a column slice: a view, not contiguous
b = a[1:, 1:3]  # explain: shape (2, 2), strides (4, 1), storage offset 5
row = a[2]  # explain: a row: contiguous view at offset 8
every_other = a[:, ::2]  # explain: step slicing doubles the stride

t = torch.randn(4, 6)
tT = t.T  # explain: strides (1, 6): the same storage walked column-first
flat = tT.contiguous()  # explain: a real copy, contiguous again

x = torch.zeros(2, 3, 4)
moved = x.movedim(2, 0)  # explain
expanded = torch.ones(3, 1).expand(3, 5)  # explain: stride 0: no memory for the copies
q, k, v = torch.randn(2, 9).chunk(3, dim=1)  # explain: three views at offsets 0, 3, 6
