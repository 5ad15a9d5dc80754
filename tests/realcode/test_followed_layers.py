"""Layers called in a loop over a ModuleList of pairs, on vit-pytorch's LeViT (verbatim,
tests/realcode/sources/vitp_levit.py): what the oracle's real runs check is stated there.

* `for attn, ff in self.layers: x = attn(x) + attn_res` (the list built as
  `nn.ModuleList([])` and appended to): the sum requires grad with autograd on;
* the Attention body, called from that loop with a tensor of unknown sizes, keeps the shape
  its own pass states for any input (`q = self.to_q(x)`: the batch is `x.shape[0]`).
"""

from __future__ import annotations

from tests.realcode import compare

NAME = "vitp_levit"


def _answer(line_text: str, name: str) -> dict:
    answers = compare.engine_answers(NAME)
    lines = compare.source_text(NAME).splitlines()
    return next(a for p, a in answers.items() if p.name == name and lines[p.line - 1].strip() == line_text) or {}


def test_a_layer_pair_iterated_from_an_appended_module_list_is_followed() -> None:
    assert _answer("x = attn(x) + attn_res", "x").get("requires_grad") is True


def test_a_body_called_with_a_tensor_of_unknown_sizes_keeps_its_own_shapes() -> None:
    shape = _answer("q = self.to_q(x)", "q").get("shape")
    assert shape is not None and shape[0] == "x.shape[0]", shape


def test_those_facts_hold_in_every_run() -> None:
    assert compare.report_of(NAME).wrong == []
