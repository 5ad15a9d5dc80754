"""The whitelist: which torch callables the analysis may replay, and how ops move memory.

Nothing outside these tables is ever called. Names are the public spellings users write.
"""

from __future__ import annotations

FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "randn", "rand", "randint", "full", "arange", "linspace",
        "logspace", "eye", "zeros_like", "ones_like", "empty_like", "randn_like", "rand_like",
        "randint_like", "full_like", "tensor", "as_tensor", "empty_strided", "randperm",
    }
)  # fmt: skip

# torch.<name>(...) callable on meta tensors.
TORCH_FUNCTIONS = frozenset(
    {
        "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "matmul", "mm",
        "bmm", "mv", "dot", "outer", "einsum", "add", "sub", "subtract", "mul", "multiply",
        "div", "divide", "true_divide", "floor_divide", "remainder", "fmod", "pow", "where",
        "exp", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "abs", "neg",
        "sign", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "softmax", "log_softmax",
        "sum", "mean", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "std", "var",
        "norm", "logsumexp", "cumsum", "cumprod", "all", "any", "clamp", "clip", "maximum",
        "minimum", "transpose", "permute", "movedim", "moveaxis", "swapaxes", "swapdims",
        "flatten", "unflatten", "reshape", "squeeze", "unsqueeze", "narrow", "select",
        "diagonal", "diag", "chunk", "split", "tensor_split", "unbind", "t", "clone", "detach",
        "flip", "roll", "tril", "triu", "broadcast_to", "gather", "index_select", "masked_fill",
        "layer_norm", "dropout", "conv1d", "conv2d", "conv3d", "addmm", "baddbmm", "lerp",
        "square", "reciprocal", "floor", "ceil", "round", "trunc", "isnan", "isinf",
        "isfinite", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
        "logical_not", "erf", "sort", "topk", "kthvalue", "median", "mode", "repeat_interleave", "tile", "ravel",
        "as_strided", "view_as_real", "view_as_complex", "cdist", "atan2", "real", "imag",
        "sinh", "cosh", "asin", "acos", "atan", "exp2", "sigmoid_", "relu_", "zeros_like",
        "numel", "is_tensor", "broadcast_tensors", "meshgrid", "take_along_dim",
        "triu_indices", "tril_indices", "nan_to_num", "heaviside", "hypot",
    }
)  # fmt: skip

# torch.nn.functional.<name>(...)
FUNCTIONAL = frozenset(
    {
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "linear", "bilinear", "relu", "relu6", "gelu", "silu", "elu",
        "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "mish",
        "softplus", "softsign", "tanh", "sigmoid", "softmax", "log_softmax", "softmin", "glu",
        "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "layer_norm",
        "batch_norm", "group_norm", "instance_norm", "rms_norm", "max_pool1d", "max_pool2d",
        "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
        "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
        "adaptive_max_pool2d", "adaptive_max_pool3d", "interpolate", "pad", "embedding",
        "cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "nll_loss",
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "normalize",
        "scaled_dot_product_attention", "unfold", "fold", "pixel_shuffle", "pixel_unshuffle",
        "cosine_similarity", "pairwise_distance", "one_hot", "logsigmoid", "tanhshrink",
    }
)  # fmt: skip

CONV_FUNCTIONS = frozenset({"conv1d", "conv2d", "conv3d"})

# torch.nn.functional ops that take `inplace` (its position when passed positionally): with
# `inplace=True` they return their input itself, not a new tensor.
INPLACE_POSITION = {
    "relu": 1, "relu6": 1, "silu": 1, "selu": 1, "mish": 1, "hardswish": 1, "hardsigmoid": 1,
    "elu": 2, "celu": 2, "leaky_relu": 2, "hardtanh": 3, "threshold": 3, "rrelu": 4,
    "dropout": 3, "dropout1d": 3, "dropout2d": 3, "dropout3d": 3, "alpha_dropout": 3,
    "feature_alpha_dropout": 3,
}  # fmt: skip
# Dropouts return their input itself in eval mode or with p == 0 (`F.dropout(x, p,
# training=False) is x`), a new tensor only when training with p > 0.
DROPOUTS = frozenset(
    {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}
)

# Methods of Tensor the analysis may call on meta tensors.
TENSOR_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "expand", "expand_as", "contiguous",
        "clone", "detach", "detach_", "to", "float", "half", "double", "long", "int", "short",
        "bool", "bfloat16", "byte", "char", "type_as", "permute", "transpose", "t", "movedim",
        "moveaxis", "swapaxes", "swapdims", "unsqueeze", "squeeze", "flatten", "unflatten",
        "narrow", "select", "diagonal", "unfold", "chunk", "split", "tensor_split", "unbind",
        "repeat", "tile", "flip", "roll", "sum", "mean", "prod", "max", "min", "amax", "amin",
        "argmax", "argmin", "std", "var", "norm", "logsumexp", "cumsum", "cumprod", "all",
        "any", "softmax", "log_softmax", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "relu",
        "sigmoid", "tanh", "clamp", "clip", "pow", "add", "sub", "mul", "div", "matmul", "mm",
        "bmm", "masked_fill", "gather", "index_select", "where", "tril", "triu", "square",
        "reciprocal", "floor", "ceil", "round", "sign", "isnan", "isinf", "eq", "ne", "lt",
        "le", "gt", "ge", "as_strided", "new_zeros", "new_ones", "new_empty", "new_full",
        "new_tensor", "broadcast_to", "diag", "outer", "dot", "ravel", "sort", "topk",
        "add_", "sub_", "mul_", "div_", "zero_", "fill_", "copy_", "clamp_", "masked_fill_",
        "relu_", "sigmoid_", "tanh_", "exp_", "pow_", "addcmul_", "addcdiv_", "uniform_",
        "normal_", "neg_", "abs_", "sqrt_", "unsqueeze_", "squeeze_", "t_", "transpose_",
        "requires_grad_", "lerp", "lerp_", "erf", "real", "imag", "type", "nan_to_num",
        "float_power", "floor_divide", "remainder", "fmod", "logical_not", "logical_and",
        "logical_or", "kthvalue", "median", "mode",
        # Elementwise math whose dtype rule is in dtypes.py (shape: symbolic_ops).
        "tan", "asin", "acos", "atan", "sinh", "cosh", "sin", "cos", "log2", "log10", "log1p",
        "expm1", "exp2", "trunc", "frac", "erfc", "erfinv", "sgn", "isfinite", "signbit",
        "clamp_min", "clamp_max", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot",
        "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "argsort",
        "addcmul", "addcdiv", "isclose",
        # In place: the receiver itself, its dtype unchanged.
        "sign_", "sin_", "cos_", "log_", "log1p_", "log2_", "floor_", "ceil_", "round_",
        "trunc_", "frac_", "reciprocal_", "clamp_min_", "clamp_max_", "clip_", "erf_",
        "square_", "rsqrt_", "sgn_", "index_add_", "index_fill_", "index_copy_", "index_put_",
        "scatter_", "scatter_add_", "scatter_reduce_", "masked_scatter_", "bernoulli_",
        "exponential_", "random_", "geometric_", "log_normal_", "cauchy_", "fmod_",
        "remainder_", "logical_not_", "nan_to_num_", "floor_divide_", "atan2_", "hypot_",
        "bitwise_and_", "bitwise_or_", "bitwise_xor_", "bitwise_not_", "logical_and_",
        "logical_or_", "logical_xor_", "tril_", "triu_", "addmm_", "baddbmm_", "renorm_",
    }
)  # fmt: skip

# Ops returning `(values, indices)` (a named tuple: `.values`, `.indices`, `[0]`, `[1]`); `max`,
# `min` and `median` only when given a dim. Their result is a SeqValue of this kind.
RETURNS_VALUES_INDICES = frozenset({"max", "min", "median", "mode", "kthvalue", "topk", "sort"})
VALUES_INDICES = "(values, indices)"

# Methods whose result reads the receiver's storage (always a view when they succeed).
VIEW_METHODS = frozenset(
    {
        "view", "view_as", "expand", "expand_as", "narrow", "select", "diagonal", "unfold",
        "chunk", "split", "tensor_split", "unbind", "t", "transpose", "permute", "movedim",
        "moveaxis", "swapaxes", "swapdims", "unsqueeze", "squeeze", "as_strided", "detach",
        "unflatten", "real", "imag", "T", "mT", "H", "mH",
    }
)  # fmt: skip

# Methods that reorder dims: the result is (usually) not contiguous.
PERMUTING = frozenset(
    {"permute", "transpose", "t", "movedim", "moveaxis", "swapaxes", "swapdims", "T", "mT", "H", "mH"}
)

# Methods that may copy or not depending on layout.
MAYBE_COPY = frozenset({"reshape", "reshape_as", "flatten", "ravel", "contiguous"})

# Receiver is certainly a tensor when one of these is called on it (numpy has none of them).
TENSOR_ONLY_METHODS = frozenset(
    {
        "permute", "contiguous", "unsqueeze", "detach", "detach_", "view_as", "expand_as",
        "movedim", "narrow", "unflatten", "requires_grad_", "retain_grad", "half", "bfloat16",
        "masked_fill", "masked_fill_", "index_select", "softmax", "log_softmax", "is_contiguous",
        "untyped_storage", "data_ptr", "storage_offset", "mT", "backward",
        # dtype conversions and ops no other common library spells this way (numpy has
        # `astype`, `clip`; lists and strings have none of these).
        "float", "double", "long", "type_as", "unbind", "sigmoid", "masked_select", "addcmul",
        "lerp", "rsqrt", "clamp", "clamp_", "sign_", "mul_", "add_", "div_", "sub_",
    }
)  # fmt: skip

# Methods returning a plain Python value.
SCALAR_METHODS = frozenset({"item", "tolist", "numpy", "data_ptr", "storage_offset"})

NN_MODULES = frozenset(
    {
        "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
        "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
        "RMSNorm", "Embedding", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
        "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
        "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
        "ReLU", "ReLU6", "GELU", "SiLU", "ELU", "SELU", "LeakyReLU", "PReLU", "Tanh",
        "Sigmoid", "Softmax", "LogSoftmax", "Softplus", "Mish", "Hardswish", "Hardsigmoid",
        "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Identity",
        "Flatten", "Unflatten", "Sequential", "Upsample", "PixelShuffle", "ZeroPad2d",
        "ConstantPad1d", "ConstantPad2d", "ReflectionPad2d", "MSELoss", "L1Loss",
        "SmoothL1Loss", "HuberLoss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
        "BCEWithLogitsLoss", "KLDivLoss", "CosineSimilarity", "GLU", "LSTM", "GRU", "RNN",
        "MultiheadAttention",
    }
)  # fmt: skip

# Containers of other modules: they stand for what they hold (`interp_modules.make_module`).
NN_CONTAINERS = frozenset({"ModuleList", "ModuleDict"})

CONV_MODULES = frozenset({"Conv1d", "Conv2d", "Conv3d"})

DTYPES = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64",
    "long": "int64", "int32": "int32", "int": "int32", "int16": "int16", "short": "int16",
    "int8": "int8", "uint8": "uint8", "bool": "bool", "complex64": "complex64",
    "cfloat": "complex64", "complex128": "complex128", "cdouble": "complex128",
}  # fmt: skip

MEMORY_FORMATS = frozenset(
    {"contiguous_format", "channels_last", "channels_last_3d", "preserve_format"}
)

# Context managers / decorators that switch grad mode, and the mode they set.
GRAD_CONTEXTS = {
    "torch.no_grad": False,
    "torch.inference_mode": False,
    "torch.enable_grad": True,
    "torch.set_grad_enabled": None,  # depends on its argument
    "torch.autograd.no_grad": False,
    "torch.autograd.grad_mode.no_grad": False,
}

# Dtype-casting methods and the dtype they produce.
CAST_METHODS = {
    "float": "float32", "half": "float16", "double": "float64", "long": "int64",
    "int": "int32", "short": "int16", "bool": "bool", "bfloat16": "bfloat16",
    "byte": "uint8", "char": "int8",
}  # fmt: skip
