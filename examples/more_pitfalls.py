"""More catalogue cases: retain_graph, backward twice, .data, anomaly mode, retain_grad,
missing zero_grad, TypedStorage. Analysed statically, never run by stridelens.
Some of these rules are off by default: `stridelens check --select ALL` shows every one."""

import torch

torch.autograd.set_detect_anomaly(True)  # SL207

w = torch.randn(3, requires_grad=True)
y = (w * 2).sum()
y.backward(retain_graph=True)  # SL202
z = (w * 3).sum()
z.backward()
z.backward()  # SL203: the graph was freed by the first backward

h = w * 4
h.retain_grad()  # SL208
raw = w.storage()  # SL212: deprecated TypedStorage

model = torch.nn.Linear(3, 1)
opt = torch.optim.Adam(model.parameters())
for _ in range(3):
    loss = model(torch.randn(5, 3)).sum()
    loss.backward()
    opt.step()  # SL211: gradients accumulate: no zero_grad in this loop
    for p in model.parameters():
        p.data.mul_(0.999)  # SL204: an update autograd's version check cannot see
