"""SL102 fires only on what the engine proved, and says under what; its `.contiguous()` fix
is safe (applied by `check --fix`) only where the non-contiguity holds for every size.

The fixtures (sl102_into_module.py, sl102_symbolic.py) hold the cases; these tests hold what
the fixtures cannot say: the message's conditions and the fix's safety.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from stridelens.server.analysis import analyze_file
from stridelens.server.rules import run_rules
from stridelens.server.rules.fixes import apply_fixes

SYMBOLIC = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F
    from torch import nn


    class TimeMix(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.conv = nn.Conv1d(dim, dim, 1)

        def forward(self, x):
            B, T, C = x.shape
            return self.conv(x.permute(0, 2, 1))


    class Rebound(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.conv = nn.Conv1d(dim, dim, 1)

        def forward(self, x):
            B, T, C = x.shape
            x = x.transpose(1, 2)
            return self.conv(x)


    x = torch.randn(2, 16, 8)
    y = F.linear(x.transpose(1, 2), torch.randn(4, 16))
    """
)

# timm's attention tail after the heads: nothing proves `x` non-contiguous at `proj`
# (it is contiguous in every run: the reshape copies).
ATTENTION = textwrap.dedent(
    """\
    import torch.nn.functional as F
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, dim, num_heads=8):
            super().__init__()
            self.num_heads = num_heads
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            x = F.scaled_dot_product_attention(q, k, v)
            x = x.transpose(1, 2).reshape(B, N, C)
            return self.proj(x)

        def unknown(self, attn, v):
            x = attn @ v
            x = x.transpose(1, 2)
            return self.proj(x)
    """
)


def _findings(tmp_path: Path, source: str) -> tuple[str, list]:
    path = tmp_path / "case.py"
    path.write_text(source, encoding="utf-8")
    analysis = analyze_file(str(path))
    return analysis.source, run_rules(analysis, select=["SL102"])


def test_literal_sizes_give_a_safe_fix_symbolic_ones_an_unsafe_one(tmp_path: Path) -> None:
    source, findings = _findings(tmp_path, SYMBOLIC)
    by_line = {f.line: f for f in findings}
    assert sorted(by_line) == [13, 24, 28]
    literal, inline, rebound = by_line[28], by_line[13], by_line[24]
    assert literal.fix is not None and literal.fix.safe
    assert "unless" not in literal.message and "assuming" not in literal.message
    # Over symbolic sizes: the conditions are in the message, and the fix is not applied.
    assert inline.fix is not None and not inline.fix.safe
    assert "unless `C == 1` or `T == 1`" in inline.message
    assert "(assuming `x.is_contiguous()`)" in inline.message
    # `x` was rebound: its assumption is said in words.
    assert rebound.fix is not None and not rebound.fix.safe
    assert "(assuming the argument `x` is contiguous)" in rebound.message
    fixed = apply_fixes(source, findings).source  # what `check --fix` applies
    assert "F.linear(x.transpose(1, 2).contiguous(), torch.randn(4, 16))" in fixed
    assert "self.conv(x.permute(0, 2, 1))\n" in fixed and "self.conv(x)\n" in fixed
    unsafe = apply_fixes(source, findings, unsafe=True).source
    assert "self.conv(x.permute(0, 2, 1).contiguous())" in unsafe and "self.conv(x.contiguous())" in unsafe


def test_unknown_contiguity_is_no_finding(tmp_path: Path) -> None:
    _, findings = _findings(tmp_path, ATTENTION)
    assert findings == []


def test_json_says_the_fix_is_unsafe(tmp_path: Path) -> None:
    _, findings = _findings(tmp_path, SYMBOLIC)
    safe = {f.line: f.fix.to_json()["safe"] for f in findings}
    assert safe == {13: False, 24: False, 28: True}
