"""A small view keeps a large storage alive after the big tensor is gone.

    stridelens inspect --launch examples/runtime/view_pins_storage.py \
        --break examples/runtime/view_pins_storage.py:19 --memory
"""

import torch


def load_features(rows: int = 50_000, dim: int = 256) -> torch.Tensor:
    table = torch.randn(rows, dim)  # ~49 MiB
    return table[:8]  # a view: shares the whole storage


first_rows = load_features()
# `first_rows` is 8 KiB of data, but it pins the whole 49 MiB table.
kept = first_rows.clone()  # what frees it: a copy with its own small storage
print(first_rows.shape, kept.shape)
print("done")  # inspect here
