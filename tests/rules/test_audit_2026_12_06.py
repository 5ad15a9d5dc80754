"""The false-positive kinds of the on-by-default rules in the fresh audit of 2026-12-06
(bench/audits/fresh-audit-2026-12-06.md): each snippet is the audited code's shape, analysed
through the real engine; the false-positive form must be silent and the true bug still
flagged. Where the verdict rests on what torch does, the snippet runs for real on CPU."""

from __future__ import annotations

import ast
import textwrap

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules

torch = pytest.importorskip("torch")


def _codes_at(src: str, code: str) -> list[int]:
    analysis = analyze_source(textwrap.dedent(src), "<snippet>")
    return [f.line for f in run_rules(analysis, select=[code]) if f.code == code]


# ------------------------------------------------------------------------ SL216
# p-christ Base_Agent.py: `param` is a `(name, Parameter)` tuple in one method and a parameter
# in another; `param[1]` is the parameter itself, a leaf.
SL216_TWO_METHODS = """\
import torch
from torch import nn

class Agent:
    def freeze_all_but_output_layers(self, network):
        for param in network.named_parameters():
            if "output" not in param[0]:
                param[1].requires_grad = False

    def unfreeze_all_layers(self, network):
        for param in network.parameters():
            param.requires_grad = True

    def freeze_first_row(self, network):
        for param in network.parameters():
            param[0].requires_grad = False
"""


def test_sl216_a_name_is_a_parameter_only_where_its_loop_binds_it() -> None:
    assert _codes_at(SL216_TWO_METHODS, "SL216") == [16]


def test_sl216_the_named_tuple_index_is_the_parameter_and_freezing_it_works() -> None:
    scope: dict[str, object] = {}
    exec(compile(SL216_TWO_METHODS, "<snippet>", "exec"), scope)  # the test's own snippet
    net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    scope["Agent"]().freeze_all_but_output_layers(net)  # type: ignore[operator]
    assert [p.requires_grad for p in net.parameters()] == [False] * 4
    with pytest.raises(RuntimeError, match="leaf variables"):
        scope["Agent"]().freeze_first_row(torch.nn.Linear(2, 2))  # type: ignore[operator]


# ------------------------------------------------------------------------ SL214
# jwyang/faster-rcnn anchor_target_layer.py: a CPU `arange` times `gt_boxes.size(1)` (an int),
# then moved with `.type_as(...)` before it meets a tensor of the input's device.
SL214_SIZES = """\
import torch
from torch import nn

class AnchorTarget(nn.Module):
    def forward(self, gt_boxes, overlaps):
        batch_size = gt_boxes.size(0)
        max_overlaps, argmax_overlaps = torch.max(overlaps, 2)
        offset = torch.arange(0, batch_size) * gt_boxes.size(1)
        width = gt_boxes.shape[1]
        scaled = torch.arange(0, batch_size) * width + len(gt_boxes)
        argmax_overlaps = argmax_overlaps + offset.view(batch_size, 1).type_as(argmax_overlaps)
        return argmax_overlaps, scaled

class Masked(nn.Module):
    def forward(self, x):
        mask = torch.ones(x.shape[0], 1)
        return x * mask
"""


def test_sl214_a_factory_times_the_inputs_size_meets_no_tensor() -> None:
    assert _codes_at(SL214_SIZES, "SL214") == [16]


def test_sl214_the_product_with_a_size_stays_a_cpu_tensor_of_ints() -> None:
    gt_boxes = torch.zeros(2, 5, 5)
    offset = torch.arange(0, 2) * gt_boxes.size(1)
    assert isinstance(gt_boxes.size(1), int) and offset.device.type == "cpu"


# ------------------------------------------------------------------------ SL001
# p-christ results/HRL_Taxi_Experiments.py ends inside a dict: Python reports one error, the
# unclosed `{`; the entries after it are not statements with errors of their own.
TRUNCATED = """\
import torch

config = {}
config.hyperparameters = {
    "h-DQN": {
        "CONTROLLER": {
            "batch_size": 256,
        },
    "HRL": {
        "linear_hidden_units": [10, 5],
    },
"""

TWO_ERRORS = """\
import torch

def load(async):
    return async

x = torch.zeros(3)

def save(async=True):
    return async
"""


def _python_error(src: str) -> int:
    with pytest.raises(SyntaxError) as caught:
        ast.parse(src)
    assert caught.value.lineno is not None
    return caught.value.lineno


def test_sl001_a_bracket_open_to_the_end_is_the_only_error() -> None:
    assert _codes_at(TRUNCATED, "SL001") == [_python_error(TRUNCATED)]


def test_sl001_independent_errors_are_each_reported() -> None:
    lines = _codes_at(TWO_ERRORS, "SL001")
    assert lines[0] == _python_error(TWO_ERRORS) and 8 in lines
