"""What a user reads in `stridelens inspect`'s text reports, end to end: real debugpy, real
torch on CPU. Each case of issue 32 (names, grouping, widths) asserts the words shown."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from .conftest import marker_line

pytestmark = pytest.mark.timeout(240)


VIEWS = """
    import torch
    a = torch.arange(12.).reshape(3, 4)
    t = a.t()
    x = torch.zeros(4, 4)
    row = x[1]
    print("ready")  # inspect here
"""


def test_a_view_is_named_after_its_base_only_when_it_is_that_tensor(script: Any, inspect_cli: Any) -> None:
    a = torch.arange(12.).reshape(3, 4)
    assert a.t()._base is not a and a.t()._base.shape == (12,)  # the oracle
    p = script("views.py", VIEWS)
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--expr", "t", "--expr", "row",
                    "--frame")
    assert r.rc == 0, r.err
    out = re.sub(r"\s+", " ", r.out)  # lines wrap where the terminal ends
    assert "view of an unnamed tensor of shape (12,) (the `_base`); shares the storage of `a`" in out
    assert "`a`, a tensor of shape" not in out
    assert "view of `x`, a tensor of shape (4, 4) (the `_base`)" in out
    assert "t is a view of an unnamed base at offset 0 (it shares the storage of a, not a view of it)" in out
    assert "row is a view of x at offset 4" in out
