"""Sizes the file does not spell out: a GPT-style attention block, as model code is written.

`B, T, C = x.size()`, `self.n_head` and the layers' own sizes are symbolic: stridelens names
every size after your variables, decides `view` for every size at once, and says under which
conditions (`assumes`). Run `stridelens explain` on the marked lines (or `make demo`),
and `stridelens check` on this file: the merging `view` on line 30 raises for every size.
"""

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # explain: (B, nh, T, hs), a view of the qkv buffer
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = F.softmax(q @ k.transpose(-2, -1), dim=-1)  # explain: (B, nh, T, T), a new tensor
        y = att @ v
        y = y.transpose(1, 2).view(B, T, C)  # SL101: needs .contiguous() first (or reshape)
        return self.c_proj(y)
