"""`detach()` shares storage: mutating the detached tensor changes the original.

    stridelens inspect --launch examples/runtime/detach_mutate.py \
        --break examples/runtime/detach_mutate.py:18 --frame --expr h
"""

import torch

w = torch.randn(4, 4, requires_grad=True)
h = torch.tanh(w)  # tanh saves its output for backward
snapshot = h.detach()  # no copy: the same storage as h
snapshot.clamp_(min=0)  # in-place: changes h too, and bumps the shared version counter

try:
    h.sum().backward()
except RuntimeError as e:
    print("backward failed:", str(e).splitlines()[0])
print("done")  # inspect here
