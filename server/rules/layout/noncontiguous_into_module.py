"""SL102 noncontiguous-into-module: a permuted/transposed tensor passed straight into a conv-like layer."""

from __future__ import annotations

import ast
import re

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.layouts import Layout, Undecided, is_contiguous
from stridelens.server.analysis.values import ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity
from stridelens.server.rules.shared.ast_index import (
    index_of,
)
from stridelens.server.rules.shared.edits import (
    append_edit,
    make_finding,
    node_range,
    segment,
    short,
)

CONV_LIKE_MODULES = frozenset(
    {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Linear"}
)
CONV_LIKE_FUNCTIONS = frozenset(
    {
        "torch.nn.functional.conv1d", "torch.nn.functional.conv2d", "torch.nn.functional.conv3d",
        "torch.nn.functional.conv_transpose1d", "torch.nn.functional.conv_transpose2d",
        "torch.nn.functional.conv_transpose3d", "torch.nn.functional.linear", "torch.conv1d",
        "torch.conv2d", "torch.conv3d",
    }
)  # fmt: skip
# Permutes that produce channels_last memory from NHWC / NDHWC data: convs consume those natively.
_CHANNELS_LAST_PERMUTES = frozenset({"permute(0, 3, 1, 2)", "permute(0, 4, 1, 2, 3)"})


def _is_channels_last(fact: TensorFact) -> bool:
    if fact.permuted_by is not None and " ".join(fact.permuted_by.split()) in _CHANNELS_LAST_PERMUTES:
        return True
    shape, strides = fact.shape, fact.strides
    if shape is None or strides is None or len(shape) not in (4, 5):
        return False
    c = shape[1]
    spatial = shape[2:]
    expected = [0] * len(shape)
    expected[1] = 1
    step = c
    for i in range(len(shape) - 1, 1, -1):
        expected[i] = step
        step *= shape[i]
    expected[0] = step
    return all(s == e or n == 1 for s, e, n in zip(strides, expected, shape, strict=False)) and bool(spatial)


# A conv's `padding_mode` whose padding copies the input into a new dense tensor first
# (`F.pad(x, mode="circular")` reads any layout): the conv then gets that copy, so no hidden
# `.contiguous()` copy of `x` is made and an explicit one would add one (torch 2.13 profiler:
# 3 copies without it, a clone and 4 with it). "reflect" and "replicate" call
# `.contiguous()` on the input like "zeros".
_PADDING_COPIES = frozenset({"circular"})


def _copies_before_conv(module: ModuleValue) -> bool | None:
    """Whether the module's padding copies its input first; None when the mode is not known."""
    if module.name == "Linear":
        return False
    if len(module.args) > 8:
        return None  # padding_mode given by position
    mode = module.kwargs.get("padding_mode")
    if mode is None:
        return False
    value = getattr(mode, "value", None)
    return value in _PADDING_COPIES if isinstance(value, str) else None


def _receiver_kind(analysis: Analysis, call: ast.Call) -> str | None:
    value = analysis.values.get(call.func)
    if isinstance(value, ModuleValue) and value.name in CONV_LIKE_MODULES:
        # Only where the conv itself copies the input: a padding that copies first, or one
        # not known, is no proof.
        return value.name if _copies_before_conv(value) is False else None
    if isinstance(value, TorchRef) and value.path in CONV_LIKE_FUNCTIONS:
        return value.path.rsplit(".", 1)[-1]
    return None


_IS_CONTIGUOUS = ".is_contiguous()"
_STARTS_AT_ZERO = ".storage_offset() == 0"
_LITERALS_DIFFER = re.compile(r"-?\d+ != -?\d+")


def _noncontiguity_conditions(fact: TensorFact) -> tuple[str, bool] | None:
    """Whether the engine proved `fact` non-contiguous, and under what: `(detail, unconditional)`,
    `detail` the conditions in the user's names (`" unless `T == 1` (assuming ...)"`, empty
    when there are none); None when it is not proven (unknown, contiguous, or a symbolic
    verdict whose conditions cannot all be written here)."""
    if fact.contiguous is not False:
        return None
    if fact.meta is not None or not fact.assumes:
        return "", True  # replayed with the exact layout, or true for every size
    text = fact.layout_text
    # Where a parameter's layout starts does not change whether it is contiguous.
    named = [t for t in (text.assumes if text is not None else ()) if not t.endswith(_STARTS_AT_ZERO)]
    prose: set[str] = set()  # assumptions in words (no backticks around them)
    if text is None or not text.layout_ok:
        # Some condition has no name at this line. Each size condition renders to one text;
        # if fewer are written than there are, one of them is unwritten: say nothing.
        sizes = [c for c in fact.assumes if c.kind != "contiguous"]
        if len([t for t in named if not t.endswith(_IS_CONTIGUOUS)]) < len(sizes):
            return None
        # A parameter taken as contiguous, since rebound (`x = x.transpose(1, 2)`): by its name.
        for cond in fact.assumes:
            if cond.kind != "contiguous":
                continue
            if not cond.tensor_name:
                return None
            if f"{cond.tensor_name}{_IS_CONTIGUOUS}" not in named:
                words = tr("the argument `{name}` is contiguous").format(name=cond.tensor_name)
                prose.add(words)
                named.append(words)
    # `16 != 1` (a size proven equal to a literal) always holds: nothing to say; `1 != 1`
    # never does: then the verdict is not one.
    literal = [t for t in named if _LITERALS_DIFFER.fullmatch(t)]
    if any(int(t.split()[0]) == int(t.split()[2]) for t in literal):
        return None
    named = [t for t in named if t not in literal]
    # `b * n != 1` may be what the strides are stated under without being a way out: a
    # condition is an exception only if that size being 1 can make the tensor contiguous.
    named = [t for t in named if not _no_way_out(fact, text.shape if text is not None else None, t)]
    unless = sorted({t.replace(" != ", " == ") for t in named if " != " in t and t not in prose})
    assumed = sorted({t for t in named if " != " not in t or t in prose})
    detail = ""
    if unless:
        detail += tr(" unless {conditions}").format(conditions=tr(" or ").join(f"`{u}`" for u in unless))
    if assumed:
        listed = tr(", ").join(a if a in prose else f"`{a}`" for a in assumed)
        detail += tr(" (assuming {assumptions})").format(assumptions=listed)
    return detail, False


def _no_way_out(fact: TensorFact, shape: tuple[int | str | None, ...] | None, condition: str) -> bool:
    """Whether `condition` (`"E != 1"`, E a size of the tensor's shape as written) is proven
    not to matter for contiguity: with that size 1 and every other size generic (>= 2), the
    symbolic layout is still not contiguous. False when that cannot be told (kept)."""
    layout = fact.sym
    size_text, _, one = condition.partition(" != ")
    if one != "1" or shape is None or not isinstance(layout, Layout) or layout.strides is None or len(shape) != layout.ndim:
        return False
    dims = [i for i, entry in enumerate(shape) if str(entry) == size_text]
    if len(dims) != 1:
        return False
    dim = dims[0]
    size = layout.shape[dim]
    values = sz.solve_equal_one(size) if isinstance(size, sz.SymExpr) else None
    at_one = layout.substitute(values) if values else None
    if at_one is None:
        at_one = Layout((*layout.shape[:dim], 1, *layout.shape[dim + 1 :]), layout.strides, layout.offset)
    try:
        return not is_contiguous(at_one)
    except Undecided:
        return False


def check_noncontiguous_into_module(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for call in index_of(analysis).calls:
        if not call.args:
            continue
        kind = _receiver_kind(analysis, call)
        if kind is None:
            continue
        arg = call.args[0]
        fact = analysis.fact_of(arg)
        # Only what the engine proved: a permuted tensor that a copying `reshape`/`flatten`,
        # an elementwise op or a layer made contiguous again (or may have) is no finding.
        if fact is None or fact.permuted_by is None:
            continue
        proof = _noncontiguity_conditions(fact)
        if proof is None or _is_channels_last(fact):
            continue
        conditions, unconditional = proof
        # The copy is safe to make explicit where the layout is proven for every size.
        fix = Fix(
            tr("Append `.contiguous()`"), tuple(append_edit(analysis, arg, ".contiguous()")), proven=unconditional
        )
        message = tr(
            "`{tensor}` is not contiguous (after `{permute}`){conditions} and goes straight into "
            "`{module}`, which makes its own contiguous copy; make the copy explicit with "
            "`.contiguous()` (or keep channels_last layout on purpose)"
        ).format(tensor=short(segment(analysis, arg)), permute=fact.permuted_by, conditions=conditions, module=kind)
        out.append(make_finding(analysis, SL102, node_range(analysis, call), message, fix))
    return out


SL102 = register(
    Rule(
        code="SL102",
        name="noncontiguous-into-module",
        severity=Severity.INFORMATION,
        summary="a permuted/transposed tensor passed straight into a conv-like module or `F.conv*`/`F.linear`",
        doc=RuleDoc(
            what="Flags a call to a convolution (`nn.Conv*d`, `F.conv*d`) or linear layer "
            "(`nn.Linear`, `F.linear`) whose input is a permuted/transposed tensor that the "
            "engine proved non-contiguous, passed inline or through a variable. Over symbolic "
            "sizes the message says under what: the sizes for which it would be contiguous "
            "after all (`unless T == 1`) and what was assumed (a forward input being "
            "contiguous). Where contiguity is not proven it stays silent: a rank nobody states, "
            "a layer's or an unmodelled op's output, or a `reshape`/`flatten`/`contiguous` "
            "that copied the permuted tensor back to a dense layout (timm's "
            "`x.transpose(1, 2).reshape(B, N, C)` before `proj`). NHWC data permuted to "
            "channels_last layout is left alone (convs consume it natively), and so is a "
            "permute that only moves size-1 dims. A conv with `padding_mode=\"circular\"` (or a "
            "mode not known) is silent: its padding builds a new dense tensor from any layout "
            "first, so there is no hidden copy and an explicit one would add one. Only sizes "
            "whose being 1 can make the tensor contiguous are named as exceptions.",
            why="These kernels want a dense layout: a non-contiguous input is copied inside the "
            "call, on every forward, invisibly. Making the copy explicit shows where memory and "
            "time go, and lets you move the `.contiguous()` to where it is cheapest (or drop "
            "the permute altogether).",
            example="x = torch.randn(8, 16, 32).transpose(1, 2)\ny = F.linear(x, w)  # SL102\n"
            "t = torch.randn(8, 4, 16, 32)\nz = F.linear(t.transpose(1, 2).reshape(8, 16, 128), w2)  # fine: the reshape copied",
            fix="Append `.contiguous()` to the argument (the quick fix), or restructure so the "
            "tensor arrives in the layout the layer wants. `check --fix` applies the quick fix "
            "only where the layout is proven for every size (literal sizes); over symbolic "
            "sizes it rests on the stated conditions and is offered as an unsafe fix "
            "(`--unsafe-fixes`).",
        ),
        check=check_noncontiguous_into_module,
        safe_fix=True,
    )
)


