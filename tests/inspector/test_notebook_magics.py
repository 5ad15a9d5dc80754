"""`%load_ext stridelens` in a real IPython kernel, started and driven with jupyter_client.

One kernel with torch for the module (cells run in order, as in a notebook), and one whose
interpreter cannot import torch (a sitecustomize on PYTHONPATH puts None in
sys.modules["torch"], which is what Python does for a module that failed to import).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 90


@dataclass
class Cell:
    """What one executed cell sent back on iopub."""

    status: str = ""
    count: int | None = None
    displays: list[dict[str, Any]] = field(default_factory=list)  # display_data bundles
    result: dict[str, Any] | None = None  # execute_result bundle
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    user_expressions: dict[str, Any] = field(default_factory=dict)


class Kernel:
    def __init__(self, km: Any, kc: Any) -> None:
        self.km, self.kc = km, kc

    def run(self, code: str, **user_expressions: str) -> Cell:
        cell = Cell()

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "display_data":
                cell.displays.append(content["data"])
            elif kind == "execute_result":
                cell.result = content["data"]
            elif kind == "stream":
                if content["name"] == "stdout":
                    cell.stdout += content["text"]
                else:
                    cell.stderr += content["text"]
            elif kind == "error":
                cell.error = f"{content['ename']}: {content['evalue']}"

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=TIMEOUT,
                                            user_expressions=user_expressions, allow_stdin=False)
        cell.status = reply["content"]["status"]
        cell.count = reply["content"].get("execution_count")
        cell.user_expressions = reply["content"].get("user_expressions", {})
        return cell

    def ok(self, code: str) -> Cell:
        cell = self.run(code)
        assert cell.status == "ok" and cell.error is None, (cell.error, cell.stderr)
        return cell

    def value(self, expr: str) -> str:
        cell = self.run("pass", v=expr)
        return str(cell.user_expressions["v"]["data"]["text/plain"])


def _start(tmp: Path, extra_env: dict[str, str]) -> Iterator[Kernel]:
    from jupyter_client import KernelManager

    env = {**os.environ, "IPYTHONDIR": str(tmp / "ipython"), "JUPYTER_PLATFORM_DIRS": "1",
           "PYTHONWARNINGS": "ignore", **extra_env}
    km = KernelManager(kernel_name="python3", connection_file=str(tmp / "kernel.json"))
    km.kernel_spec.argv[0] = sys.executable  # this interpreter, whatever the spec on disk says
    km.start_kernel(env=env, cwd=str(tmp))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=TIMEOUT)
        yield Kernel(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    tmp = tmp_path_factory.mktemp("kernel")
    for k in _start(tmp, {}):
        k.ok("%load_ext stridelens")
        k.ok("import torch\n"
             "a = torch.arange(12.).reshape(3, 4)\n"
             "t = a.t()")
        yield k


@pytest.fixture(scope="module")
def kernel_without_torch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    tmp = tmp_path_factory.mktemp("notorch")
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    yield from _start(tmp, {"PYTHONPATH": path})


def _user_names(k: Kernel) -> set[str]:
    names = eval(k.value("sorted(globals())"))  # a list literal of strings
    # Input history names appear with every cell run: `_i`, `_ii`, `_iii`, `_i12`.
    return {n for n in names if not re.fullmatch(r"_i+|_i\d+", n)}


def _one_line_error(cell: Cell) -> str:
    assert cell.status == "ok" and cell.error is None
    assert not cell.displays and cell.result is None
    assert cell.stderr.startswith("stridelens: ") and cell.stderr.count("\n") == 1, cell.stderr
    return cell.stderr.strip()


# ---------------------------------------------------------------- the tensor card


def test_card_of_transposed_view(kernel: Kernel) -> None:
    names = _user_names(kernel)
    out_len = kernel.value("len(Out)")
    version = kernel.value("(a._version, t._version)")
    cell = kernel.ok("%stridelens t")
    assert cell.result is None  # the magic returns nothing: no Out entry, no `_`
    [bundle] = cell.displays
    text, page = bundle["text/plain"], bundle["text/html"]
    assert "t  (Tensor)" in text
    assert re.search(r"shape\s+\(4, 3\)", text)
    assert re.search(r"strides\s+\(1, 4\)", text)
    assert re.search(r"layout\s+strided, non-contiguous", text)
    # `t._base` is the arange result, not `a` (which covers it whole): not "a view of `a`".
    assert re.search(r"view of\s+an unnamed tensor of shape \(12,\) \(the `_base`\); shares the storage of `a`",
                     text)
    assert "`a`, a tensor of shape" not in text
    assert re.search(r"autograd\s+requires_grad=False is_leaf=True", text)
    # The storage strip: a's 12 floats in rows of 4, numbered in the order `t` reads them.
    assert "storage 12 × float32 (48 B) in rows of 4" in text
    assert re.search(r"^\s+0\s+3\s+6\s+9$", text, re.M)
    assert re.search(r"^\s+2\s+5\s+8\s+11$", text, re.M)
    assert page.startswith("<pre") and page.endswith("</pre>")
    assert "(1, 4)" in page and "rows of 4" in page and "<span style=" in page
    assert "`a`" in page
    # Same side-effect rules as at a breakpoint.
    assert kernel.value("len(Out)") == out_len
    assert kernel.value("(a._version, t._version)") == version
    assert _user_names(kernel) == names


def test_card_of_a_graph_tensor_with_stats(kernel: Kernel) -> None:
    kernel.ok("w = torch.ones(3, 3, requires_grad=True)\ny = (w * 2).sum()")
    cell = kernel.ok("%stridelens --stats y  # a comment is no part of the expression")
    text = cell.displays[0]["text/plain"]
    assert text.startswith("y  (Tensor)")
    assert re.search(r"grad_fn\s+SumBackward0 → MulBackward0", text)
    assert re.search(r"values\s+nan=0, inf=0, min=18, max=18, mean=18", text)


def test_not_a_tensor_and_raising_expression(kernel: Kernel) -> None:
    assert _one_line_error(kernel.run("%stridelens 3")) == \
        "stridelens: not a tensor: the expression is a builtins.int"
    assert _one_line_error(kernel.run("%stridelens a.shape")) == \
        "stridelens: not a tensor: the expression is a torch.Size"
    assert _one_line_error(kernel.run("%stridelens 1 / 0")) == \
        "stridelens: the expression raised ZeroDivisionError: division by zero"
    assert _one_line_error(kernel.run("%stridelens undefined_name")) == \
        "stridelens: the expression raised NameError: name 'undefined_name' is not defined"
    assert "not a Python expression" in _one_line_error(kernel.run("%stridelens a["))
    assert _one_line_error(kernel.run("%stridelens")).startswith("stridelens: usage: %stridelens EXPR")
    assert _one_line_error(kernel.run("%stridelens grads a")) == \
        "stridelens: a is a torch.Tensor, not a torch.nn.Module"
    assert "--top needs a whole number" in _one_line_error(kernel.run("%stridelens memory --top many"))
    assert "display takes on or off" in _one_line_error(kernel.run("%stridelens display maybe"))


# ---------------------------------------------------------------- the memory report


def test_memory_names_output_cache_and_losses(kernel: Kernel) -> None:
    kernel.ok("kept = torch.zeros(512, 1024)  # 2 MiB, named")
    named = kernel.ok("kept")  # Out holds it too, but so does `kept`: no finding
    lost = kernel.ok("torch.zeros(1024, 1024)")  # 4 MiB only the output cache holds
    kernel.ok("model = torch.nn.Linear(64, 64)\n"
              "losses = []\n"
              "for _step in range(4):\n"
              "    losses.append(model(torch.randn(32, 64)).pow(2).mean())")
    cell = kernel.ok("%stridelens memory --top 5  # the five largest storages")
    assert cell.result is None
    [bundle] = cell.displays
    text, page = bundle["text/plain"], bundle["text/html"]
    flat = " ".join(text.split())
    assert f"output_cache: Out[{lost.count}] (also _, _{lost.count}) keeps 4.0 MiB of cpu storage alive" in flat
    assert f"Out[{named.count}]" not in flat.split("Findings", 1)[1]
    assert "graph_kept_alive: losses (list of 4) keeps 4 autograd graphs alive" in flat
    assert re.search(rf"4\.0 MiB\s+cpu\s+4\.0 MiB\s+`Out\[{lost.count}\]`", text)
    assert re.search(r"2\.0 MiB\s+cpu\s+2\.0 MiB\s+`kept`", text)
    assert f"Out[{lost.count}]" in page and "losses" in page and "graph_kept_alive" in page
    # Cleared cache: the finding goes, but IPython's hidden `_` still holds the last result.
    kernel.ok("%reset -f out")
    after = " ".join(kernel.ok("%stridelens memory").displays[0]["text/plain"].split())
    assert f"Out[{lost.count}]" not in after
    assert ("output_cache: user_ns_hidden['_'] keeps 4.0 MiB of cpu storage alive that no variable "
            "refers to") in after
    assert "get_ipython().user_ns_hidden.pop('_')" in after
    assert "losses (list of 4)" in after
    kernel.ok("get_ipython().user_ns_hidden.pop('_')")
    assert "output_cache" not in kernel.ok("%stridelens memory").displays[0]["text/plain"]


def test_a_small_view_in_the_cache_pins_its_base(kernel: Kernel) -> None:
    kernel.ok("big = torch.zeros(2048, 1024)")
    row = kernel.ok("big[:2]")
    kernel.ok("del big")
    flat = " ".join(kernel.ok("%stridelens memory").displays[0]["text/plain"].split())
    # (`_` itself is no longer updated after the `%reset -f out` above: an IPython quirk.)
    assert re.search(rf"output_cache: Out\[{row.count}\] \(also [^)]*_{row.count}\) keeps 8\.0 MiB of cpu "
                     "storage alive", flat)
    assert "view_pins_storage" not in flat  # one finding for one storage
    kernel.ok("%reset -f out")


def test_reports_keep_no_reference(kernel: Kernel) -> None:
    kernel.ok("import weakref\n"
              "probe_me = torch.zeros(1024, 512).t()\n"
              "ref = weakref.ref(probe_me)\n"
              "base_ref = weakref.ref(probe_me._base)")
    kernel.ok("%stridelens probe_me")
    kernel.ok("%stridelens memory")
    kernel.ok("%stridelens display on\nprint(get_ipython().display_formatter.format(probe_me)[0]['text/plain'][-30:])")
    kernel.ok("%stridelens display off")
    kernel.ok("del probe_me")
    # Freed by reference counting alone: nothing (no cycle, no cache) kept the view or its base.
    assert kernel.value("(ref(), base_ref())") == "(None, None)"


# ---------------------------------------------------------------- gradient health


def test_grads_of_a_model_name_the_collapse_and_the_detached_branch(kernel: Kernel) -> None:
    fixture = (REPO / "tests" / "fixtures" / "grads" / "vanishing.py").read_text()
    kernel.ok(fixture.replace("import torch\n", "").split("done = True")[0])  # torch is imported
    names = _user_names(kernel)
    grads = kernel.value("[None if p.grad is None else p.grad._version for p in model.parameters()]")
    cell = kernel.ok("%stridelens grads model  # after loss.backward()")
    assert cell.result is None
    [bundle] = cell.displays
    text, page = bundle["text/plain"], bundle["text/html"]
    flat = " ".join(text.split())
    assert "Gradient health" in text and re.search(r"model\.4\.weight\s+\(16, 16\)", text)
    assert "gradients collapse at model.4" in flat
    assert "proj" not in flat  # only the module asked for
    assert "1 module (model)" in flat
    assert "<pre" in page and "collapses here" in page and "model.4.weight" in page
    # All modules: the detached projection has no grad, not in the graph of `loss`.
    every = " ".join(kernel.ok("%stridelens grads").displays[0]["text/plain"].split())
    # (the first three of the notebook's graph roots are named: `y` and `losses` of earlier cells)
    assert "grad is None for 2 parameters (proj.weight, proj.bias): not in the graph of `y`" in every
    assert "2 modules (model, proj)" in every
    # Read only: no grad changed, no name left, grad mode as it was.
    assert kernel.value("[None if p.grad is None else p.grad._version for p in model.parameters()]") == grads
    assert _user_names(kernel) == names
    assert kernel.value("torch.is_grad_enabled()") == "True"
    assert _one_line_error(kernel.run("%stridelens grads torch.nn.ReLU()")) == \
        "stridelens: torch.nn.ReLU() has no parameters"


# ---------------------------------------------------------------- the display hook


def test_display_hook_on_and_off(kernel: Kernel) -> None:
    summary = "tensor[4, 3] f32 strides (1, 4) non-contiguous view of an unnamed tensor, shares the storage of a"
    before = kernel.ok("t")
    assert before.result is not None and summary not in before.result["text/plain"]
    assert "text/html" not in before.result
    kernel.ok("%stridelens display on")
    on = kernel.ok("t")
    assert on.result is not None
    assert on.result["text/plain"].startswith("tensor([[ 0.,  4.,  8.],")
    assert on.result["text/plain"].endswith("\n" + summary)
    assert summary in on.result["text/html"] and "<pre" in on.result["text/html"]
    plain = kernel.ok("a")
    assert plain.result is not None
    assert plain.result["text/plain"].endswith("\ntensor[3, 4] f32 strides (4, 1) view of an unnamed tensor")
    graph = kernel.ok("torch.ones(2, requires_grad=True) * 3")
    assert graph.result is not None
    assert graph.result["text/plain"].endswith("\ntensor[2] f32 strides (1,) grad_fn=MulBackward0")
    inner = kernel.ok("[t]")  # inside a container: no summary line per element
    assert inner.result is not None and "strides" not in inner.result["text/plain"]
    kernel.ok("%stridelens display off")
    off = kernel.ok("t")
    assert off.result is not None and summary not in off.result["text/plain"]
    assert "text/html" not in off.result
    kernel.ok("%reset -f out")


def test_unload_removes_the_magic(kernel: Kernel) -> None:
    kernel.ok("%stridelens display on")
    kernel.ok("%unload_ext stridelens")
    cell = kernel.run("%stridelens t")
    assert cell.status == "error" and "Line magic function `%stridelens` not found" in cell.stderr
    off = kernel.ok("t")
    assert off.result is not None and "strides" not in off.result["text/plain"]
    kernel.ok("%load_ext stridelens")


# ---------------------------------------------------------------- a kernel without torch


def test_kernel_without_torch(kernel_without_torch: Kernel) -> None:
    k = kernel_without_torch
    assert "ModuleNotFoundError" in (k.run("import torch").error or "")  # the honest premise
    k.ok("%load_ext stridelens")
    k.ok("x = [1, 2, 3]")
    for line in ("%stridelens x", "%stridelens memory", "%stridelens grads"):
        message = _one_line_error(k.run(line))
        assert message.startswith("stridelens: no torch in this kernel: its Python (")
        assert message.endswith(") cannot import torch")
    k.ok("%stridelens display on")  # nothing to format, nothing breaks
    assert k.ok("x").result == {"text/plain": "[1, 2, 3]"}
