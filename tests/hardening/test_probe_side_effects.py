"""The probe, injected through a real debugpy session, changes nothing in the debuggee.

For every report kind (describe of each tensor, frame, memory, the gradient probe's --grads
and --graph, the diff probe's three calls behind --diff-steps, run here at one pause, and the
allocator probe's --cuda-summary) the target's own `snapshot()` is compared before the probe is injected and after
all reports: every tensor's `_version`, data checksum, requires_grad and grad (present,
checksum, version); the number of live tensors;
the warnings shown (the target records every warning, filter "always"); `torch.is_grad_enabled()`;
no `__warningregistry__`; and on CUDA `torch.cuda.memory_allocated()` to the byte.

One thing a report does leave, and cannot avoid through torch's Python API: reading a saved
tensor (`grad_fn._saved_*`) that had no Python object (a wrapped Python number as in `w * 3`, a
tensor made inside a C++ op such as `weight.t()` in `linear`) gives it one, and torch's PyObject
preservation keeps that wrapper as long as the saved tensor lives. No tensor or storage is new;
the test pins that the only new objects are such wrappers and that they go with their graph.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from stridelens.inspector import allocator_probe, diff_probe, grads_probe
from stridelens.inspector.session import Session
from tests.inspector.conftest import free_port

pytestmark = pytest.mark.timeout(150)

TARGET = """
    import gc, json, pathlib, time, warnings, weakref
    import debugpy, torch
    warnings.simplefilter("always")
    shown = []
    warnings.showwarning = lambda *a, **k: shown.append(str(a[0]))
    debugpy.listen(("127.0.0.1", {port}))
    dev = {device!r}

    w = torch.randn(6, 4, device=dev, requires_grad=True)
    x = torch.randn(3, 6, device=dev)
    h = (x @ w).relu()                  # non-leaf with a graph; reading its .grad would warn
    loss = h.sum()
    loss.backward(retain_graph=True)   # w.grad exists
    r = (w * 2)
    r.retain_grad()
    (r ** 2).sum().backward()           # r.grad exists
    v = x.t()[1:]                       # a view
    d = w.detach()[:2]                  # shares w's storage
    big = torch.zeros(1 << 16, device=dev)
    head = big[:3]
    del big
    model = torch.nn.Linear(4, 2).to(dev)
    net = torch.nn.Linear(6, 3).to(dev)
    net(x).square().sum().backward()    # net.weight.grad exists: --grads reads it
    losses = [(w * i).sum() for i in range(3)]
    NAMES = ["w", "x", "h", "loss", "r", "v", "d", "head", "model.weight", "model.bias",
             "net.weight", "net.bias"]

    BEFORE = set()  # ids of the tensor objects seen by the first snapshot
    NEW = []

    def track_new():
        # Weak references to the tensor objects the first snapshot did not see; how many.
        gc.collect()
        NEW.extend(weakref.ref(o) for o in gc.get_objects()
                   if issubclass(type(o), torch.Tensor) and id(o) not in BEFORE)
        return len(NEW)

    def release():
        # Once the debugger has gone (its evaluations hold copies of globals while paused):
        # drop every graph, then count the tracked objects that outlive them.
        for name in ("h", "loss", "r", "losses"):
            globals().pop(name)
        gc.collect()
        pathlib.Path("released.part").write_text(str(sum(ref() is not None for ref in NEW)))
        pathlib.Path("released.part").rename("released")

    def snapshot():
        out = {{}}
        with torch.no_grad():
            for name in NAMES:
                t = eval(name)
                g = t.grad if t.is_leaf or t.retains_grad else None
                out[name] = [t._version, float(t.detach().double().sum()), t.requires_grad,
                             None if g is None else [g._version, float(g.double().sum())]]
        gc.collect()
        live = [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]
        out["live"] = len(live)
        if not BEFORE:
            BEFORE.update(id(o) for o in live)
        out["storages"] = sorted({{(str(o.device), o.untyped_storage().data_ptr(), o.untyped_storage().nbytes())
                                  for o in live if o.layout == torch.strided and o.device.type != "meta"}})
        del live
        out["grad_enabled"] = torch.is_grad_enabled()
        out["warnings"] = list(shown)
        out["registry"] = "__warningregistry__" in globals()
        out["cuda"] = torch.cuda.memory_allocated() if dev == "cuda" else None
        return json.dumps(out)

    pathlib.Path("ready").write_text("1")
    while True:
        time.sleep(0.01)
        if pathlib.Path("release").exists() and not pathlib.Path("released").exists():
            release()
"""

EXPRESSIONS = ["w", "x", "h", "loss", "r", "v", "d", "head", "model.weight", "losses[1]"]


def run_all_reports(target: Any, tmp_path: Path, device: str) -> tuple[dict[str, Any], dict[str, Any], list[int]]:
    """Snapshot, every report, snapshot again, then drop the target's graphs (see `release`)."""
    port = free_port()
    target(TARGET.format(port=port, device=device), ready_file=tmp_path / "ready", timeout=120)
    with Session(timeout=60) as s:
        s.connect("127.0.0.1", port)
        s.handshake([])
        s.pause()
        assert s.frame.get("name") == "<module>", s.frame
        before = json.loads(s.evaluate("snapshot()"))
        s.ensure_probe()
        for expr in EXPRESSIONS:
            assert s.describe(expr)["shape"] is not None
        frame = s.frame_report()
        memory = s.process_report(top=20, min_pin_bytes=1000)
        s.inject(grads_probe.__file__, grads_probe.PRIVATE_NAME, grads_probe.FILENAME)
        grads = s.call_probe("grads_json(globals(), locals())", module=grads_probe.PRIVATE_NAME)
        tree = s.call_probe("graph_tree_json('loss', globals(), locals())", module=grads_probe.PRIVATE_NAME)
        s.inject(diff_probe.__file__, diff_probe.PRIVATE_NAME, diff_probe.FILENAME)
        for call in ("begin_json(locals())", "sample_json(locals())"):
            s.call_probe(call, module=diff_probe.PRIVATE_NAME)
        diff = s.call_probe("end_json(locals())", module=diff_probe.PRIVATE_NAME)
        s.inject(allocator_probe.__file__, allocator_probe.PRIVATE_NAME, allocator_probe.FILENAME)
        cuda = s.call_probe("summary_json(locals())", module=allocator_probe.PRIVATE_NAME)
        diff_state = s.evaluate(f"len(__import__('sys').modules[{diff_probe.PRIVATE_NAME!r}]._state)")
        after = json.loads(s.evaluate("snapshot()"))
        new_objects = json.loads(s.evaluate("track_new()"))
        s.finish()
    assert frame["groups"] and memory["tensor_count"] >= len(EXPRESSIONS)
    assert {r["name"]: r["grad_norm"] for r in grads["params"]}["net.weight"] > 0
    assert tree["nodes"][0]["op"] == "SumBackward0"
    # The diff saw the same storages at its three walks, named the keepers, and kept nothing after.
    assert diff["steps"] == 2 and diff["new_storages"] == 0 and diff_state == "0"
    assert {g["keeper"] for g in diff["groups"]} >= {"w", "losses", "model", "net.weight.grad"}
    assert (cuda["cuda"] == "ok") == (device == "cuda") and cuda["tensors"][device if device == "cpu" else "cuda:0"]
    kinds = {f["kind"] for f in memory["findings"]}
    assert {"graph_kept_alive", "view_pins_storage"} <= kinds, kinds  # the reports did their job
    (tmp_path / "release").write_text("1")
    deadline = time.monotonic() + 30
    while not (tmp_path / "released").exists():
        assert time.monotonic() < deadline, "the target did not drop its graphs"
        time.sleep(0.05)
    outliving = int((tmp_path / "released").read_text())
    return before, after, [new_objects, outliving]


def assert_unchanged(before: dict[str, Any], after: dict[str, Any]) -> None:
    for name in [k for k in before if k not in ("live", "storages", "grad_enabled", "warnings", "registry", "cuda")]:
        assert after[name] == before[name], f"{name}: {before[name]} -> {after[name]}"
    # No storage freed; one that appears was already alive, saved by a graph, and became visible
    # through a new wrapper (see the module docstring): at most one per new object.
    old, new = {tuple(x) for x in before["storages"]}, {tuple(x) for x in after["storages"]}
    assert old <= new, "a storage went away"
    assert len(new - old) <= after["live"] - before["live"], new - old
    assert after["grad_enabled"] == before["grad_enabled"] is True
    assert after["warnings"] == before["warnings"] == [], after["warnings"]
    assert after["registry"] is False
    assert after["cuda"] == before["cuda"]


def test_reports_change_nothing_cpu(target: Any, tmp_path: Path) -> None:
    before, after, _ = run_all_reports(target, tmp_path, "cpu")
    assert before["w"][3] is not None and before["r"][3] is not None  # grads exist to be checked
    assert_unchanged(before, after)


def test_new_tensor_objects_are_wrappers_that_go_with_their_graph(target: Any, tmp_path: Path) -> None:
    before, after, released = run_all_reports(target, tmp_path, "cpu")
    new_objects, outliving = released
    # The three graphs in `losses` each save a wrapped Python number (`w * i`): reading them gives
    # three wrappers. Nothing else is new, and none outlives the graphs once the target drops them.
    assert after["live"] - before["live"] == new_objects == 3, (before["live"], after["live"], released)
    assert outliving == 0, f"{outliving} tensor objects outlived the graphs that saved them"


@pytest.mark.cuda
def test_reports_change_nothing_cuda(target: Any, tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    before, after, _ = run_all_reports(target, tmp_path, "cuda")
    assert before["cuda"] > 0
    assert_unchanged(before, after)
