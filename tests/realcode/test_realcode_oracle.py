"""Real-code oracle: every fact `stridelens explain` states on released PyTorch code holds in
every real run of that code (DESIGN.md "Real code first", "Machine-readable interfaces").

The files under sources/ are verbatim copies (see sources/ORIGINS.md); driver.py runs them on
tiny inputs, compare.py checks the engine's JSON answers against the runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.realcode import compare
from tests.realcode.driver import FILES, SOURCES, Probe


def test_sources_are_verbatim_and_listed() -> None:
    recorded = compare.recorded_hashes()
    on_disk = sorted(p.name for p in SOURCES.glob("*.py"))
    assert sorted(recorded) == on_disk, "every source file has one row in ORIGINS.md"
    assert sorted(f"{name}.py" for name in FILES) == on_disk, "every source file has an entry point"
    for file_name, digest in recorded.items():
        assert compare.sha256_of(file_name) == digest, f"{file_name} is no longer the verbatim release"
    assert (SOURCES / "LICENSE.nanoGPT").is_file()
    assert (SOURCES / "LICENSE.pytorch-examples").is_file()


@pytest.mark.parametrize("name", FILES)
def test_runs_for_real(name: str) -> None:
    run = compare.real_run(name)
    reached = [p for p, runs in run.runs.items() if runs]
    assert len(reached) >= 0.8 * len(run.probes), "the entry point exercises most of the file"
    assert run.tensor_observations() >= 50


KNOWN_WRONG = Path(__file__).resolve().parent / "KNOWN_WRONG.txt"


def known_wrong() -> set[tuple[str, int, str, str]]:
    """Wrong facts measured and not yet fixed (issue 29): `file:line name field  # why`."""
    out = set()
    for raw in KNOWN_WRONG.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            where, name, field = line.split()
            file, number = where.rsplit(":", 1)
            out.add((file, int(number), name, field))
    return out


@pytest.mark.parametrize("name", FILES)
def test_no_wrong_facts(name: str) -> None:
    """No wrong fact beyond the ones listed in KNOWN_WRONG.txt, and each listed one still
    occurs (a fixed one leaves the list)."""
    report = compare.report_of(name)
    found = {(name, w.line, w.name, w.field) for w in report.wrong}
    listed = {k for k in known_wrong() if k[0] == name}
    new = [w for w in report.wrong if (name, w.line, w.name, w.field) not in listed]
    if new:
        lines = compare.wrong_facts_summary([compare.FileReport(name, wrong=new)])
        pytest.fail(f"{len(lines)} wrong fact(s) on {name}:\n" + "\n".join(lines), pytrace=False)
    fixed = sorted(listed - found)
    assert not fixed, f"fixed, remove from KNOWN_WRONG.txt: {fixed}"


def test_coverage_table_has_every_file_and_a_total() -> None:
    reports = compare.all_reports()
    table = compare.coverage_table(reports)
    for name in (*FILES, "TOTAL"):
        assert name in table
    total = dict(compare.coverage_rows(reports))["TOTAL"]
    assert int(total["obs"]) == sum(r.observations for r in reports) >= 500


# ----------------------------------------------------------------- the checker itself
# Today's engine states no symbolic sizes; these hand-written answers make sure that the
# checker accepts right ones and catches wrong ones, with the semantics of DESIGN.md.


def _probe(name: str, line: int, var: str) -> Probe:
    return next(p for p in compare.real_run(name).probes if p.line == line and p.name == var)


def _check(name: str, probe: Probe, answer: dict) -> compare.FileReport:
    return compare.check(name, {probe: answer}, compare.real_run(name))


def test_checker_accepts_right_symbolic_facts() -> None:
    # nanoGPT: k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2), k from a split
    # of the (B, T, 3 * C) projection: the second third.
    probe = _probe("nanogpt_model", 57, "k")
    answer = {
        "shape": ["B", "self.n_head", "T", "C // self.n_head"],
        "strides": ["3 * C * T", "C // self.n_head", "3 * C", 1],
        "storage_offset": "C",
        "contiguous": False,
        "is_view": True,
        "dtype": "float32",
        "device": "cpu",
        "assumes": ["T != 1"],
    }
    report = _check("nanogpt_model", probe, answer)
    assert report.wrong == []
    assert report.any_stated == len(compare.real_run("nanogpt_model").runs[probe]) > 10


def test_checker_catches_wrong_and_unevaluable_entries() -> None:
    probe = _probe("nanogpt_model", 57, "k")
    report = _check("nanogpt_model", probe, {"shape": ["B", "T", "self.n_head", "C // self.n_head"]})
    assert {w.field for w in report.wrong} == {"shape"}
    report = _check("nanogpt_model", probe, {"storage_offset": "n_embd"})
    assert report.wrong and "does not evaluate" in report.wrong[0].why
    report = _check("nanogpt_model", probe, {"shape": ["B", "self.n_head", "T"]})
    assert report.wrong and report.wrong[0].why == "rank differs"
    report = _check("nanogpt_model", probe, {"contiguous": True, "requires_grad": True})
    fields = {w.field for w in report.wrong}
    assert fields == {"contiguous", "requires_grad"}  # generate() runs under no_grad


def test_checker_skips_runs_whose_assumption_fails() -> None:
    probe = _probe("nanogpt_model", 57, "k")
    runs = compare.real_run("nanogpt_model").runs[probe]
    # (Conditions are evaluated in the recorded snapshot here; the grad mode of a run can only
    # be seen by expressions the driver evaluates at the probe: see the next test.)
    report = _check("nanogpt_model", probe, {"requires_grad": True, "assumes": ["T > 6"]})
    assert report.assumption_not_met == sum(r.pre_locals["T"] <= 6 for r in runs)
    assert report.wrong == [] or all(w.field == "requires_grad" for w in report.wrong)
    report = _check("nanogpt_model", probe, {"is_view": True, "assumes": ["undefined_name > 0"]})
    assert report.wrong and report.wrong[0].field == "assumes"


def test_expressions_are_evaluated_at_the_probe() -> None:
    # The driver evaluates the given expressions as the statement starts, in its frame: here
    # the grad mode of each run, which no snapshot taken afterwards could tell.
    from tests.realcode.driver import execute

    probe = _probe("mingpt_ddp_model", 96, "position_embeddings")
    grad = "torch.is_grad_enabled()"
    pre = [grad, f"not {grad}", "t"]
    run = execute("mingpt_ddp_model", {probe: pre}, {probe: ["self.pos_emb", "idx"]})
    runs = run.runs[probe]
    grad_modes = {r.evaluated[grad].value for r in runs}
    assert grad_modes == {True, False}  # training steps and generate()
    assert all(r.tensor is not None and r.evaluated["t"].value == r.tensor.shape[1] for r in runs)
    assert all(r.view_targets["self.pos_emb"].is_base for r in runs)
    assert not any(r.view_targets["idx"].same_storage for r in runs)
    report = compare.check("mingpt_ddp_model", {probe: {"view_of": "self.pos_emb", "shape": [1, "t", "self.pos_emb.shape[2]"]}}, run)
    assert report.wrong == []
    report = compare.check("mingpt_ddp_model", {probe: {"view_of": "idx"}}, run)
    assert len(report.wrong) == len(runs)
    report = compare.check("mingpt_ddp_model", {probe: {"view_of": "nothing_here"}}, run)
    assert report.wrong and "does not resolve" in report.wrong[0].why
    report = compare.check("mingpt_ddp_model", {probe: {"requires_grad": False, "assumes": [f"not {grad}"]}}, run)
    # views of a leaf keep requires_grad even under no_grad: False is wrong in every checked run
    assert report.assumption_not_met == sum(r.evaluated[grad].value for r in runs)
    assert len(report.wrong) == len(runs) - report.assumption_not_met
    assert all(isinstance(r.value, torch.Tensor) for r in runs)
