"""`inspect --diff-steps N` end to end through real debugpy: a list that grows every step and a
cache that is refilled every step are told apart, and Adam's state is seen appearing once."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from stridelens.inspector import step_diff

from .conftest import REPO, marker_line

pytestmark = pytest.mark.timeout(180)

FIXTURE = REPO / "tests" / "fixtures" / "steps" / "grow_vs_cache.py"


def by_keeper(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["keeper"]: g for g in d["groups"]}


def text(report: dict[str, Any]) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    step_diff.print_text(report, console)
    return console.export_text()


def test_growing_list_and_refilled_cache_are_told_apart(inspect_cli: Any) -> None:
    # First stop after two steps: the cache and Adam's state exist already.
    res = inspect_cli("--launch", str(FIXTURE), "--break", f"{FIXTURE}:{marker_line(FIXTURE)}:step >= 2",
                      "--diff-steps", "3", "--format", "json")
    assert res.rc == 0, res.err
    report = res.json()
    d = report["diff_steps"]
    assert d["steps"] == 3 and len(d["stops"]) == 4
    g = by_keeper(d)
    history, cache = g["history"], g["cache"]
    assert history["kind"] == cache["kind"] == "container"
    # history: one (256, 8) float32 output per step, kept.
    assert history["bytes_by_stop"] == [2 * 8192, 3 * 8192, 4 * 8192, 5 * 8192]
    assert history["growth_per_step"] == 8192 and history["shape"] == "linear"
    assert history["new_storages"] == 3 and history["new_bytes_by_step"] == [8192, 8192, 8192]
    # cache: a new (256, 32) batch every step, the old one freed: new storage, no growth.
    assert cache["bytes_by_stop"] == [32768] * 4 and cache["shape"] == "flat"
    # The new batch often lands at the address the old one had: then it reads as the same
    # storage (the probe keeps addresses, not objects); either way the cache does not grow.
    assert cache["new_storages"] in (0, 1) and cache["growth_bytes"] == 0
    if cache["new_storages"]:
        assert "refilled, not a leak" in cache["note"]
    assert g["opt"]["kind"] == "optimizer_state" and g["opt"]["shape"] == "flat"
    assert d["linear_keepers"] == ["history"]
    assert d["groups"][0]["keeper"] == "history"  # the leak first
    # The other reports are of the second stop.
    assert report["stop"]["line"] == marker_line(FIXTURE)
    out = text(report)
    assert "history: a leak: 8.0 KiB more every step" in out
    assert "cache: a leak" not in out


def test_optimizer_state_appears_after_the_first_step(inspect_cli: Any) -> None:
    res = inspect_cli("--launch", str(FIXTURE), "--break", f"{FIXTURE}:{marker_line(FIXTURE)}",
                      "--diff-steps", "3", "--format", "json")
    assert res.rc == 0, res.err
    g = by_keeper(res.json()["diff_steps"])
    opt = g["opt"]
    assert opt["kind"] == "optimizer_state" and opt["shape"] == "once"
    assert opt["bytes_by_stop"][0] == 0 and opt["bytes_by_stop"][1] == opt["bytes_by_stop"][-1] > 0
    assert "expected once, not a leak" in opt["note"]
    assert g["history"]["shape"] == "linear"
    assert g["model.0.weight.grad"]["kind"] == "gradient"


def test_diff_steps_needs_a_breakpoint_and_reports_an_early_exit(inspect_cli: Any) -> None:
    res = inspect_cli("--launch", str(FIXTURE), "--break", f"{FIXTURE}:{marker_line(FIXTURE)}",
                      "--diff-steps", "50")
    assert res.rc == 1 and "the target exited" in res.err and "after 11 steps of 50" in res.err, res.err
    res = inspect_cli("--connect", "127.0.0.1:9", "--diff-steps", "2")
    assert res.rc == 2 and "--diff-steps N needs --break" in res.err
    res = inspect_cli("--all-ranks", "--pid", "1", "--diff-steps", "2")
    assert res.rc == 2 and "not with --all-ranks" in " ".join(res.err.split())


@pytest.mark.parametrize(("curve", "expected"), [
    ([0, 10, 20, 30], "linear"), ([5, 5, 5], "flat"), ([0, 30, 30, 30], "once"),
    ([0, 1, 2, 30], "irregular"), ([0, 8], "grows"), ([30, 20, 10], "shrinking"),
    ([1000, 1004, 1008, 1012], "linear"),
])
def test_shape_rule(curve: list[int], expected: str) -> None:
    assert step_diff.shape(curve) == expected


class Trainer:
    def __init__(self) -> None:
        self.history: list[Any] = []


def test_graph_kept_storages_and_an_attribute_list_in_process() -> None:
    check_graph_kept_storages()


def test_a_list_is_named_at_the_first_stop_whatever_else_lives() -> None:
    """Lists of tensors that nothing names (an earlier test's, a data loader's, ...), each longer
    than the list that is about to grow: the growing list is still named at the first stop (the
    probe named only the 64 longest containers: `Trainer.history` read 0 bytes at the first stop,
    its bytes under "an unnamed list", then jumped; in the full suite's process, earlier tests
    left such lists)."""
    import torch

    leftovers = [[torch.empty(1), torch.empty(1)] for _ in range(100)]
    check_graph_kept_storages()
    assert len(leftovers) == 100


def check_graph_kept_storages() -> None:
    """The diff probe in the test's process (as injected, under its private names): saved tensors of
    graphs a list keeps are the graph's, named by the list; a list on an object is named by its
    class and attribute at every stop (the instance dict Python creates lazily does not rename it)."""
    import sys

    import torch

    from stridelens.inspector import diff_probe, probe

    sys.modules.setdefault(probe.PRIVATE_NAME, probe)
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    trainer = Trainer()
    losses: list[torch.Tensor] = []

    def step() -> None:
        h = model(torch.randn(32, 64)).tanh()
        losses.append(h.pow(2).mean())  # keeps the graph: the input of addmm, the tanh result
        trainer.history.append(torch.randn(100))

    ns = {"model": model, "losses": losses}  # `trainer` is reached only through gc
    step()
    diff_probe.begin(ns)
    for _ in range(2):
        step()
        diff_probe.sample(ns)
    step()
    d = step_diff.analyze(diff_probe.end(ns))
    g = by_keeper(d)
    assert g["graph of losses"]["kind"] == "graph"
    assert g["graph of losses"]["bytes_by_stop"] == [16384, 32768, 49152, 65536]  # 2 × 8 KiB a step
    assert g["Trainer.history"]["bytes_by_stop"] == [400, 800, 1200, 1600]
    assert g["losses"]["shape"] == g["Trainer.history"]["shape"] == g["graph of losses"]["shape"] == "linear"
    assert g["model"]["shape"] == "flat"
    assert not diff_probe._state


SMALL_LEAK = REPO / "tests" / "fixtures" / "steps" / "small_leak.py"


def test_headline_names_the_leaks_the_table_flags(inspect_cli: Any) -> None:
    """Two leaks of 256 B and 4 B a step beside a model of 4.6 MiB: the total moves by less than
    its 1% tolerance (flat), and the headline said so above a table of two linear leaks."""
    res = inspect_cli("--launch", str(SMALL_LEAK), "--break", f"{SMALL_LEAK}:{marker_line(SMALL_LEAK)}:step >= 2",
                      "--diff-steps", "3", "--kill")
    assert res.rc == 0, res.err
    out = " ".join(res.out.split())
    head = out[out.index("Step diff"):out.index("What keeps them")]
    assert "(+780 B, 260 B per step; 2 keepers grow linearly)" in head, head
    assert "flat)" not in head.split("Leaking")[0]
    assert "Leaking: history +256 B per step, losses +4 B per step (the total alone reads flat" in head, head
    rows = {line.split()[0]: line.split() for line in res.out.splitlines() if line.strip().startswith(("history", "losses"))}
    assert rows["history"][-1] == rows["losses"][-1] == "linear"
