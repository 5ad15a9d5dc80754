"""A training loop that leaks slowly: every step keeps one 64 KiB tensor in `history`.

    python examples/runtime/slow_leak.py &
    stridelens inspect --pid $! --snapshot --every 5 --count 3
"""

import time

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
history = []  # the leak: a per-step tensor kept "for later"
step = 0
while True:
    x = torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(torch.randn(16384))
    step += 1
    time.sleep(0.02)
