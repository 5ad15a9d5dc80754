"""`view` never copies and fails when it would have to; `reshape` silently copies."""

import torch

x = torch.randn(2, 3, 4)

# Merging dims that are still adjacent in memory is fine after a permute:
ok = x.permute(2, 0, 1).view(4, 6)  # explain: a view, no copy

xt = x.transpose(0, 1)  # explain: non-contiguous
copied = xt.reshape(-1)  # explain: reshape copies here (the input is non-contiguous)
fails = xt.view(-1)  # explain: raises at run time: use reshape or contiguous().view
