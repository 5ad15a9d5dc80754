"""`inspect --grads` and `--graph EXPR`: end to end through real debugpy on the fixtures in
tests/fixtures/grads/, and the gradient probe in this process (it changes nothing)."""

from __future__ import annotations

import gc
import io
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from rich.console import Console
from torch import nn

from stridelens.inspector import grad_reports, grads_probe, probe

from .conftest import REPO, marker_line

pytestmark = pytest.mark.timeout(180)

FIXTURES = REPO / "tests" / "fixtures" / "grads"


def run_at_marker(inspect_cli: Any, name: str, *flags: str) -> Any:
    path = FIXTURES / name
    return inspect_cli("--launch", str(path), "--break", f"{path}:{marker_line(path)}", *flags)


def text(report: dict[str, Any]) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    grad_reports.print_text(report, console)
    return console.export_text()


def rows_by_name(grads: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in grads["params"]}


def test_grads_name_the_collapsing_layer_and_the_detached_branch(inspect_cli: Any) -> None:
    res = run_at_marker(inspect_cli, "vanishing.py", "--grads", "--format", "json")
    assert res.rc == 0, res.err
    g = res.json()["grads"]
    assert g["models"] == ["model", "proj"]
    rows = rows_by_name(g)
    collapse = [f for f in g["findings"] if f["kind"] == "collapse"]
    assert [(f["layer"], f["next_layer"]) for f in collapse] == [("model.4", "model.6")]
    assert collapse[0]["ratio"] < grad_reports.COLLAPSE
    assert not [f for f in g["findings"] if f["kind"] == "explode"]
    out = text(res.json())
    assert "gradients collapse at model.4" in out and "None (not in the graph)" in out
    # The detached projection: grad None, not in the graph of `loss`; the frozen bias says so.
    assert rows["proj.weight"]["grad"] is False and rows["proj.weight"]["none_reason"] == "not_in_graph"
    assert rows["model.0.bias"]["none_reason"] == "frozen" and rows["model.0.bias"]["requires_grad"] is False
    (missing,) = [f for f in g["findings"] if f["kind"] == "no_grad"]
    assert missing["params"] == ["proj.weight", "proj.bias"] and "`loss`" in missing["message"]
    # Rows in module order, ranked by grad norm (1 = largest); the ratio is grad/weight.
    assert [r["name"] for r in g["params"]][:3] == ["model.0.weight", "model.0.bias", "model.2.weight"]
    assert rows["model.8.weight"]["rank"] == 1 and rows["model.0.weight"]["rank"] == 9
    w = rows["model.6.weight"]
    assert w["ratio"] == pytest.approx(w["grad_norm"] / w["weight_norm"])
    assert w["nan"] == w["inf"] == w["zeros"] == 0 and w["shape"] == [16, 16]


def test_grads_find_the_nan_of_log_zero_with_its_parameter(inspect_cli: Any) -> None:
    res = run_at_marker(inspect_cli, "nan_log.py", "--grads", "--format", "json")
    assert res.rc == 0, res.err
    g = res.json()["grads"]
    rows = rows_by_name(g)
    head = rows["model.2.weight"]
    assert head["nan"] == 16 and head["inf"] == 0 and head["grad_norm"] is None
    assert head["weight_norm"] > 0
    (bad,) = [f for f in g["findings"] if f["kind"] == "nonfinite"]
    assert bad["params"] == ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    assert bad["layer"] == "model.2" and "model.2.bias" in bad["message"]
    assert all(r["rank"] is None for r in g["params"])  # no finite norm to rank


def test_graph_tree_saved_bytes_equal_the_probe_walk(inspect_cli: Any) -> None:
    res = run_at_marker(inspect_cli, "graph_small.py", "--graph", "loss", "--expr", "loss", "--format", "json")
    assert res.rc == 0, res.err
    report = res.json()
    (tree,) = report["graphs"]
    walk = report["expressions"][0]["result"]["graph"]  # the probe's describe: _graph_saved_bytes
    assert tree["saved_bytes"] == walk["saved_bytes"] == tree["walk"]["saved_bytes"] > 0
    assert tree["saved_storages"] == walk["saved_storages"]
    assert tree["saved_tensors"] == walk["saved_tensors"]
    assert len(tree["nodes"]) - tree["leaves"] == walk["nodes"]
    leaves = {n["leaf"]["name"] for n in tree["nodes"] if n["leaf"]}
    assert leaves == {"w", *(f"model.{i}.{p}" for i in (0, 2, 4) for p in ("weight", "bias"))}
    # `h` feeds two branches: its TanhBackward0 is one node with two consumers.
    tanh = [i for i, n in enumerate(tree["nodes"]) if n["op"] == "TanhBackward0"]
    consumers = {i: sum(i in n["next"] for n in tree["nodes"]) for i in tanh}
    assert sorted(consumers.values()) == [1, 2]
    # The same report as text (what the CLI prints without --format json).
    out = text(report)
    assert "Autograd graph of loss" in out
    assert "← model.4.bias, model.4.weight (via TBackward0)" in out
    assert "… 55 more: MulBackward0 ×28, SigmoidBackward0 ×27" in out  # the sigmoid chain folds
    assert "→ [1] TanhBackward0 (shown above)" in out  # the shared subgraph, once
    assert f"the probe's walk: {walk['saved_bytes']:,} B" in out


# ---------------------------------------------------------------- in this process


@pytest.fixture
def probes() -> Iterator[Any]:
    had = sys.modules.get(grads_probe.PROBE_NAME)
    sys.modules[grads_probe.PROBE_NAME] = probe
    try:
        yield grads_probe
    finally:
        if had is None:
            sys.modules.pop(grads_probe.PROBE_NAME, None)
        else:
            sys.modules[grads_probe.PROBE_NAME] = had


def test_grads_report_changes_nothing(probes: Any) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
    loss = model(torch.randn(5, 6)).pow(2).mean()
    loss.backward(retain_graph=True)
    ns = {"model": model, "loss": loss}
    before = [(p._version, p.grad._version, p.grad.clone(), p.requires_grad) for p in model.parameters()]
    gc.collect()
    live = sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = probes.grads(ns, ns)
        tree = probes.graph_tree("loss", ns, ns)
    assert torch.is_grad_enabled()
    gc.collect()
    # The graph walk may give saved tensors without a Python object one (see SECURITY.md);
    # nothing else is new.
    assert sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects()) - live <= tree["walk"]["saved_tensors"]
    for (v, gv, grad, rg), p in zip(before, model.parameters(), strict=True):
        assert (p._version, p.grad._version, p.requires_grad) == (v, gv, rg)
        assert torch.equal(p.grad, grad)
    norms = {r["name"]: r["grad_norm"] for r in g["params"]}
    assert norms["model.0.weight"] == pytest.approx(float(model[0].weight.grad.norm()))
    with pytest.raises(probes.GradsError, match="has no grad_fn"):
        probes.graph_tree("model[0].weight", ns, ns)


def test_submodules_listed_under_the_outer_name(probes: Any) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    ns = {"head": model[1], "model": model, "frozen": nn.Linear(1, 1).requires_grad_(False)}
    g = probes.grads(ns, {})
    assert g["models"] == ["model", "frozen"]
    assert [r["name"] for r in g["params"]][:2] == ["model.0.weight", "model.0.bias"]
    assert {r["none_reason"] for r in g["params"]} == {"no_graph", "frozen"}


def _layers(norms: list[float | None]) -> dict[str, Any]:
    params = []
    for i, n in enumerate(norms):
        params.append({"name": f"m.{i}.weight", "model": "m", "layer": f"m.{i}", "shape": [2], "numel": 2,
                       "requires_grad": True, "grad": n is not None, "none_reason": None if n is not None
                       else "not_in_graph", "graphs": [], "grad_norm": n, "weight_norm": 1.0, "ratio": n,
                       "nan": 0, "inf": 0, "zeros": 2 if n == 0 else 0, "zero_fraction": 1.0 if n == 0 else 0.0})
    return grad_reports.analyze({"models": ["m"], "graph_roots": ["loss"], "params": params})


def kinds(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["kind"], f["layer"]) for f in r["findings"]]


def test_the_neighbour_rule() -> None:
    assert kinds(_layers([1.0, 0.5, 0.2, 0.1])) == []  # a gradual slope is not a collapse
    assert kinds(_layers([1e-6, 1e-6, 1.0, 1.0])) == [("collapse", "m.1")]
    assert kinds(_layers([1e4, 1e4, 1.0])) == [("explode", "m.1")]
    # A layer without grad is skipped: its neighbours are compared with each other.
    r = _layers([1e-5, None, 1.0])
    assert ("collapse", "m.0") in kinds(r) and ("no_grad", "m.1") in kinds(r)
    # All-zero gradients after a nonzero layer: the collapse is named, and the zeros reported.
    assert kinds(_layers([0.0, 0.0, 1.0])) == [("collapse", "m.1"), ("zero", "m.0")]


def test_long_chains_fold_and_shared_nodes_are_referenced() -> None:
    n = 30
    nodes: list[dict[str, Any]] = [{"op": f"Op{i}", "next": [i + 1], "saved": [], "leaf": None} for i in range(n)]
    nodes[-1]["next"] = []
    lines = [str(t) for t in grad_reports.graph_lines({"nodes": nodes})]
    assert lines[:4] == ["Op0", "Op1", "Op2", "Op3"] and lines[-3:] == ["Op27", "Op28", "Op29"]
    assert lines[4].startswith("… 23 more:")
    diamond = [{"op": "Add", "next": [1, 2], "saved": [], "leaf": None},
               {"op": "Left", "next": [3], "saved": [], "leaf": None},
               {"op": "Right", "next": [3], "saved": [], "leaf": None},
               {"op": "Shared", "next": [], "saved": [], "leaf": None}]
    lines = [str(t) for t in grad_reports.graph_lines({"nodes": diamond})]
    assert lines == ["Add", "├─ Left", "│  └─ [1] Shared", "└─ Right", "   └─ → [1] Shared (shown above)"]



def test_nan_and_inf_are_counted_and_zeros_found(probes: Any) -> None:
    lin = nn.Linear(4, 3)
    lin.weight.grad = torch.tensor([[float("nan"), 1.0, 0.0, 0.0], [float("inf"), 0.0, 0.0, 0.0],
                                    [float("-inf"), 2.0, 0.0, 0.0]])
    lin.bias.grad = torch.zeros(3)
    rows = {r["name"]: r for r in probes.grads({"lin": lin}, {})["params"]}
    w, b = rows["lin.weight"], rows["lin.bias"]
    assert (w["nan"], w["inf"], w["zeros"], w["grad_norm"], w["ratio"]) == (1, 2, 7, None, None)
    assert (b["nan"], b["inf"], b["zeros"], b["grad_norm"], b["zero_fraction"]) == (0, 0, 3, 0.0, 1.0)


def _layer_norms(name: str, model: str = "model") -> dict[str, float]:
    """The oracle: the fixture run here, each layer's L2 grad norm over its parameters."""
    import runpy

    ns = runpy.run_path(str(FIXTURES / name))
    out = {}
    for sub_name, sub in ns[model].named_modules():
        ps = [p for p in sub.parameters(recurse=False) if p.grad is not None]
        if ps:
            out[f"{model}.{sub_name}"] = float(torch.sqrt(sum(p.grad.detach().double().pow(2).sum() for p in ps)))
    return out


def _flat(s: str) -> str:
    return " ".join(s.split())  # lines wrap where the terminal ends


def test_grads_name_a_vanishing_sigmoid_stack(inspect_cli: Any) -> None:
    res = run_at_marker(inspect_cli, "vanishing_stack.py", "--grads", "--format", "json")
    assert res.rc == 0, res.err
    (f,) = res.json()["grads"]["findings"]
    assert f["kind"] == "vanishing" and f["activation"] == "Sigmoid"
    assert f["layers"] == [f"model.squash.{i}.0" for i in range(6)]
    norms = _layer_norms("vanishing_stack.py")
    per = (norms["model.squash.0.0"] / norms["model.squash.5.0"]) ** (1 / 5)
    assert f["per_block"] == pytest.approx(per, rel=1e-6)
    out = _flat(run_at_marker(inspect_cli, "vanishing_stack.py", "--grads").out)
    assert f"vanishing gradients through `model.squash.0–5` (Sigmoid), ×{per:.2g} per block" in out
    assert "model.squash.0.0.weight (32, 32)" in out and "vanishing" in out


def test_grads_name_the_exploding_layer(inspect_cli: Any) -> None:
    res = run_at_marker(inspect_cli, "exploding_layer.py", "--grads", "--format", "json")
    assert res.rc == 0, res.err
    (f,) = res.json()["grads"]["findings"]
    norms = _layer_norms("exploding_layer.py")
    assert (f["kind"], f["layer"], f["next_layer"]) == ("explode", "model.embed", "model.body.0")
    assert f["ratio"] == pytest.approx(norms["model.embed"] / norms["model.body.0"], rel=1e-6)
    out = _flat(run_at_marker(inspect_cli, "exploding_layer.py", "--grads").out)
    assert "gradients explode at model.embed:" in out and "explodes here" in out


def test_grads_name_the_dead_relu_and_the_layer_whose_ratio_is_off(inspect_cli: Any) -> None:
    import runpy

    ns = runpy.run_path(str(FIXTURES / "dead_relu.py"))  # the oracle: the ReLU's output, all 0
    with torch.no_grad():
        assert not ns["model"][:4](ns["x"]).any()
    res = run_at_marker(inspect_cli, "dead_relu.py", "--grads", "--format", "json")
    assert res.rc == 0, res.err
    g = res.json()["grads"]
    by_kind = {f["kind"]: f for f in g["findings"]}
    assert set(by_kind) == {"dead_relu", "ratio_outlier"}  # no collapse or zero finding besides
    dead = by_kind["dead_relu"]
    assert (dead["layer"], dead["relu"], dead["layers"]) == ("model.2", "model.3", ["model.0", "model.2"])
    odd = by_kind["ratio_outlier"]
    assert odd["layer"] == "enc.2" and odd["neighbours"] == ["enc.0", "enc.3"]
    layers = {L["layer"]: L for L in g["layers"]}
    assert min(layers["enc.0"]["ratio"], layers["enc.3"]["ratio"]) / layers["enc.2"]["ratio"] >= 100
    out = _flat(run_at_marker(inspect_cli, "dead_relu.py", "--grads").out)
    assert "dead ReLU: every gradient of model.2 is 0: the ReLU after it (model.3) outputs 0" in out
    assert "nor to the layers before it (model.0)" in out
    assert "the grad/weight ratio of enc.2" in out and "below its neighbours' (enc.0" in out


def test_stack_rule_and_dead_units_on_the_probe_rows() -> None:
    """The rules on the probe's rows, in this process: a growing stack is exploding; a stack
    of three layers or a drop at one layer is not a stack; half the units dead behind a ReLU."""
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(5) for m in (nn.Linear(8, 8), nn.Tanh())], nn.Linear(8, 1))
    model(torch.randn(4, 8)).sum().backward()
    with torch.no_grad():
        for i, k in enumerate(range(0, 12, 2)):  # the gradient set to grow 10x per block going back
            for p in model[k].parameters():
                p.grad.copy_(torch.full_like(p, 10.0 ** (5 - i)))
    sys.modules.setdefault(grads_probe.PROBE_NAME, probe)
    g = grad_reports.analyze(grads_probe.grads({"model": model}, {}))
    (f,) = [f for f in g["findings"] if f["kind"] == "exploding"]
    assert f["layers"] == ["model.0", "model.2", "model.4", "model.6", "model.8", "model.10"]
    # 10^5 at model.0 (72 entries) down to 1 at the head (9 entries), over five steps
    assert f["per_block"] == pytest.approx((1e5 * 72 ** 0.5 / 9 ** 0.5) ** (1 / 5))
    assert grad_reports.compact_names(f["layers"]) == "model.0–10"
    assert grad_reports.compact_names(["model.squash.0.0", "model.squash.1.0", "model.head"]) == \
        "model.squash.0–1, model.head"
    relu = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with torch.no_grad():
        relu[0].bias[:4] = -100.0  # four of eight units never fire
    relu(torch.randn(16, 4)).sum().backward()
    g = grad_reports.analyze(grads_probe.grads({"relu": relu}, {}))
    (d,) = [f for f in g["findings"] if f["kind"] == "dead_units"]
    assert (d["layer"], d["dead_units"], d["units"], d["relu"]) == ("relu.0", 4, 8, "relu.1")
