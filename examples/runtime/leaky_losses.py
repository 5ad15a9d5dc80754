"""A training loop whose `losses` list keeps every iteration's autograd graph alive.

    stridelens inspect --launch examples/runtime/leaky_losses.py \
        --break examples/runtime/leaky_losses.py:26 --memory
"""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
losses = []

for step in range(20):
    x = torch.randn(128, 256)
    y = torch.randn(128, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward(retain_graph=True)  # keeps the saved tensors, as many real loops do by accident
    opt.step()
    losses.append(loss)  # the leak: store loss.item() instead

# Each stored loss still holds its graph: activations of every step stay in memory.
mean = sum(v.item() for v in losses) / len(losses)
print(f"mean loss {mean:.4f}")
print("done")  # inspect here
