"""Alike rows are one (issue 32): the storages the graphs of `losses[0..19]` saved are one top row
with the line that keeps them, and the frame's `losses[0]` … `losses[19]` one frame row; the probe
groups them, so `inspect --memory` and the VS Code panel (its fixture, below) show the same rows.

End to end: real targets under real debugpy, real torch on CPU. The grouping functions also over
handcrafted reports, and the stopped frame's search in-process (no pydevd frames).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import torch

from stridelens import i18n
from stridelens.inspector import probe_report, reports

from .conftest import EXAMPLES, REPO, marker_line

pytestmark = pytest.mark.timeout(240)

# One step's graph saves ReLU's output, 128 x 512 float32 = 256 KiB (and the 32 KiB input);
# the parameters are 128 KiB: --top 22 is the 20 activations and the first layer's weight and grad.
MODULE_LOOP = """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    losses = []
    for step in range(20):
        x = torch.randn(128, 64)
        loss = model(x).square().mean()  # the graph
        loss.backward(retain_graph=True)
        losses.append(loss)  # keeps every step's graph
    print("done")  # inspect here
"""

FUNCTION_LOOP = """
    import torch


    def train(model, steps):
        losses = []
        for step in range(steps):
            x = torch.randn(128, 64)
            loss = model(x).square().mean()  # the graph
            loss.backward(retain_graph=True)
            losses.append(loss)  # keeps every step's graph
        return losses  # inspect here


    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    print(len(train(model, 20)))
"""

ACTIVATION = torch.empty(128, 512).untyped_storage().nbytes()  # 256 KiB


def test_memory_text_one_row_for_the_graphs_of_a_list_and_one_for_its_items(script: Any, inspect_cli: Any) -> None:
    p = script("loop.py", MODULE_LOOP)
    append = marker_line(p, "losses.append(loss)")
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--memory", "--frame", "--top", "22",
                    "--kill")
    assert r.rc == 0, r.err
    rows = [" ".join(line.split()) for line in r.out.splitlines()]
    # The 20 activations: one row, the list's items' graphs, the line that keeps them.
    want = f"20 × 256.0 KiB cpu 256.0 KiB saved by `losses[0..19]`'s 20 graphs, from line {append}"
    assert want in rows, r.out
    assert sum("saved by" in row for row in rows) == 1, r.out
    assert "unnamed" not in r.out and "saved by an autograd graph" not in r.out
    # The frame: the 20 losses one row; `loss` is the last of them, said once.
    assert "20 × 4 B cpu losses[0..19] () float32 () 0 yes MeanBackward0" in rows, r.out
    assert "• loss is losses[19]" in rows, r.out
    assert not any(row.startswith(("4 B cpu losses", "losses[1]")) or "losses[19], loss" in row for row in rows), r.out


def test_memory_json_rows_in_a_function_frame(script: Any, inspect_cli: Any) -> None:
    """The same rows in `--format json` (what the VS Code panel reads), stopped in a function: the
    line is the function's `losses.append`, found without reading any frame's locals."""
    p = script("train.py", FUNCTION_LOOP)
    append = marker_line(p, "losses.append(loss)")
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--memory", "--frame", "--top", "22",
                    "--format", "json", "--kill")
    assert r.rc == 0, r.err
    rep = r.json()
    mem = rep["memory"]
    saved = [row for row in mem["top_rows"] if row["graph_root"]]
    assert saved == [{"at": 0, "count": 20, "graph_root": "losses[0..19]", "graphs": 20}]
    assert {(t["bytes"], t["graph_line"]) for t in mem["top"] if t["saved_by_graph"]} == {(ACTIVATION, append)}
    assert len(mem["top_rows"]) == 3  # and the weight, its grad
    frame = rep["frame"]
    runs = [row for row in frame["rows"] if row["count"] > 1]
    assert runs == [{"at": runs[0]["at"], "count": 20, "name": "losses[0..19]", "aliases": [["loss", "losses[19]"]]}]
    first = frame["groups"][runs[0]["at"]]["tensors"][0]
    assert first["name"] == "losses[0]" and first["shape"] == [] and first["grad_fn"] == "MeanBackward0"
    # Every group is a row, or folded into the run.
    assert len(frame["rows"]) == len(frame["groups"]) - 19


def test_the_panel_fixture_holds_a_fresh_runs_rows(inspect_cli: Any) -> None:
    """vscode-client/test/fixtures/memory-leaky-losses.json (the panel's unit test) is what the probe
    answers now for the leaky_losses example: the same rows, the same line."""
    fixture = json.loads((REPO / "vscode-client/test/fixtures/memory-leaky-losses.json").read_text())
    p = EXAMPLES / "leaky_losses.py"
    r = inspect_cli("--launch", str(p), "--break", f"{p}:{marker_line(p)}", "--memory", "--frame", "--top", "10",
                    "--format", "json")
    assert r.rc == 0, r.err
    rep = r.json()

    def top(m: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(row["count"], row["graph_root"], row["graphs"], m["top"][row["at"]]["bytes"],
                 m["top"][row["at"]]["graph_line"], tuple(m["top"][row["at"]]["names"])) for row in m["top_rows"]]

    def frame(f: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(row["count"], row["name"], row["aliases"], f["groups"][row["at"]]["tensors"][0]["name"])
                for row in f["rows"]]

    assert top(rep["memory"]) == top(fixture["memory"])
    assert frame(rep["frame"]) == frame(fixture["frame"])
    assert (8, "losses[0..7]", 8, ACTIVATION, marker_line(p, "losses.append(loss)"), ()) in top(fixture["memory"])
    assert (20, "losses[0..19]", [["loss", "losses[19]"]], "losses[0]") in frame(fixture["frame"])


# ---- the grouping over handcrafted reports -------------------------------------------------------


def _top(root: str | None, line: int | None = None, names: tuple[str, ...] = (), nbytes: int = 262144) -> dict[str, Any]:
    return {"storage_key": "cpu@1", "device": "cpu", "bytes": nbytes, "tensors": 1, "names": list(names),
            "unnamed": 0 if names else 1, "used_bytes": nbytes, "saved_by_graph": root is not None,
            "graph_root": root, "graph_line": line}


def test_top_rows_fold_unnamed_storages_of_one_graph_or_of_one_lists_graphs() -> None:
    top = [_top(None, names=("model.0.weight",), nbytes=524288),
           *(_top(f"losses[{i}]", 21) for i in (3, 0, 1, 2, 5)),
           _top("loss", 17), _top("loss", 17),
           _top("loss", 17, names=("h",)),  # a named one stays its own row
           _top("loss", 30),  # another line: another row
           _top(None, nbytes=4096)]
    rows = probe_report.group_top_rows(top)
    assert [(r["at"], r["count"], r["graph_root"], r["graphs"]) for r in rows] == [
        (0, 1, None, 0), (1, 5, "losses[0..3, 5]", 5), (6, 2, "loss", 1), (8, 1, "loss", 1), (9, 1, "loss", 1),
        (10, 1, None, 0)]
    report = {"top": top, "top_rows": rows}
    before = i18n.language()
    try:
        i18n.set_language("en")
        held = [(n, h) for n, _, h in reports.top_rows(report)]
        i18n.set_language("zh-CN")
        zh = reports.top_rows(report)[1][2]
    finally:
        i18n.set_language(before)
    assert held == [
        (1, "`model.0.weight`"),
        (5, "saved by `losses[0..3, 5]`'s 5 graphs, from line 21"),
        (2, "saved by `loss`'s graph, from line 17"),
        (1, "`h`; saved by `loss`'s graph, from line 17"),
        (1, "saved by `loss`'s graph, from line 30"),
        (1, "1 unnamed")]
    assert zh == "由 `losses[0..3, 5]` 的 5 个计算图保存，来自第 21 行"


def _group(key: str, *names: str, nbytes: int = 4, shape: tuple[int, ...] = ()) -> dict[str, Any]:
    ms = [{"name": n, "shape": list(shape), "dtype": "float32", "strides": [1] * len(shape), "storage_offset": 0,
           "contiguous": True, "nbytes": nbytes, "requires_grad": True, "grad_fn": "MeanBackward0", "version": 0,
           "is_view": False, "view_of": None, "shares_storage_of": None} for n in names]
    return {"storage_key": key, "device": "cpu", "storage_bytes": nbytes, "tensors": ms, "summary": ""}


def test_item_rows_fold_alike_items_in_a_row_with_their_other_names() -> None:
    groups = [_group("w", "w", nbytes=400, shape=(10, 10)),
              *(_group(f"l{i}", f"losses[{i}]") for i in range(4)),
              _group("l4", "loss", "losses[4]"),  # one tensor, two names
              _group("h0", "hist[0]"), _group("h1", "hist[1]"),  # two: below RUN_MIN
              _group("p7", "ps[7]"), _group("p8", "ps[8]", nbytes=8), _group("p9", "ps[9]"),  # not alike
              _group("v", "a", "b")]  # two tensors of one storage: no run
    rows = probe_report._item_rows(groups, {g["storage_key"] for g in groups} - {"v"})
    assert [(r["at"], r["count"], r["name"], r["aliases"]) for r in rows] == [
        (0, 1, None, []), (1, 5, "losses[0..4]", [["loss", "losses[4]"]]),
        (6, 1, None, []), (7, 1, None, []), (8, 1, None, []), (9, 1, None, []), (10, 1, None, []), (11, 1, None, [])]
    # A storage of two tensor objects never joins a run.
    rows = probe_report._item_rows(groups, {g["storage_key"] for g in groups} - {"v", "l4"})
    assert [(r["count"], r["name"]) for r in rows][1] == (4, "losses[0..3]")


def test_binding_line_of_a_name_and_of_a_lists_items() -> None:
    src = ("losses = []\n"            # 1
           "for i in range(3):\n"     # 2
           "    loss = f(i)\n"        # 3
           "    losses.append(loss)\n"  # 4
           "loss = g()\n"             # 5
           "done = 1\n")              # 6
    code = compile(src, "<loop>", "exec")
    assert probe_report._binding_line(code, 6, "loss", False) == 5
    assert probe_report._binding_line(code, 4, "loss", False) == 3
    assert probe_report._binding_line(code, 2, "loss", False) == 5  # above the loop's: its last
    assert probe_report._binding_line(code, 6, "losses", True) == 4
    assert probe_report._binding_line(code, 6, "nothing", False) is None
    comp = compile("xs = [h(i) for i in range(3)]\nstop = 1\n", "<comp>", "exec")
    assert probe_report._binding_line(comp, 2, "xs", True) == 1  # no append: the list's own line
    sub = compile("xs = [None] * 3\nfor i in range(3):\n    xs[i] = h(i)\nstop = 1\n", "<sub>", "exec")
    assert probe_report._binding_line(sub, 4, "xs", True) == 3

    def fn(xs: list[Any]) -> None:
        loss = h()  # noqa: F821
        xs.append(loss)

    first = fn.__code__.co_firstlineno
    assert probe_report._binding_line(fn.__code__, first + 3, "loss", False) == first + 1
    assert probe_report._binding_line(fn.__code__, first + 3, "xs", True) == first + 2


def test_stop_code_finds_the_frame_of_a_namespace_without_pydevd() -> None:
    """pydevd's `locals()`: a fresh dict of the frame's globals and locals; in-process, no debugger
    frames on the stack. The frame is found by its names; a namespace of no frame finds none."""
    def train(model: Any, steps: int) -> tuple[Any, Any, int]:
        losses = [model] * steps
        here = sys._getframe().f_lineno
        return probe_report._stop_code({**globals(), **locals()}), train.__code__, here

    where, code, line = train(1, 2)
    assert where == (code, line + 1)
    assert probe_report._stop_code({"nothing": 1}) is None

    # Two frames whose names the namespace holds (a caller and a callee, one argument name): not
    # sure which, none.
    def inner(a: int) -> Any:
        return probe_report._stop_code({**globals(), "a": a})

    def outer(a: int) -> Any:
        return inner(a)

    assert outer(1) is None
