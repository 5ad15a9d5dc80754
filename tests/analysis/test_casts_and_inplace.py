"""dtype conversions and augmented assignment on tensors of symbolic sizes, checked for real.

* `x.float()`, `x.half()`, `x.type(torch.float64)`, `x.to(torch.float16)`, `x.to(dtype=...)`:
  the shape stays, the dtype is the one asked for; when the input's dtype is unknown the result
  may be the input itself (no copy), so no new storage and no view verdict is claimed;
* `F.adaptive_avg_pool2d(x, (1, 1))`: the leading sizes, then the ones asked for;
* `y += r`, `y /= s`: the same tensor (an in-place op cannot broadcast its target or change its
  dtype): shape, layout, view-ness stay, whatever `r` is.

The snippet runs with float32 and float16 inputs, views and leaves that require grad, under
grad and under no_grad (tests/realcode/compare.py checks every stated field in every run).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.realcode import compare as realcompare

NAME = "casts_and_inplace"

SOURCE = """
import torch
import torch.nn.functional as F


def casts(x):
    B, T, C = x.shape
    as_float = x.float()
    as_half = x.half()
    as_double = x.type(torch.float64)
    to_half = x.to(torch.float16)
    to_kw = x.to(dtype=torch.bfloat16)
    as_long = x.long()
    pooled = F.adaptive_avg_pool2d(x, (1, 1))
    return as_float, as_half, as_double, to_half, to_kw, as_long, pooled


def inplace(x, r, s):
    B, T, C = x.shape
    y = x * 2
    y += r
    y /= s
    head = x[:, 0]
    head *= 3
    return y, head
"""


def _entry(ns: dict[str, Any]) -> None:
    for B, T, C in ((2, 3, 4), (1, 5, 2), (3, 1, 1)):
        for dtype in (torch.float32, torch.float16):
            base = torch.randn(B, T + 1, C, dtype=dtype)
            for x in (torch.randn(B, T, C, dtype=dtype), torch.randn(B, T, C, dtype=dtype, requires_grad=True), base[:, 1:]):
                ns["casts"](x)
                with torch.no_grad():
                    ns["casts"](x)
            leaf = torch.randn(B, T, C, dtype=dtype, requires_grad=True)
            ns["inplace"](leaf.detach(), torch.randn(C, dtype=dtype), 2.0)
            ns["inplace"](leaf * 1, torch.randn(1, T, C, dtype=dtype, requires_grad=True), 3.0)
            with torch.no_grad():
                ns["inplace"](leaf, torch.randn(T, 1, dtype=dtype), 4.0)


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("as_float", "float32"), ("as_half", "float16"), ("as_double", "float64"), ("to_half", "float16"), ("to_kw", "bfloat16"), ("as_long", "int64")],
)
def test_a_cast_states_its_dtype_and_keeps_the_shape(oracle: realcompare.SnippetOracle, name: str, dtype: str) -> None:
    answer = oracle.answer(name, "casts") or {}
    assert answer.get("dtype") == dtype and answer.get("shape") == ["B", "T", "C"], answer
    assert answer.get("is_view") is not False or name == "as_long", answer  # may be x itself


def test_an_augmented_assignment_keeps_its_target(oracle: realcompare.SnippetOracle) -> None:
    lines = SOURCE.splitlines()
    for text in ("y += r", "y /= s", "head *= 3"):
        line = next(i for i, t in enumerate(lines, 1) if t.strip() == text)
        answer = next(a for p, a in oracle.answers.items() if p.line == line) or {}
        assert answer.get("shape") is not None, (text, answer)
    head = next(a for p, a in oracle.answers.items() if p.line == lines.index("    head *= 3") + 1) or {}
    assert head.get("is_view") is True and head.get("shape") == ["B", "C"], head


def test_adaptive_pooling_states_the_sizes_asked_for(oracle: realcompare.SnippetOracle) -> None:
    pooled = oracle.answer("pooled", "casts") or {}
    assert pooled.get("shape") == ["B", 1, 1] and pooled.get("is_view") is False, pooled
