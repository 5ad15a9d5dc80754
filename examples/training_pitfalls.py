"""Autograd pitfalls the rules catalogue flags (SL201, SL205, SL206, SL209, SL210).

SL201, SL205, SL206 and SL210 are off by default (below precision 0.9 on a fresh audit):
`stridelens check --select ALL examples/training_pitfalls.py` shows them all.
Never run by stridelens: it is analysed statically.
"""

import torch
from torch import nn

model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs = torch.randn(64, 8)
targets = torch.randn(64, 1)

losses = []
for step in range(10):
    optimizer.zero_grad()
    out = model(inputs)  # explain: carries an autograd graph
    loss = nn.functional.mse_loss(out, targets)  # explain
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # SL209: clipping after step
    losses.append(loss)  # SL201: keeps every step's graph alive

scores = [torch.randn(1, requires_grad=True) for _ in range(3)]
stacked = torch.tensor(scores)  # SL210: silently drops the graph; use torch.stack

weights = torch.randn(4, 4, requires_grad=True)
frozen = weights.detach()  # explain: shares storage with `weights`
frozen.zero_()  # SL205: writes into `weights` too

model.eval()
prediction = model(inputs)  # SL206: forward without no_grad builds a graph
