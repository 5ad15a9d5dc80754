"""Training-loop rules: grad mode at inference, gradient clipping order, `zero_grad`, AMP scaler, devices of tensors made in `forward`, `forward` called directly; one rule per module."""
