"""The dtype of an op on tensors of symbolic or unknown sizes follows torch's promotion.

Integer and bool tensors are where "the input's dtype" goes wrong: `idx / 2` and `idx.sqrt()`
are float32, `mask.sum()` is int64, `idx > 3` is bool, `mask + 1` is int64. Floating tensors
keep their dtype through elementwise ops, activations, norms and layout ops; tensors of two
different dtypes, or an operand the analysis cannot follow, leave the dtype unstated.

The snippet runs for real on several sizes, under grad and no_grad, with float32 and float16
inputs (tests/realcode/compare.py checks every stated field in every run).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.realcode import compare as realcompare

NAME = "op_dtypes"

SOURCE = """
import torch
import torch.nn.functional as F


def integers(n):
    idx = torch.zeros(n, dtype=torch.int64)
    halved = idx / 2
    floored = idx // 2
    doubled = idx * 2
    rooted = idx.sqrt()
    above = idx > 3
    count = above.sum()
    shifted = above + 1
    both = above & above
    total = idx.sum()
    picked = idx.argmax()
    return halved


def floats(x, other, holder):
    act = F.relu(x)
    gated = F.gelu(x) * torch.sigmoid(x)
    scaled = x * 0.5
    flat = act.flatten(1).transpose(0, 1)
    masked = x.masked_fill(x > 0, 0.0)
    mixed = x + other
    unknown = x * holder.weight
    return act, gated, scaled, flat, masked, mixed, unknown


def conversions(x, y, eps: float, scale=1e-5):
    as_float = x.float()
    as_double = y.double()
    like_double = as_float.type_as(as_double)
    like_float = as_double.type_as(as_float)
    kept = as_float * eps + scale
    rooted = torch.rsqrt(as_float.pow(2).mean(-1, keepdim=True) + eps)
    return like_double, like_float, kept, rooted


def retyped(x):
    typed = x.type(torch.float32)
    return typed
"""

INTEGERS = ["halved", "floored", "doubled", "rooted", "above", "count", "shifted", "both", "total", "picked"]
FLOATS = ["act", "gated", "scaled", "flat", "masked"]


class _Other:
    weight = torch.ones(1, dtype=torch.float64)


def _entry(ns: dict[str, Any]) -> None:
    for n in (3, 6):
        ns["integers"](n)
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(2, 3, dtype=dtype, requires_grad=True)
        ns["floats"](x, torch.randn(2, 3, dtype=torch.float64), _Other())
        with torch.no_grad():
            ns["floats"](x, torch.randn(2, 3, dtype=dtype), _Other())
    for x, y in ((torch.arange(6).view(2, 3), torch.randn(4, dtype=torch.float16)), (torch.randn(3, 1), torch.ones(2))):
        ns["conversions"](x, y, 1e-6)
        ns["conversions"](x, y, 2.0, scale=0.5)
    ns["retyped"](torch.randn(2, 3).t())  # float32 already: x itself, a view
    ns["retyped"](torch.arange(4))  # a copy


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


@pytest.mark.parametrize("name", INTEGERS)
def test_integer_and_bool_results_are_stated(oracle: realcompare.SnippetOracle, name: str) -> None:
    expected = {"halved": "float32", "rooted": "float32", "above": "bool", "both": "bool"}
    dtype = (oracle.answer(name, "integers") or {}).get("dtype")
    if name in ("halved", "rooted"):
        # the default float dtype: a file may change it, so it is not stated
        assert dtype is None
    else:
        assert dtype == expected.get(name, "int64"), (name, dtype)


@pytest.mark.parametrize("name", FLOATS)
def test_a_floating_input_keeps_its_dtype_unstated_when_it_varies(oracle: realcompare.SnippetOracle, name: str) -> None:
    # x is float32 in one run and float16 in another: nothing may say "float32".
    assert (oracle.answer(name, "floats") or {}).get("dtype") is None


def test_an_operand_of_another_or_unknown_dtype_leaves_the_dtype_unstated(oracle: realcompare.SnippetOracle) -> None:
    for name in ("mixed", "unknown"):
        assert (oracle.answer(name, "floats") or {}).get("dtype") is None, name


def test_floating_results_keep_a_known_dtype() -> None:
    from stridelens.server.analysis.dtypes import op_dtype

    # (the dtype-keeping half, on dtypes the analysis knows: checked against torch here)
    x = torch.randn(2, 3, dtype=torch.float16)
    cases = {
        "relu": torch.relu(x), "gelu": torch.nn.functional.gelu(x.float()).half(), "mul": x * 0.5,
        "transpose": x.transpose(0, 1), "masked_fill": x.masked_fill(x > 0, 0.0), "sum": x.sum(),
        "getitem": x[torch.tensor([0])], "softmax": x.float().softmax(-1).half(),
    }
    for op, real in cases.items():
        assert op_dtype(op, ["float16"], (float,)) == str(real.dtype).removeprefix("torch."), op


def test_a_conversion_decides_the_dtype_whatever_the_input(oracle: realcompare.SnippetOracle) -> None:
    # x is int64 in one run and float32 in another; `eps: float` and `scale=1e-5` are Python
    # scalars, which never change a floating tensor's dtype.
    dtypes = {name: (oracle.answer(name, "conversions") or {}).get("dtype") for name in ("as_float", "as_double", "kept", "rooted")}
    assert dtypes == {"as_float": "float32", "as_double": "float64", "kept": "float32", "rooted": "float32"}


def test_type_as_takes_the_dtype_of_its_argument(oracle: realcompare.SnippetOracle) -> None:
    assert (oracle.answer("like_double", "conversions") or {}).get("dtype") == "float64"
    assert (oracle.answer("like_float", "conversions") or {}).get("dtype") == "float32"


def test_type_to_a_dtype_is_that_dtype_and_maybe_the_tensor_itself(oracle: realcompare.SnippetOracle) -> None:
    typed = oracle.answer("typed", "retyped") or {}
    assert typed.get("dtype") == "float32"
    assert typed.get("is_view") is None  # the transposed input is returned as it is
