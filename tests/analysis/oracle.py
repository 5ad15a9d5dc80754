"""Oracle harness: run a snippet for real on CPU and compare with what the engine says.

Every assignment to a name is a probe: the snippet is instrumented (a recorder call after
each assignment, at any depth) and executed in the test process; the engine analyses
the original text and is asked about the assigned name at its exact position.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import torch

from stridelens.server.analysis import Analysis, TensorFact, analyze_source


@dataclass(frozen=True)
class Probe:
    line: int
    col: int  # 0-based character column of the name
    name: str


def _target_names(target: ast.expr) -> list[ast.Name]:
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    return []


def _assigned(stmt: ast.stmt) -> list[ast.Name]:
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in _target_names(t)]
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return _target_names(stmt.target)
    return []


def probes_of(code: str) -> list[Probe]:
    tree = ast.parse(code)
    out = []
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.stmt):
            out += [Probe(n.lineno, n.col_offset, n.id) for n in _assigned(stmt)]
    return sorted(set(out), key=lambda p: (p.line, p.col))


class _Instrument(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            new: list[ast.stmt] = []
            for stmt in body:
                new.append(stmt)
                for name in _assigned(stmt):
                    call = ast.parse(f"__probe__({name.lineno}, {name.col_offset}, {name.id!r}, {name.id})").body[0]
                    new.append(ast.copy_location(call, stmt))
            setattr(node, field, new)
        return node


def run_for_real(code: str) -> dict[Probe, Any]:
    """The value each probe had the last time it ran."""
    return {probe: values[-1] for probe, values in run_for_real_all(code).items()}


def run_for_real_all(code: str) -> dict[Probe, list[Any]]:
    """Every value each probe had (a function body runs once per call)."""
    seen: dict[Probe, list[Any]] = {}

    def record(line: int, col: int, name: str, value: Any) -> None:
        seen.setdefault(Probe(line, col, name), []).append(value)

    tree = ast.fix_missing_locations(_Instrument().visit(ast.parse(code)))
    namespace: dict[str, Any] = {"__probe__": record, "__name__": "__oracle__"}
    torch.manual_seed(0)
    exec(compile(tree, "<oracle>", "exec"), namespace)  # the test's own snippet, not workspace code
    return seen


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def compare(fact: TensorFact | None, real: torch.Tensor) -> list[str]:
    """Differences between the engine's fact and the real tensor (empty when exact)."""
    if fact is None or fact.shape is None:
        return ["engine knows nothing"]
    problems = []
    checks = [
        ("shape", fact.shape, tuple(real.shape)),
        ("dtype", fact.dtype, dtype_name(real)),
        ("device", fact.device, real.device.type),
        ("strides", fact.strides, tuple(real.stride()) if real.numel() else None),
        ("storage_offset", fact.storage_offset, real.storage_offset()),
        ("contiguous", fact.contiguous, real.is_contiguous()),
        ("is_view", fact.is_view, real._base is not None),
        ("requires_grad", fact.requires_grad, real.requires_grad),
        ("storage bytes", fact.storage_nbytes, real.untyped_storage().nbytes()),
    ]
    for name, got, want in checks:
        if got != want:
            problems.append(f"{name}: engine {got!r}, torch {want!r}")
    return problems


def contradictions(fact: TensorFact, real: torch.Tensor) -> list[str]:
    """Facts the engine states (not None) that the real tensor disagrees with."""
    return [
        problem
        for problem in compare(fact, real)
        if "engine None" not in problem and problem != "engine knows nothing"
    ]


def assert_stated_facts_hold(analysis: Analysis, real_values: dict[Probe, list[Any]], probe: Probe) -> None:
    """At `probe`, the engine states something, and nothing it states differs from the
    real tensor of the probe's last run."""
    real = real_values[probe][-1]
    assert isinstance(real, torch.Tensor)
    explanation = analysis.explain_at(probe.line, probe.col)
    assert explanation is not None and explanation.expr == probe.name
    assert explanation.fact is not None, f"`{probe.name}`: the engine knows nothing"
    problems = contradictions(explanation.fact, real)
    assert not problems, f"line {probe.line} `{probe.name}`: " + "; ".join(problems)


def analyse(code: str) -> Analysis:
    return analyze_source(code, "<oracle>")
