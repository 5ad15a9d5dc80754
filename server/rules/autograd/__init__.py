"""Autograd rules: graphs kept alive or freed, `.data`/`.detach()` aliasing, in-place writes to saved tensors, `requires_grad` flags; one rule per module."""
