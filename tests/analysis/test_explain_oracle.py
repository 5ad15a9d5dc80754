"""Oracle tests: the engine's facts equal what real torch computes for the same code."""

from __future__ import annotations

from functools import cache

import pytest
import torch

from tests.analysis.oracle import Probe, analyse, compare, probes_of, run_for_real
from tests.analysis.snippets import SNIPPETS


@cache
def real_values(snippet: str) -> dict[Probe, object]:
    return run_for_real(SNIPPETS[snippet])


@cache
def analysis_of(snippet: str):
    return analyse(SNIPPETS[snippet])


def _tensor_probes() -> list[tuple[str, Probe]]:
    cases = []
    for name, code in SNIPPETS.items():
        for probe in probes_of(code):
            cases.append((name, probe))
    return cases


CASES = _tensor_probes()


@pytest.mark.parametrize(
    ("snippet", "probe"), CASES, ids=[f"{s}:{p.line}:{p.name}" for s, p in CASES]
)
def test_fact_equals_real_tensor(snippet: str, probe: Probe) -> None:
    real = real_values(snippet).get(probe)
    if not isinstance(real, torch.Tensor):
        pytest.skip(f"`{probe.name}` is not a tensor at run time ({type(real).__name__})")
    explanation = analysis_of(snippet).explain_at(probe.line, probe.col)
    assert explanation is not None, "no expression found at the probe"
    assert explanation.expr == probe.name
    problems = compare(explanation.fact, real)
    assert not problems, f"{snippet} line {probe.line} `{probe.name}`: " + "; ".join(problems)


def test_at_least_150_tensor_probes() -> None:
    tensors = sum(
        isinstance(real_values(s).get(p), torch.Tensor) for s, p in CASES
    )
    assert tensors >= 150, tensors


def test_view_of_names_the_storage_owner() -> None:
    analysis = analysis_of("indexing")
    probe = next(p for p in probes_of(SNIPPETS["indexing"]) if p.name == "s4")
    fact = analysis.explain_at(probe.line, probe.col).fact
    assert fact is not None and fact.view_of == "a"
    real = real_values("indexing")[probe]
    assert isinstance(real, torch.Tensor)
    owner = real_values("indexing")[next(p for p in real_values("indexing") if p.name == "a")]
    assert real.untyped_storage().data_ptr() == owner.untyped_storage().data_ptr()


def test_graph_facts_follow_no_grad_and_detach() -> None:
    analysis = analysis_of("control_flow")
    probes = {p.name: p for p in probes_of(SNIPPETS["control_flow"])}
    facts = {n: analysis.explain_at(p.line, p.col).fact for n, p in probes.items()}
    assert facts["n"].carries_graph is False  # computed under no_grad
    assert facts["h"].carries_graph is True
    assert facts["dd"].carries_graph is False
    assert facts["dd"].detached_from == "h"
    assert facts["dd"].view_of == "h"  # detach shares storage
