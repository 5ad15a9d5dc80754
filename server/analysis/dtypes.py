"""Which dtype an op returns where its sizes are unknown: torch's type promotion, for the cases
it decides from the operands' dtypes alone.

The layout algebra (symbolic_ops) and the size-free fallback (interp_torch) give a result
"the inputs' dtype" by default; that is wrong for `x.sqrt()` of an int64 tensor (float32),
`mask.sum()` of a bool one (int64) or `idx / 2` (float32). `op_dtype` is asked with the op's
name and the operands; it answers a dtype, None (not decided: promotion between different
dtypes, a Python float meeting an int tensor, an operand that may be a tensor), or
`NOT_MODELLED` for ops it has no rule for (the caller keeps what it had). Checked against torch
2.13 in tests/analysis/test_op_dtypes.py.
"""

from __future__ import annotations

from typing import Final

FLOATING: Final = frozenset({"float16", "bfloat16", "float32", "float64"})

NOT_MODELLED: Final = "not modelled"

# Results that are bool whatever the operands.
_BOOL = frozenset(
    {
        "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isneginf", "isposinf",
        "logical_not", "logical_and", "logical_or", "logical_xor", "all", "any", "isclose",
        "signbit",
    }
)  # fmt: skip

# Results that are int64 whatever the operands (indices, counts).
_INT64 = frozenset({"argmax", "argmin", "argsort", "multinomial", "nonzero", "bucketize", "searchsorted", "count_nonzero"})

# Floating results: of a floating input its dtype, of an integer or bool input the default
# float dtype (not stated: a file may change it).
_FLOAT_RESULT = frozenset(
    {
        "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sigmoid",
        "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "erf", "erfc",
        "erfinv", "reciprocal", "softmax", "log_softmax", "softmin", "mean", "std", "var",
        "norm", "logsumexp", "gelu", "silu", "mish", "softplus", "elu", "selu", "celu",
        "logsigmoid", "hardswish", "hardsigmoid", "truediv", "div", "true_divide", "layer_norm",
        "rms_norm", "group_norm", "batch_norm", "instance_norm", "normalize", "dropout",
        "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "lerp", "atan2", "hypot",
        "tanhshrink", "softsign", "cross_entropy", "mse_loss", "l1_loss", "nll_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss",
        "kl_div", "cosine_similarity", "pairwise_distance", "scaled_dot_product_attention",
        "interpolate", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
        "adaptive_avg_pool2d", "adaptive_avg_pool3d", "linear", "conv1d", "conv2d", "conv3d",
        "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "rsqrt_", "sigmoid_",
        "exp_", "tanh_", "sqrt_",
    }
)  # fmt: skip

# Results of the operands' own dtype, integer and bool included (when all operands agree).
_SAME_ANY = frozenset(
    {
        "relu", "relu6", "leaky_relu", "hardtanh", "abs", "neg", "pos", "clamp", "clip",
        "clamp_min", "clamp_max", "amax", "amin", "add", "sub", "mul", "multiply", "subtract",
        "matmul", "mm", "bmm", "maximum", "minimum", "fmax", "fmin", "cat", "concat",
        "concatenate", "stack", "hstack", "vstack", "outer", "einsum", "tensordot", "kron",
        "max_pool1d", "max_pool2d", "max_pool3d", "sign", "square", "floordiv", "floor_divide",
        "mod", "remainder", "fmod", "and_", "or_", "xor", "bitwise_and", "bitwise_or",
        "bitwise_xor", "invert", "bitwise_not", "floor", "ceil", "round", "trunc", "frac",
        "nan_to_num", "max", "min", "pow",
    }
)  # fmt: skip

# Sums and products: of a floating input its dtype, of an integer or bool input int64.
_ACCUMULATE = frozenset({"sum", "prod", "cumsum", "cumprod", "nansum"})

# Ops whose result has the dtype of their first tensor operand whatever the others are
# (layout ops, indexing with int64 indices or a bool mask, values written into it).
_OF_FIRST = frozenset(
    {
        "masked_fill", "index_fill", "scatter", "scatter_add", "scatter_reduce", "index_add",
        "index_copy", "index_put", "gather", "index_select", "take_along_dim", "masked_scatter",
        "new_zeros", "new_ones", "new_empty", "masked_select", "getitem",
        "transpose", "permute", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
        "expand", "expand_as", "view_as", "reshape_as", "movedim", "swapaxes", "split",
        "chunk", "unbind", "select", "narrow", "t", "contiguous", "clone", "detach", "repeat",
        "tile", "flip", "roll", "tril", "triu", "diagonal", "diag", "unfold", "rot90",
        "broadcast_to", "pad", "pixel_shuffle", "pixel_unshuffle",
        "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like",
    }
)  # fmt: skip

# Ops whose second tensor operand gives the dtype (`F.embedding(idx, weight)`, `x.type_as(y)`).
_SECOND = frozenset({"embedding", "type_as"})


def _common(dtypes: list[str | None]) -> str | None:
    known = set(dtypes)
    return known.pop() if len(known) == 1 else None


def op_dtype(op: str, tensor_dtypes: list[str | None], scalars: tuple[type, ...] = (), *, exact_operands: bool = True) -> str | None:
    """The dtype of `op` applied to tensors of `tensor_dtypes` (in operand order) and Python
    scalars of the types in `scalars`; `exact_operands` False when another operand may be a
    tensor the analysis does not follow. `NOT_MODELLED` where there is no rule."""
    if op in _BOOL:
        return "bool"
    if op in _INT64:
        return "int64"
    if op in _OF_FIRST:
        return tensor_dtypes[0] if tensor_dtypes else None
    if op in _SECOND:
        return tensor_dtypes[1] if len(tensor_dtypes) > 1 else None
    if op not in _FLOAT_RESULT and op not in _SAME_ANY and op not in _ACCUMULATE:
        return NOT_MODELLED
    if not exact_operands or not tensor_dtypes:
        return None
    common = _common(tensor_dtypes)
    if common is None:
        return None  # unknown, or promoted between two dtypes: not modelled
    if common in FLOATING:
        # A Python int or float never changes a floating tensor's dtype; a complex one would.
        return common if all(t in (int, float, bool) for t in scalars) else None
    if op in _FLOAT_RESULT or float in scalars or any(t not in (int, bool) for t in scalars):
        return None  # the default float dtype, or a promotion: not stated
    if op in _ACCUMULATE:
        return "int64"
    if common == "bool" and scalars:
        # `mask + 1` is int64 (`mask * 1.0` the default float, not stated)
        return "int64" if int in scalars and op in _SAME_ANY else (common if set(scalars) == {bool} else None)
    return common


__all__ = ["FLOATING", "NOT_MODELLED", "op_dtype"]
