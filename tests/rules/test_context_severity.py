"""Severity follows what the finding costs: what a user sees in the editor's colours and in
`check`'s exit status."""

from __future__ import annotations

from pathlib import Path

from stridelens.server.analysis import analyze_file
from stridelens.server.rules import Severity, run_rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rules"


def _by_line(name: str, code: str) -> dict[int, list[tuple[Severity, str]]]:
    analysis = analyze_file(str(FIXTURES / name))
    found: dict[int, list[tuple[Severity, str]]] = {}
    for f in run_rules(analysis, select=[code]):
        found.setdefault(f.line, []).append((f.severity, f.message))
    return found


def test_sl201_kept_graph_warns_kept_grad_fn_nodes_inform() -> None:
    found = _by_line("sl201_reset.py", "SL201")
    (severity, message), = found[40]  # `total += loss` after `loss.backward()`
    assert severity is Severity.INFORMATION
    assert "grad_fn nodes" in message and "saved tensors" in message
    (severity, message), = found[48]  # validation: no backward ever runs on these losses
    assert severity is Severity.WARNING
    assert "whole graph" in message and "activations" in message


def test_sl204_warns_in_forward_informs_in_updates() -> None:
    found = _by_line("sl204_context.py", "SL204")
    assert [s for s, _ in found[24]] == [Severity.WARNING]
    assert "in `forward`" in found[24][0][1]
    assert {s for line in (61, 63) for s, _ in found[line]} == {Severity.INFORMATION}
    assert all("in `update_parameters`" in m for line in (61, 63) for _, m in found[line])
