"""Regressions for wrong facts measured on held-out real code, each checked against real torch.

Two kinds of check (the harness of test_einops_and_tuple_ops.py):

* literal sizes (meta replay): the snippet runs for real (tests/analysis/oracle.py) and no
  field the engine states may differ from the real tensor (`oracle.contradictions`);
* symbolic sizes: a module whose functions take every size from their inputs is analysed as
  text (no call in it gives a literal size), then run for real with several size combinations,
  some with sizes of 1 (tests/realcode/driver.py instruments it); every field of the `explain`
  JSON is checked against every run (tests/realcode/compare.py: strings evaluated in the
  pre-statement locals, runs whose `assumes` is false skipped).

Cases (FACTS.md "Views without `_base`"):

1. `torch.einsum` and `repeat_interleave` return views (`_base` set) for some equations/counts:
   never stated as copies (`is_view` False) where sizes are symbolic.
2. Views made under `torch.inference_mode()` of an inference tensor have no `_base`; a dtype
   view (`x.view(torch.int16)`) has none either: `is_view` is not stated True.
3. A `transpose`/`permute` of symbolic sizes is non-contiguous only while the moved dims are
   not 1: the verdict has its `assumes`, and the note says "unless ... size 1".
4. A `reshape` of a transposed tensor copies except when a size is 1: stated with the right
   `assumes` (checked in runs with B == 1, T == 1 and a head dim of 1).
5. `requires_grad` is not stated through a `@staticmethod` body or a module body reached both
   in a training step and under `no_grad` in an eval loop.
6. The hover card and `explain` give one verdict at every position (tests/lsp/test_hover_explain_agree.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.analysis.oracle import (
    analyse,
    assert_stated_facts_hold,
    contradictions,
    probes_of,
    run_for_real_all,
)
from tests.realcode import compare as realcompare

# --------------------------------------------------------------------------- literal sizes

LITERAL = """
import torch

a = torch.randn(2, 3, 4)
w = torch.randn(4, 5)
contraction = torch.einsum("bij,jk->bik", a, w)
q = torch.randn(2, 3, 4, 5, requires_grad=True)
permutation = torch.einsum("bhqd->bqhd", q)
outer = torch.einsum("i,j->ij", w[0], w[:, 0])
reduced = torch.einsum("bhqd->d", q)
rep = torch.repeat_interleave(a, 2, dim=0)
rep_q = torch.repeat_interleave(q, 3, dim=1)
with torch.inference_mode():
    made = torch.randn(2, 3, 4)
    made_t = made.transpose(0, 1)
    made_row = made[0]
    made_flat = made.view(6, 4)
    a_t = a.transpose(0, 1)
as_int = a.view(torch.int16)
as_int32 = q.view(torch.int32)
as_half = a.view(torch.float16)
unit = torch.randn(2, 1, 4)
unit_t = unit.transpose(0, 1)
unit_p = unit.permute(1, 0, 2)
x = torch.randn(2, 3, 4)
copied = x.transpose(0, 1).reshape(3, 8)
one = torch.randn(1, 3, 4)
one_view = one.transpose(0, 1).reshape(3, 4)
"""


@pytest.fixture(scope="module")
def literal() -> tuple[dict[Any, list[Any]], Any]:
    return run_for_real_all(LITERAL), analyse(LITERAL)


@pytest.mark.parametrize("probe", probes_of(LITERAL), ids=lambda p: f"{p.line}:{p.name}")
def test_literal_facts_hold(literal: tuple[dict[Any, list[Any]], Any], probe: Any) -> None:
    real_values, analysis = literal
    assert_stated_facts_hold(analysis, real_values, probe)


def _literal_answer(literal: tuple[dict[Any, list[Any]], Any], name: str) -> dict[str, Any]:
    _, analysis = literal
    probe = next(p for p in probes_of(LITERAL) if p.name == name)
    answer = analysis.explain_at(probe.line, probe.col).answer()
    assert answer is not None
    return answer  # type: ignore[no-any-return]


def test_literal_views_without_base(literal: tuple[dict[Any, list[Any]], Any]) -> None:
    # case 1: torch says view; the replay reads it
    for name in ("contraction", "permutation", "rep", "rep_q"):
        assert _literal_answer(literal, name)["is_view"] is True, name
    # case 2: inference tensors' views and dtype views: shares storage, no `_base`
    for name in ("made_t", "made_row", "made_flat"):
        answer = _literal_answer(literal, name)
        assert answer["is_view"] is not True, name
        assert answer["view_of"] == "made", name
    for name in ("as_int", "as_half"):
        answer = _literal_answer(literal, name)
        assert answer["is_view"] is False and answer["view_of"] == "a", name
    assert _literal_answer(literal, "as_int32")["requires_grad"] is False
    # case 3: moving a dim of size 1 keeps the tensor contiguous
    for name in ("unit_t", "unit_p"):
        assert _literal_answer(literal, name)["contiguous"] is True, name


# --------------------------------------------------------------------------- symbolic sizes

NAME = "wrong_facts_regressions"

SOURCE = '''"""Symbolic sizes only (a stridelens oracle input): nothing here calls these functions."""

import torch
from torch import nn


def einsum_and_repeat(x, w, k):
    B, T, C = x.shape
    z = torch.zeros(B, T, C)
    contraction = torch.einsum("btc,cd->btd", z, w)
    moved = torch.einsum("btc->tbc", z)
    outer = torch.einsum("i,j->ij", z[0, 0], z[0, :, 0])
    by_list = torch.einsum("btc,cd->btd", *[x, w])
    rep = torch.repeat_interleave(z, 2, dim=0)
    rep_k = torch.repeat_interleave(z, k, dim=2)
    rep_x = torch.repeat_interleave(x, 2, dim=1)
    return contraction, moved, outer, by_list, rep, rep_k, rep_x


def inference_views(x):
    B, T, C = x.shape
    with torch.inference_mode():
        made = torch.zeros(B, T, C)
        made_t = made.transpose(0, 1)
        made_rows = made.view(B * T, C)
        parts = made.unbind(0)
        first = parts[0]
        x_t = x.transpose(1, 2)
    later = made_t
    as_int = x.view(torch.int16)
    return made_t, made_rows, first, x_t, later, as_int


@torch.inference_mode()
def decorated(x):
    B, T, C = x.shape
    h = x * 2
    h_t = h.transpose(0, 1)
    return h_t


def layouts(x, n_head):
    B, T, C = x.shape
    a = x.transpose(1, 2)
    b = x.permute(0, 2, 1)
    c = x.transpose(0, 1)
    q = x.view(B, T, n_head, C // n_head).transpose(1, 2)
    y = q.transpose(1, 2).contiguous().view(B, T, C)
    merged = q.transpose(1, 2).reshape(B, T, C)
    rows = x.transpose(0, 1).reshape(T, B * C)
    flat = x.transpose(0, 1).reshape(T * B, C)
    heads = q.reshape(B * n_head, T, C // n_head)
    heads_t = q.transpose(0, 1).reshape(n_head, B * T, C // n_head)
    return a, b, c, y, merged, rows, flat, heads, heads_t


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    @staticmethod
    def squash(x):
        y = x * 0.5
        z = torch.tanh(y)
        return z

    def forward(self, x):
        B, T, C = x.shape
        h = self.fc(x)
        s = self.squash(h)
        t = s.transpose(1, 2)
        return t
'''

# Every combination has one size of 1 somewhere, except the first; `n_head` divides C.
COMBOS = (
    {"B": 2, "T": 3, "C": 8, "n_head": 2, "k": 3},
    {"B": 1, "T": 4, "C": 6, "n_head": 3, "k": 2},
    {"B": 3, "T": 1, "C": 4, "n_head": 2, "k": 1},
    {"B": 2, "T": 5, "C": 4, "n_head": 4, "k": 2},  # head dim 1
    {"B": 2, "T": 3, "C": 1, "n_head": 1, "k": 2},
)


def _entry(ns: dict[str, Any]) -> None:
    for s in COMBOS:
        B, T, C = s["B"], s["T"], s["C"]
        x = torch.randn(B, T, C, requires_grad=True)
        ns["einsum_and_repeat"](x, torch.randn(C, 5), s["k"])
        ns["inference_views"](x)
        ns["decorated"](x)
        ns["layouts"](x, s["n_head"])
        block = ns["Block"](C)
        # a training step, then the eval loop under no_grad: one body, two grad modes
        out = block(x)
        out.sum().backward()
        block.eval()
        with torch.no_grad():
            block(torch.randn(B, T, C))
        ns["Block"].squash(torch.randn(B, T, C, requires_grad=True))


oracle, test_every_probe_ran, test_no_wrong_facts = realcompare.snippet_suite(SOURCE, NAME, _entry)


def test_case1_einsum_and_repeat_interleave_never_copies(oracle: realcompare.SnippetOracle) -> None:
    for name in ("contraction", "moved", "outer", "by_list", "rep", "rep_k", "rep_x"):
        answer = oracle.answer(name, "einsum_and_repeat") or {}
        assert answer.get("is_view") is not False, name


def test_case2_no_view_verdict_without_base(oracle: realcompare.SnippetOracle) -> None:
    for name in ("made_t", "made_rows", "first", "x_t", "later"):
        answer = oracle.answer(name, "inference_views") or {}
        assert answer.get("is_view") is None, name
    assert (oracle.answer("made_t", "inference_views") or {}).get("view_of") == "made"
    assert (oracle.answer("h_t", "decorated") or {}).get("is_view") is None
    as_int = oracle.answer("as_int", "inference_views") or {}
    assert as_int.get("is_view") is False and as_int.get("view_of") == "x"
    assert as_int.get("requires_grad") is False and as_int.get("dtype") in (None, "int16")


def test_case3_symbolic_transposes_are_hedged(oracle: realcompare.SnippetOracle) -> None:
    for name in ("a", "b", "c"):
        answer = oracle.answer(name, "layouts") or {}
        if answer.get("contiguous") is False:
            assert any("!= 1" in cond for cond in answer.get("assumes") or []), name
        for note in answer.get("notes") or []:
            if note.startswith("non-contiguous"):
                assert "size 1" in note, (name, note)


def test_case4_reshape_copies_only_with_its_assumes(oracle: realcompare.SnippetOracle) -> None:
    for name in ("merged", "rows", "flat", "heads", "heads_t"):
        answer = oracle.answer(name, "layouts") or {}
        if answer.get("is_view") is False:
            assert any("!= 1" in cond for cond in answer.get("assumes") or []), name
    # and the runs with a size of 1 were really skipped, not checked against a wrong verdict
    assert oracle.report.assumption_not_met > 0


def test_case5_requires_grad_not_stated_through_shared_bodies(oracle: realcompare.SnippetOracle) -> None:
    # Reached with grad on and under no_grad: unknown, or stated only when autograd is on.
    for name, function in (("y", "squash"), ("z", "squash"), ("h", "forward"), ("s", "forward"), ("t", "forward")):
        answer = oracle.answer(name, function) or {}
        if answer.get("requires_grad") is not None:
            assert "torch.is_grad_enabled()" in (answer.get("assumes") or []), (name, answer)


# A staticmethod followed through `self.helper(h)` with literal sizes: `x` is the tensor, not
# the instance, and a body reached under grad and under no_grad states no requires_grad.
STATIC = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    @staticmethod
    def heads(x, n):
        B, T, C = x.shape
        y = x.view(B, T, n, C // n)
        z = y.transpose(1, 2)
        return z

    def forward(self, x):
        h = self.fc(x)
        r = self.heads(h, 2)
        return r


model = Net()
for step in range(2):
    out = model(torch.randn(2, 3, 4))
    loss = out.sum()
    loss.backward()
    with torch.no_grad():
        ev = model(torch.randn(2, 3, 4))
"""


def test_staticmethod_followed_with_its_own_arguments() -> None:
    real = run_for_real_all(STATIC)
    analysis = analyse(STATIC)
    stated = 0
    for probe, values in real.items():
        explanation = analysis.explain_at(probe.line, probe.col)
        fact = explanation.fact if explanation is not None else None
        for value in values:
            if isinstance(value, torch.Tensor) and fact is not None:
                problems = contradictions(fact, value)
                assert not problems, f"line {probe.line} `{probe.name}`: " + "; ".join(problems)
        if probe.name in ("y", "z") and fact is not None and fact.shape is not None:
            stated += 1
            assert fact.stated_requires_grad is None, probe.name
    assert stated == 2, "the staticmethod body is followed with the tensor as `x`"
