"""The replay cache answers only for the same op on the same layouts."""

from __future__ import annotations

import torch

from tests.analysis.oracle import analyse, compare, probes_of, run_for_real

CODE = """
import torch
v = torch.rand(3)
add = v + v
mm = v @ v
sub = v - v
mm2 = v @ v
img = torch.rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
neg = -img
pos = img * 2
empty = torch.rand(2, 0) + 1
"""


def test_each_operator_is_its_own_cache_entry() -> None:
    analysis = analyse(CODE)
    real = run_for_real(CODE)
    for probe in probes_of(CODE):
        value = real[probe]
        assert isinstance(value, torch.Tensor)
        fact = analysis.explain_at(probe.line, probe.col).fact  # type: ignore[union-attr]
        assert not compare(fact, value), (probe.name, compare(fact, value))
    # A second analysis in the same process is answered from the cache: still right.
    again = analyse(CODE)
    for probe in probes_of(CODE):
        fact = again.explain_at(probe.line, probe.col).fact  # type: ignore[union-attr]
        assert not compare(fact, real[probe]), probe.name
