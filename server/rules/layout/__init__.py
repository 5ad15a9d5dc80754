"""Layout rules (SL1xx): views, copies and strides, one rule per module."""
