"""`inspect --launch SCRIPT --explain-errors` end to end: real debugpy, real torch on CPU.

The oracle is torch itself: each fixture is also run plainly, and the versions and shape in
its own error message must be the ones reported. The lines are marked in the fixtures
(`# saves:` on the op that saved the tensor, `# bumps:` on the in-place op).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from .conftest import REPO, marker_line

pytestmark = pytest.mark.timeout(240)

FIXTURES = REPO / "tests" / "fixtures" / "explain_errors"


def torch_says(script: Path) -> tuple[list[int], int, int]:
    """Shape, actual and expected version from torch's own message, running the script plainly."""
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    m = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\], which is .*? is at version (\d+); expected version (\d+)",
                  out.stdout + out.stderr)
    assert m, out.stderr[-2000:]
    return [int(x) for x in m.group(1).split(", ")], int(m.group(2)), int(m.group(3))


@pytest.mark.parametrize(("name", "saver", "op", "inplace", "names", "rc"), [
    ("sigmoid_scaled.py", "SigmoidBackward0", "sigmoid", "mul_", [], 1),
    # torch's message names the tensor's last producer ("output 0 of Add"); the saver is mul.
    ("residual_add.py", "MulBackward0", "mul", "add_", [], 1),
    ("index_assign.py", "TanhBackward0", "tanh", "fill_", ["h"], 0),  # it catches the error
])
def test_names_the_saving_and_the_inplace_line(inspect_cli: Any, name: str, saver: str, op: str,
                                               inplace: str, names: list[str], rc: int) -> None:
    script = FIXTURES / name
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == rc, r.err  # the script's own exit status
    rep = r.json()
    ex = rep["explain_errors"]
    assert ex["occurred"] is True and ex["recorder"]["mechanism"] == "TorchDispatchMode"
    assert (ex["kind"], ex["rule"]) == ("inplace_saved", "SL213")
    shape, actual, expected = torch_says(script)
    assert (ex["actual_version"], ex["expected_version"]) == (actual, expected)
    assert ex["tensor"]["shape"] == shape
    saved = ex["saved_by"]
    assert saved["node"] == saver and saved["op"] == op
    assert saved["location"]["path"] == str(script)
    assert saved["location"]["line"] == marker_line(script, "# saves:")
    bump = ex["modified_by"][0]
    assert bump["op"] == inplace and bump["version_before"] == expected
    assert bump["location"]["line"] == marker_line(script, "# bumps:")
    assert [n["name"] for n in ex["tensor"]["names"]] == names
    # The stop is the user's line that called backward, not torch's internals.
    assert rep["stop"]["path"] == str(script) and "backward()" in script.read_text().splitlines()[rep["stop"]["line"] - 1]


def test_text_report_and_the_recorder_is_removed(inspect_cli: Any) -> None:
    script = FIXTURES / "index_assign.py"
    r = inspect_cli("--launch", str(script), "--explain-errors")
    assert r.rc == 0, r.err
    rel = script.relative_to(REPO)
    assert f"{rel}:{marker_line(script, '# saves:')} in step" in r.out
    assert f"{rel}:{marker_line(script, '# bumps:')} in step" in r.out
    assert "expected 0, actual 1" in r.out and "bound to: h in <module>" in r.out
    # The script caught the error and went on, without the recorder.
    assert "backward failed: one of the variables" in r.err
    assert "dispatch mode after the report: None" in r.err


def test_clean_script_says_the_error_did_not_occur(inspect_cli: Any) -> None:
    script = FIXTURES / "clean.py"
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == 0, r.err
    ex = r.json()["explain_errors"]
    assert ex["occurred"] is False and ex["finished"] is True and ex["exit_code"] == 0
    assert ex["other_runtime_errors"] == 1  # its caught `view` error was seen and let go
    assert "clean" in r.err  # the script ran to its end
    r = inspect_cli("--launch", str(script), "--explain-errors")
    assert r.rc == 0 and "No error explained: the script finished (exit code 0)" in r.out, r.err
    assert "The last other RuntimeError it raised: shape '[3]' is invalid for input of size 2" in r.out


def test_explain_errors_usage(inspect_cli: Any) -> None:
    script = FIXTURES / "clean.py"
    r = inspect_cli("--connect", "127.0.0.1:1", "--explain-errors")
    assert r.rc == 2 and "needs --launch" in r.err
    r = inspect_cli("--launch", str(script), "--explain-errors", "--break", f"{script}:5", "--memory")
    assert r.rc == 2 and "drop --break, --memory" in r.err


def test_still_running_at_the_timeout(script: Any, inspect_cli: Any) -> None:
    p = script("forever.py", """
        import time
        import torch
        x = torch.ones(3, requires_grad=True)
        while True:
            (x * 2).sum().backward()
            time.sleep(0.05)
    """)
    r = inspect_cli("--launch", str(p), "--explain-errors", "--timeout", "8", "--kill", "--format", "json")
    assert r.rc == 0, r.err
    ex = r.json()["explain_errors"]
    assert ex["occurred"] is False and ex["finished"] is False and ex["waited_s"] == 8


# One script per kind of error the static rules know; each marks the line that raises
# (`# raises:`) and the line that caused it (`# cause:`; for the in-place kind `# bumps:`).
KINDS = [
    # (script, kind, rule, the title's words, the cause's label in the text)
    ("view_transposed.py", "view_noncontiguous", "SL101", "view() of a non-contiguous tensor", "made non-contiguous by"),
    ("carried_state.py", "backward_twice", "SL203", "Backward through a graph an earlier backward freed", "saved by"),
    ("residual_add.py", "inplace_saved", "SL213", "In-place modification of a tensor autograd saved", "modified by"),
    ("device_noise.py", "device_mismatch", "SL214", "Tensors on different devices in one op", "made"),
    ("linear_features.py", "shape_mismatch", None, "Shapes that do not fit", "made"),
]


def plain_error(script: Path) -> str:
    """torch's own message, running the script without stridelens (the oracle)."""
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-2000:]
    return out.stderr.strip().splitlines()[-1].removeprefix("RuntimeError: ")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)  # lines wrap where the terminal ends


@pytest.mark.parametrize(("name", "kind", "rule", "title", "label"), KINDS)
def test_each_kind_names_the_line_that_raised_and_the_line_that_caused_it(
        inspect_cli: Any, name: str, kind: str, rule: str | None, title: str, label: str) -> None:
    script = FIXTURES / name
    rel = script.relative_to(REPO)
    raised = marker_line(script, "# raises:" if kind != "inplace_saved" else "loss.backward()")
    cause = marker_line(script, "# cause:" if kind != "inplace_saved" else "# bumps:")
    said = plain_error(script)
    r = inspect_cli("--launch", str(script), "--explain-errors")
    assert r.rc == 1, r.err  # the script's own exit status: the error ended it
    out = _flat(r.out)
    assert title in out and (rule is None or f"({rule} " in out)
    assert f"raised at {rel}:{raised} in" in out or f"raised at {_op(kind)} at {rel}:{raised} in" in out, out
    assert re.search(rf"{re.escape(label)} .*{re.escape(f'{rel}:{cause} in')}", out), out
    assert "fix " in out and said.split(" (")[0][:60] in out
    # The traceback shown, the report's and the one the dying script prints, is the script's own.
    assert "Traceback, the script's own frames (most recent call last):" in out
    assert f"{rel}:{raised} in" in out.split("Traceback, the script's own frames")[1]
    assert "Traceback (most recent call last; the script's own frames):" in r.err
    for noise in ("runpy", "debugpy", "pydevd", "stridelens_inplace", "torch/"):
        assert noise not in r.err.split("Traceback (most recent call last; the script's own frames):")[1], noise


def _op(kind: str) -> str:
    return {"view_noncontiguous": "view", "device_mismatch": "add", "shape_mismatch": "addmm"}.get(kind, "")


def test_layout_error_operands_as_torch_had_them(inspect_cli: Any) -> None:
    script = FIXTURES / "view_transposed.py"
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == 1, r.err
    ex = r.json()["explain_errors"]
    assert (ex["occurred"], ex["kind"], ex["rule"]) == (True, "view_noncontiguous", "SL101")
    assert ex["message"] == plain_error(script)
    x = torch.randn(2, 8, 4).transpose(1, 2)  # the oracle: the operand, rebuilt
    (operand,) = ex["operands"]
    assert operand["shape"] == list(x.shape) and operand["strides"] == list(x.stride())
    assert operand["contiguous"] is False and operand["device"] == "cpu"
    assert [n["name"] for n in operand["names"] if n["same_window"]] == ["x"]
    assert ex["op"]["op"] == "view" and ex["op"]["location"]["line"] == marker_line(script, "# raises:")
    cause = operand["made_noncontiguous_by"]
    assert cause["op"] == "transpose" and cause["location"]["line"] == marker_line(script, "# cause:")
    assert ex["raised_at"]["line"] == marker_line(script, "# raises:") and ex["raised_at"]["function"] == "forward"
    assert [f["function"] for f in ex["traceback"]] == ["<module>", "forward"]


def test_device_and_shape_errors_name_the_operands_and_the_layer(inspect_cli: Any) -> None:
    script = FIXTURES / "device_noise.py"
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == 1, r.err
    ex = r.json()["explain_errors"]
    assert ex["kind"] == "device_mismatch" and ex["message"] == plain_error(script)
    by_device = {o["device"]: o for o in ex["operands"]}
    assert set(by_device) == {"meta", "cpu"}
    noise = by_device["cpu"]
    assert [n["name"] for n in noise["names"]] == ["noise"]
    assert noise["origin"]["how"] == "made" and noise["origin"]["op"] == "randn"
    assert noise["origin"]["location"]["line"] == marker_line(script, "# cause:")

    script = FIXTURES / "linear_features.py"
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == 1, r.err
    ex = r.json()["explain_errors"]
    assert ex["kind"] == "shape_mismatch" and ex["message"] == plain_error(script)
    assert ex["module"]["name"] == "model.fc" and ex["module"]["type"] == "Linear"
    fc = torch.nn.Linear(8 * 8 * 8, 10)  # the oracle: the layer's weight as the op took it
    ops = {o["arg"]: o for o in ex["operands"]}
    assert ops["mat1"]["shape"] == [2, 128] and ops["mat2"]["shape"] == list(fc.weight.t().shape)
    assert ops["mat2"]["strides"] == list(fc.weight.t().stride())
    assert [n["name"] for n in ops["mat2"]["names"]] == ["model.fc.weight"]
    assert ops["mat2"]["origin"]["location"]["line"] == marker_line(script, "# cause:")
