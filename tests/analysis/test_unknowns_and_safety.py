"""Unknown stays unknown; broken code still analyses; analysing never runs the code."""

from __future__ import annotations

import ast

import pytest

from stridelens.server.analysis import analyze_source
from tests.analysis.oracle import analyse, contradictions, run_for_real_all

# A fact writes out its symbolic sizes from the names of its analysis, which it refers to
# weakly (no cycle keeps an analysis alive): the analyses stay here while their facts are read.
_ANALYSES: dict[str, object] = {}


def fact_at_name(code: str, name: str, occurrence: int = 0):
    analysis = _ANALYSES.get(code) or _ANALYSES.setdefault(code, analyze_source(code))
    nodes = [
        n
        for n in ast.walk(analysis.tree)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
    ]
    nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    node = nodes[occurrence]
    explanation = analysis.explain_at(node.lineno, analysis.char_col(node.lineno, node.col_offset))
    assert explanation is not None
    return explanation.fact


UNKNOWN_SIZES = """
import torch

def f(x, n):
    p = x.permute(0, 2, 1)
    v = p.view(-1)
    r = torch.randn(n, 3)
    s = r[1:]
    return v

def g(x: torch.Tensor):
    y = x.transpose(1, 2)
    d = y.detach()
    return d

data = load_something()
q = data.view(3, 4)
"""


def test_sizes_the_file_does_not_spell_out_are_named_never_guessed() -> None:
    # `x.permute(0, 2, 1)` says x has 3 dims: its sizes are x's, in x's names, and the layout
    # verdicts say what they assume (x row-major, the moved dims not of size 1).
    p = fact_at_name(UNKNOWN_SIZES, "p")
    assert p.to_json("p")["shape"] == ["x.shape[0]", "x.shape[2]", "x.shape[1]"]
    assert p.contiguous is False
    # (and its strides and offset, that x starts its storage: not a view like `buf[1:]`)
    assert set(p.to_json("p")["assumes"]) == {"x.shape[1] != 1", "x.shape[2] != 1", "x.is_contiguous()", "x.storage_offset() == 0"}
    # `n` is used as a size: a fresh factory result of shape (n, 3) is contiguous for any n.
    r = fact_at_name(UNKNOWN_SIZES, "r")
    assert r.to_json("r")["shape"] == ["n", 3] and r.contiguous is True
    s = fact_at_name(UNKNOWN_SIZES, "s")
    assert s.to_json("s")["shape"] == ["n - 1", 3] and s.is_view is True
    # Rank unknown (an annotation only): nothing about sizes is stated.
    for name in ("y", "d"):
        fact = fact_at_name(UNKNOWN_SIZES, name)
        assert fact is not None, name
        assert fact.display_shape is None and fact.display_strides is None, name
        assert fact.contiguous is None, name
    assert fact_at_name(UNKNOWN_SIZES, "q") is None  # not even known to be a tensor


def test_what_holds_for_any_size_is_kept() -> None:
    p = fact_at_name(UNKNOWN_SIZES, "p")
    assert p.is_view is True and p.permuted_by == "permute(0, 2, 1)"
    assert any("permute(0, 2, 1)" in note for note in p.notes())
    d = fact_at_name(UNKNOWN_SIZES, "d")
    assert d.view_of == "x" and d.detached_from == "y" and d.carries_graph is False
    s = fact_at_name(UNKNOWN_SIZES, "s")
    assert s.view_of == "r" and s.is_view is True


def test_syntax_error_keeps_the_other_statements() -> None:
    code = "import torch\na = torch.zeros(2, 3)\nb = a.t(\nc = torch.ones(4)\ndef f(:\n    pass\nd = a[0]\n"
    analysis = analyze_source(code)
    assert {b.line for b in analysis.broken} >= {3, 5}
    assert fact_at_name(code, "a").shape == (2, 3)
    assert fact_at_name(code, "c").shape == (4,)
    assert fact_at_name(code, "d").shape == (3,)


@pytest.mark.timeout(60)  # a hang fails here instead of stalling the suite
def test_huge_constants_do_not_hang_or_allocate() -> None:
    code = "import torch\nn = 10**10**10\nx = torch.randn(n)\ny = torch.zeros(2**40, 2**40)\nz = 'a' * 10**12\nw = torch.zeros(2**40)\n"
    analysis = analyze_source(code)
    assert fact_at_name(code, "x").shape is None
    assert fact_at_name(code, "w").shape == (2**40,)  # meta: no memory behind it
    assert analysis.timed_out is False


def test_the_budget_stops_a_huge_file() -> None:
    code = "import torch\n" + "x = torch.randn(3, 4).t().contiguous()\n" * 5000
    analysis = analyze_source(code, budget_steps=100)
    assert analysis.timed_out is True
    last = analysis.tree.body[-1]
    assert isinstance(last, ast.Assign) and analysis.fact_of(last.targets[0]) is None


def test_symbolic_mode_never_needs_torch_and_keeps_certain_facts() -> None:
    code = "import torch\nx = torch.randn(2, 3)\ny = x.t()\nz = y.detach()\n"
    analysis = analyze_source(code, replay=False)
    y = fact_at_name(code, "y")  # with replay, for comparison
    assert y.contiguous is False
    node = next(n for n in ast.walk(analysis.tree) if isinstance(n, ast.Name) and n.id == "z")
    z = analysis.fact_of(node)
    # No torch, yet the same layout replay gives: the stride algebra on literal sizes.
    assert z is not None and z.view_of == "x" and z.shape == (3, 2) and z.strides == (1, 3)


def test_symbolic_mode_states_the_replayed_layout_of_arange_and_its_views() -> None:
    # The editor's first hover comes before torch has loaded: it must already be the full answer.
    code = "import torch\na = torch.arange(12.0).reshape(3, 4)\nb = a[1:, 1:3]\nn = torch.arange(2, 12, 3)\n"
    symbolic = analyze_source(code, replay=False)
    for name in ("a", "b", "n"):
        node = next(x for x in ast.walk(symbolic.tree) if isinstance(x, ast.Name) and x.id == name)
        fact, replayed = symbolic.fact_of(node), fact_at_name(code, name)
        assert fact is not None
        got = (fact.shape, fact.strides, fact.storage_offset, fact.contiguous, fact.dtype, fact.view_of)
        assert got == (replayed.shape, replayed.strides, replayed.storage_offset, replayed.contiguous, replayed.dtype, replayed.view_of)


def test_non_ascii_columns() -> None:
    code = "import torch\n# 形状 🧪\nx = torch.zeros(2, 3)  # 张量\ny = '🧪🧪'; z = x.t()\n"
    analysis = analyze_source(code)
    line = code.splitlines()[3]
    col = line.index("z")  # character column, not UTF-8 bytes
    explanation = analysis.explain_at(4, col)
    assert explanation is not None and explanation.expr == "z"
    assert explanation.fact is not None and explanation.fact.strides == (1, 3)


def test_a_lone_surrogate_does_not_empty_the_analysis() -> None:
    code = "import torch\nx = torch.zeros(2, 3)  # \ud800 pasted garbage\ny = x.t()\n"
    assert fact_at_name(code, "y").strides == (1, 3)


TWO_CALL_SITES = """
import torch

def block(x):
    y = x.t()
    z = y.contiguous()
    w = y[1:]
    return z

a = block(torch.zeros(2, 3))
b = block(torch.zeros(4, 5, 6)[0])
c = block(torch.ones(7, 3))
"""


def test_a_function_called_with_different_shapes_states_only_what_holds_for_every_call() -> None:
    analysis = analyse(TWO_CALL_SITES)
    checked = 0
    for probe, values in run_for_real_all(TWO_CALL_SITES).items():
        fact = analysis.explain_at(probe.line, probe.col).fact
        assert fact is not None, probe
        for real in values:
            assert not contradictions(fact, real), (probe, contradictions(fact, real))
            checked += 1
    assert checked == 12  # three calls x three probes in `block`, plus a, b, c
    y = fact_at_name(TWO_CALL_SITES, "y")
    # What holds for all three calls is still said.
    assert y.contiguous is False and y.view_of == "x" and y.storage_offset == 0
    assert y.shape is None  # (3, 2), (6, 5), (3, 7): no single answer, and the reason is given
    assert "shape differs between calls: (3, 2) vs (6, 5) from the call at line 11" in y.notes(), y.notes()
