"""The in-place recorder, in this process: torch's behaviour is unchanged while it records,
and its diagnosis names the lines of the ops written here (found by their markers)."""

from __future__ import annotations

import gc
import inspect
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from stridelens.inspector import inplace_recorder as recorder


@pytest.fixture
def recording() -> Iterator[Any]:
    recorder.install()
    try:
        yield recorder
    finally:
        recorder.uninstall()
    assert _get_current_dispatch_mode() is None
    gc.collect()  # the caught errors' tracebacks hold graphs in cycles: leave no garbage behind


def line_of(fn: Any, marker: str) -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if marker in s)


def sigmoid_then_scale(x: torch.Tensor) -> torch.Tensor:
    y = torch.sigmoid(x)  # saves
    y.mul_(2)  # bumps
    return y


def backward_error(fn: Any, *args: Any) -> tuple[RuntimeError, torch.Tensor]:
    loss = fn(*args).sum()
    with pytest.raises(RuntimeError) as e:
        loss.backward()
    return e.value, loss


def test_torch_raises_the_same_error_while_recording(recording: Any) -> None:
    x = torch.randn(3, 5, requires_grad=True)
    err, _ = backward_error(sigmoid_then_scale, x)
    recording.uninstall()
    plain, _ = backward_error(sigmoid_then_scale, x)
    assert str(err) == str(plain)


def test_gradients_unchanged_while_recording(recording: Any) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(inplace=True), torch.nn.Linear(6, 1))
    x = torch.randn(4, 6)
    model(x).sum().backward()
    recorded = [p.grad.clone() for p in model.parameters()]
    recording.uninstall()
    model.zero_grad()
    model(x).sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(recorded, model.parameters(), strict=True))


def test_diagnosis_names_both_lines_and_keeps_the_error(recording: Any) -> None:
    x = torch.randn(3, 5, requires_grad=True)
    err, loss = backward_error(sigmoid_then_scale, x)
    d = recording.diagnose(err, {"t_outputs": (loss,)})
    assert d["saved_by"]["node"] == "SigmoidBackward0"
    assert d["saved_by"]["location"]["line"] == line_of(sigmoid_then_scale, "# saves")
    assert [m["location"]["line"] for m in d["modified_by"]] == [line_of(sigmoid_then_scale, "# bumps")]
    assert (d["expected_version"], d["actual_version"]) == (0, 1) and d["tensor"]["shape"] == [3, 5]
    # Taking the saved tensor hooked that one SavedTensor: reading it still raises torch's words.
    sigmoid_node = loss.grad_fn.next_functions[0][0].next_functions[0][0]
    assert sigmoid_node.name() == "SigmoidBackward0"
    with pytest.raises(RuntimeError) as again:
        sigmoid_node._saved_result  # noqa: B018 -- reading it is the test
    assert str(again.value) == str(err)


def test_optimizer_step_between_forward_and_backward(recording: Any) -> None:
    # The GAN-style mistake: the step updates a weight another graph saved.
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(2, 4, requires_grad=True)

    def run() -> RuntimeError:
        loss = (lin(x) ** 2).sum()
        loss.backward(retain_graph=True)
        opt.step()  # bumps
        with pytest.raises(RuntimeError) as e:
            loss.backward()
        recording_result.append(recording.diagnose(e.value, {"t_outputs": (loss,)}))
        return e.value

    recording_result: list[dict[str, Any]] = []
    run()
    d = recording_result[0]
    assert d["saved_by"]["node"] in {"AddmmBackward0", "TBackward0", "MmBackward0"}
    assert d["modified_by"] and d["modified_by"][0]["location"]["line"] == line_of(run, "# bumps")


def test_other_errors_are_not_explained(recording: Any) -> None:
    d = recording.diagnose(RuntimeError("shape '[3]' is invalid for input of size 2"), {})
    assert d["match"] is False and d["exception"] == "RuntimeError"
    assert recording.diagnose(ValueError("x"), {})["match"] is False
