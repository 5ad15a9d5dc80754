"""Step 7's debuggee: a loop whose `history` list grows every step (one 8 KiB tensor) and whose
`cache` is refilled every step (the same 32 KiB). The memory panel's step diff, run at the
breakpoint line for 3 steps, must call the list linear and the cache not."""

import torch

history = []
cache = {}
for step in range(40):
    x = torch.randn(256, 32)  # the breakpoint
    history.append(torch.randn(256, 8))
    cache["batch"] = x.clone()
print("done", len(history))
