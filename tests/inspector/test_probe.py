"""The probe, called in-process on tensors made here: facts checked against those tensors."""

from __future__ import annotations

import ast
import gc
import io
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from stridelens.inspector import probe, probe_describe, probe_parts, probe_report


def live_tensor_count() -> int:
    return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))


def storage_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def test_describe_view_matches_torch() -> None:
    a = torch.arange(24.0).reshape(2, 3, 4)
    v = a.permute(2, 0, 1)[1:]
    d = probe_describe.describe(v)
    assert d["shape"] == list(v.shape)
    assert d["strides"] == list(v.stride())
    assert d["storage_offset"] == v.storage_offset()
    assert d["contiguous"] == v.is_contiguous() is False
    assert d["memory_format"] == "non-contiguous"
    assert d["notes"] and d["notes"][0].startswith("not contiguous")
    assert d["numel"] == v.numel()
    assert d["nbytes"] == v.numel() * v.element_size()
    assert d["storage_bytes"] == storage_bytes(a)
    assert d["storage_key"] == probe_describe.describe(a)["storage_key"]
    assert d["is_view"] is True
    assert d["base"]["shape"] == list(v._base.shape)
    assert d["version"] == v._version
    assert d["grad_fn"] is None and d["graph"] is None
    assert d["cuda"] is None and d["stats"] is None


def test_describe_channels_last() -> None:
    x = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert probe_describe.describe(x)["memory_format"] == "channels_last"


def test_describe_graph_saved_bytes() -> None:
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    z = (a * b).tanh()
    d = probe_describe.describe(z)
    assert d["grad_fn"] == type(z.grad_fn).__name__
    assert d["grad_fn_chain"][0]["next"] == [type(z.grad_fn.next_functions[0][0]).__name__]
    # MulBackward0 saves a and b; TanhBackward0 saves its result z: three storages.
    assert d["graph"]["saved_bytes"] == storage_bytes(a) + storage_bytes(b) + storage_bytes(z)
    assert d["requires_grad"] and not d["is_leaf"] and d["grad"] is None


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * g


def test_describe_graph_counts_custom_function_saves_after_cpp_nodes() -> None:
    # C++ nodes are remembered as having no `saved_tensors`; a custom Function's node still has.
    x = torch.randn(3, requires_grad=True)
    probe_describe.describe((x * 2).sum())
    y = _Square.apply(x)
    d = probe_describe.describe(y.sum())
    assert d["graph"]["saved_tensors"] == 1 and d["graph"]["saved_bytes"] == storage_bytes(x)
    assert [n["name"] for n in d["grad_fn_chain"]] == ["SumBackward0", "_SquareBackward", "AccumulateGrad"]


def test_describe_same_card_when_asked_again() -> None:
    # Per-type and per-device caches fill on the first call: the second card is the same text.
    base = torch.randn(4, 5)
    for t in (base, base.t()[1:], torch.empty(2, 3, device="meta"), (base.requires_grad_() * 3).sum()):
        assert probe_describe.describe_json(t) == probe_describe.describe_json(t)


def test_describe_grad_of_leaf() -> None:
    w = torch.randn(5, requires_grad=True)
    (w * 2).sum().backward()
    d = probe_describe.describe(w)
    assert w.grad is not None
    assert d["grad"] == {"shape": [5], "dtype": "float32", "nbytes": w.grad.numel() * w.grad.element_size()}


def test_describe_value_stats_only_when_asked() -> None:
    x = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
    assert probe_describe.describe(x)["stats"] is None
    s = probe_describe.describe(x, stats=True)["stats"]
    assert s == {"nan": 1, "inf": 1, "min": 1.0, "max": 3.0, "mean": 2.0}


class MyTensor(torch.Tensor):
    pass


def unusual_tensors() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
        quant = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    return {
        "meta": torch.empty(3, 4, device="meta"),
        "sparse": torch.eye(3).to_sparse(),
        "nested": nested,
        "quantized": quant,
        "subclass": torch.randn(3).as_subclass(MyTensor),
        "parameter": torch.nn.Parameter(torch.randn(2)),
        "empty": torch.empty(0),
        "zero_dim": torch.tensor(3.0),
    }


@pytest.mark.parametrize("kind", list(unusual_tensors()))
def test_describe_unusual_tensors(kind: str) -> None:
    t = unusual_tensors()[kind]
    out = json.loads(probe_describe.describe_json(t))
    assert out["ok"], out
    d = out["result"]
    assert d["numel"] == t.numel()
    if kind == "sparse":
        assert d["storage_key"] is None and "no single strided storage" in d["notes"][0]
    if kind == "meta":
        assert d["storage_bytes"] == 48 and "meta tensor" in d["notes"][0]
    if kind == "subclass":
        assert d["type"].endswith("MyTensor")


def test_meta_storages_told_apart() -> None:
    a = torch.empty(3, device="meta")
    b = torch.empty(3, device="meta")
    ka, kb, kv = (probe_describe.describe(t)["storage_key"] for t in (a, b, a[1:]))
    assert ka != kb and ka == kv


def test_describe_not_a_tensor() -> None:
    out = json.loads(probe_describe.describe_json([1, 2]))
    assert out == {"ok": False, "error": "not a tensor: the expression is a builtins.list"}


def test_frame_report_groups_by_storage() -> None:
    a = torch.arange(24.0)
    b = a[5:]
    bT = a.view(4, 6).t()
    c = torch.zeros(3)
    model = torch.nn.Linear(2, 2)
    r = probe_report.frame_report({"a": a, "b": b, "bT": bT, "c": c, "n": 3, "model": model, "xs": [c, 1]})
    assert r["total_bytes"] == storage_bytes(a) + storage_bytes(c) + sum(
        storage_bytes(p) for p in model.parameters()
    )
    g = next(g for g in r["groups"] if {m["name"] for m in g["tensors"]} == {"a", "b", "bT"})
    assert g["storage_bytes"] == storage_bytes(a)
    assert g["summary"] == (
        f"a, b, bT share one {storage_bytes(a)}-byte storage; "
        f"b is a view of a at offset {b.storage_offset()}; bT is a view of a at offset 0"
    )
    names = {m["name"] for grp in r["groups"] for m in grp["tensors"]}
    assert {"c", "xs[0]", "model.weight", "model.bias"} <= names


def test_process_report_names_the_leaks() -> None:
    w = torch.randn(1000, requires_grad=True)
    xs = [torch.randn(1000) for _ in range(4)]
    losses = []
    for x in xs:
        losses.append((w * x).sum())  # the classic: the list keeps every graph
    big = torch.randn(1 << 19)
    head = big[:10]
    del big
    h = torch.randn(7, requires_grad=True) * 2
    h.retain_grad()
    h.sum().backward()
    stale = torch.randn(6, requires_grad=True)
    stale.sum().backward()
    stale.requires_grad_(False)

    r = probe_report.process_report(top=10_000, ns=locals())

    # The report is process-wide: other tests' leftovers may be findings too, so pick ours.
    def finding(kind: str, key: str, name: str) -> dict:
        return next(f for f in r["findings"] if f["kind"] == kind and f.get(key) == name)

    leak = finding("graph_kept_alive", "container", "losses")
    assert leak["graph_tensors"] == len(losses)
    # Each MulBackward0 saved its x (w does not need saving: x needs no grad).
    assert leak["bytes"] == sum(storage_bytes(x) for x in xs)
    pin = finding("view_pins_storage", "tensor", "head")
    assert pin["bytes"] == storage_bytes(head)
    assert pin["used_bytes"] == head.numel() * head.element_size()
    assert h.grad is not None and finding("retained_grad", "tensor", "h")["bytes"] == h.grad.numel() * 4
    assert finding("stale_grad", "tensor", "stale")
    head_group = next(g for g in r["top"] if g["names"] == ["head"])
    assert head_group["bytes"] == storage_bytes(head)
    cpu = next(d for d in r["devices"] if d["device"] == "cpu")
    assert cpu["bytes"] >= storage_bytes(head) + sum(storage_bytes(x) for x in xs)


def test_process_report_one_graph_is_not_a_leak() -> None:
    w = torch.randn(10, requires_grad=True)
    out = w * 2
    loss = out.sum()
    pair = [out, loss]  # same graph: not a "kept alive across iterations" pattern
    r = probe_report.process_report()
    assert pair and not [f for f in r["findings"] if f.get("container") == "pair"]


def test_process_report_counts_live_tensors() -> None:
    keep = [torch.empty(2) for _ in range(1000)]
    r = probe_report.process_report()
    assert r["tensor_count"] >= len(keep)
    assert r["tensor_count"] == live_tensor_count()


def test_probe_changes_nothing() -> None:
    a = torch.randn(4, 4, requires_grad=True)
    y = (a @ a).relu()  # non-leaf without retains_grad: reading .grad would warn
    v = a.detach()[1:]
    ns = locals()  # what the client passes: the stopped frame's namespace
    before_refs = [sys.getrefcount(t) for t in (a, y, v)]
    before_versions = [t._version for t in (a, y, v)]
    before_live = live_tensor_count()
    grad_mode = torch.is_grad_enabled()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe_describe.describe_json(a)
        probe_describe.describe_json(y)
        probe_describe.describe_json(v)
        probe_report.frame_report_json({"a": a, "y": y, "v": v})
        probe_report.process_report_json(ns=ns)
    assert caught == []
    assert [sys.getrefcount(t) for t in (a, y, v)] == before_refs
    assert [t._version for t in (a, y, v)] == before_versions
    assert live_tensor_count() == before_live
    assert torch.is_grad_enabled() == grad_mode
    assert gc.isenabled()
    assert "__warningregistry__" not in vars(probe)
    # TypedStorage's one-time warning was never armed: `.storage()` was not called.
    assert not torch.storage._warn_typed_storage_removal.__dict__.get("has_warned", False)
    # The graph is intact: backward still works.
    y.sum().backward()
    assert a.grad is not None


STDLIB_IMPORTS = {"__future__", "gc", "heapq", "json", "sys", "types", "typing", "socket",
                  "collections", "functools", "itertools", "operator"}


def _imports(tree: ast.AST) -> set[str]:
    return {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]  # type: ignore[union-attr]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize("path", probe_parts.FILES, ids=lambda p: Path(p).name)
def test_probe_parts_import_only_the_standard_library_in_the_target(path: str) -> None:
    tree = ast.parse(Path(path).read_text())
    guarded = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ != '_stridelens_probe'"]
    rest = [n for n in tree.body if n not in guarded]
    assert _imports(ast.Module(body=rest, type_ignores=[])) <= STDLIB_IMPORTS
    # In-process only: the other parts take the first one's names from it.
    for g in guarded:
        assert all(isinstance(n, ast.ImportFrom) and n.module == "stridelens.inspector.probe" for n in g.body)
    assert bool(guarded) == (path != probe.__file__)


def test_probe_in_target_without_torch() -> None:
    # -S: no site-packages, so neither torch nor stridelens can be imported by the parts.
    code = (
        "import sys, types\n"
        "m = types.ModuleType('_stridelens_probe')\n"
        f"for src, filename in {probe_parts.sources()!r}:\n"
        "    exec(compile(src, filename, 'exec'), m.__dict__)\n"
        "print(m.process_report_json())\n"
        "print(m.describe_json(1))\n"
        "print('torch' in sys.modules, 'stridelens' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, second, third = out.stdout.splitlines()
    assert json.loads(first) == {"ok": False, "error": "the target process has not imported torch"}
    assert json.loads(second) == {"ok": False, "error": "the target process has not imported torch"}
    assert third == "False False"


def test_a_view_is_of_its_base_only_and_shares_the_storage_of_a_covering_tensor() -> None:
    grid = torch.arange(12.0).reshape(3, 4)  # itself a view of the unnamed arange result
    grid_t = grid.t()
    window = grid[1:, 1:3]
    assert grid_t._base is not grid  # the oracle: `_base` is the arange result
    r = probe_report.frame_report({"grid": grid, "grid_t": grid_t, "window": window})
    (g,) = r["groups"]
    members = {m["name"]: m for m in g["tensors"]}
    assert members["grid_t"]["view_of"] is None and members["window"]["view_of"] is None
    assert members["grid_t"]["shares_storage_of"] == "grid" and members["window"]["shares_storage_of"] == "grid"
    assert members["grid"]["is_view"] is True and members["grid"]["view_of"] is None
    assert members["grid"]["shares_storage_of"] is None  # it covers the base: in effect its storage
    assert ("grid_t is a view of an unnamed base at offset 0 (it shares the storage of grid, not a view of it)"
            in g["summary"])
    assert "is a view of grid" not in g["summary"]
    # A view of a named tensor is its view.
    x = torch.zeros(4, 4)
    r = probe_report.frame_report({"x": x, "row": x[1]})
    members = {m["name"]: m for m in r["groups"][0]["tensors"]}
    assert members["row"]["view_of"] == "x" and members["row"]["shares_storage_of"] is None
    # Half of the base is not the base: `tail` is not called a view of `head`, it shares its storage.
    head = torch.arange(12.0)[:6]
    r = probe_report.frame_report({"head": head, "tail": head[1:]})
    members = {m["name"]: m for m in r["groups"][0]["tensors"]}
    assert members["tail"]["view_of"] is None and members["tail"]["shares_storage_of"] == "head"


def test_describe_names_the_base_only_when_it_is_the_base() -> None:
    from rich.console import Console

    from stridelens.inspector.reports import describe_table

    grid = torch.arange(12.0).reshape(3, 4)
    x = torch.zeros(4, 4)
    frame = {"grid": grid, "x": x}
    b = probe_describe.describe_expr("grid.t()", frame, frame)["base"]
    assert (b["name"], b["shares_with"], b["shape"]) == (None, "grid", [12])  # covers the base, is not it
    b = probe_describe.describe_expr("x[1:]", frame, frame)["base"]
    assert (b["name"], b["shares_with"]) == ("x", None)  # is the base
    b = probe_describe.describe_expr("grid", frame, frame)["base"]
    assert (b["name"], b["shares_with"]) == (None, None)  # not itself
    assert probe_describe.describe_expr("x", frame, frame)["base"] is None
    # The card says so in words.
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(describe_table("t", probe_describe.describe_expr("grid.t()", frame, frame)))
    text = console.export_text()
    assert "an unnamed tensor of shape (12,) (the `_base`); shares the storage of `grid`" in text
    assert "`grid`, a tensor" not in text
