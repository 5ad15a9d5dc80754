"""PyTorch API rules: calls with a better or non-deprecated form; one rule per module."""
