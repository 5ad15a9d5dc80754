"""Layout rules: views, copies and strides (SL101–SL104)."""

from __future__ import annotations

import ast
import re

from stridelens.i18n import tr
from stridelens.server.analysis import Analysis, TensorFact
from stridelens.server.analysis.facts import format_sizes
from stridelens.server.analysis.values import ModuleValue, TorchRef
from stridelens.server.rules import register
from stridelens.server.rules._helpers import (
    append_edit,
    attr_name_range,
    call_from_attr_range,
    dot_attr_range,
    enclosing,
    index_of,
    insert_at,
    is_inplace_method,
    make_finding,
    node_range,
    replace_range,
    segment,
    short,
    stores_name,
    walk,
    walk_statements,
)
from stridelens.server.rules.base import Finding, Fix, Rule, RuleDoc, Severity


def _call_at_event(analysis: Analysis, line: int, col: int, end_line: int, end_col: int, name: str) -> ast.Call | None:
    for call in index_of(analysis).by_name.get(name, ()):
        if (call.lineno, call.col_offset, call.end_lineno, call.end_col_offset) == (line, col, end_line, end_col):
            return call
    return None


# ----------------------------------------------------------------------------- SL101
def check_view_noncontiguous(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for event in analysis.events:
        if event.kind != "view-incompatible":
            continue
        call = _call_at_event(analysis, event.line, event.col, event.end_line, event.end_col, "view")
        if call is None or not isinstance(call.func, ast.Attribute):
            continue
        receiver = analysis.fact_of(call.func.value)
        layout = ""
        if receiver is not None and receiver.full_display_shape is not None and receiver.display_strides is not None:
            shape = format_sizes(receiver.full_display_shape, pretty=False)
            strides = format_sizes(receiver.display_strides, pretty=False)
            layout = tr(" (shape {shape}, strides {strides})").format(shape=shape, strides=strides)
        # Over symbolic sizes: for which sizes it does not raise, and what it assumed.
        sizes = tr("; this holds for every size{conditions}").format(conditions=event.detail) if event.detail else (
            tr("; this holds for every size") if receiver is not None and receiver.shape is None else ""
        )
        fix = Fix(
            tr("Replace `.view(` with `.reshape(`"),
            (replace_range(attr_name_range(analysis, call.func), "reshape"),),
        )
        message = tr(
            "`.view()` raises here: `{tensor}` is not contiguous{layout} and this shape cannot be "
            "viewed from its strides{sizes}; use `.reshape()` (copies) or `.contiguous().view()`"
        ).format(tensor=short(segment(analysis, call.func.value)), layout=layout, sizes=sizes)
        out.append(make_finding(analysis, SL101, call_from_attr_range(analysis, call), message, fix))
    return out


SL101 = register(
    Rule(
        code="SL101",
        name="view-noncontiguous",
        severity=Severity.ERROR,
        summary="`.view()` on a layout that cannot be viewed to that shape (raises at run time)",
        doc=RuleDoc(
            what="Flags a `.view(...)` whose input layout (shape and strides) cannot be viewed "
            "to the requested shape. The verdict is torch's own: the op is replayed on a meta "
            "tensor with the exact layout, and the rule fires only when that replay raises. "
            "Where the file does not spell out its sizes (`B, T, C = x.shape`, `self.n_head`, "
            "a layer's output), the verdict comes from a stride algebra over those sizes that "
            "follows torch's own `view` rule: the rule fires when the view raises for every "
            "size >= 2, and the message names the sizes that would make it legal (`unless T == "
            "1`) and what it assumed (a parameter being contiguous). Where even the rank is "
            "unknown, it stays silent.",
            why="`view` never copies: it needs the new shape to be expressible with strides over "
            "the same memory. After `transpose`/`permute` that is often impossible and the line "
            "raises `RuntimeError: view size is not compatible with input tensor's size and "
            "stride` at run time. Many permute-then-view forms are fine (splitting a dim, merging "
            "dims still adjacent in memory), so this is decided from strides, never from syntax.",
            example="x = torch.randn(2, 3, 4)\ny = x.transpose(0, 1).view(-1)  # SL101: raises\n"
            "z = x.permute(2, 0, 1).view(4, 6)  # fine: dims 0 and 1 stay adjacent",
            fix="Use `.reshape(...)` (it copies only when it has to), or `.contiguous().view(...)` "
            "to make the copy explicit. The quick fix replaces `view` with `reshape`.",
        ),
        check=check_view_noncontiguous,
        safe_fix=True,
    )
)


# ----------------------------------------------------------------------------- SL102
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


def _receiver_kind(analysis: Analysis, call: ast.Call) -> str | None:
    value = analysis.values.get(call.func)
    if isinstance(value, ModuleValue) and value.name in CONV_LIKE_MODULES:
        return value.name
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
    unless = sorted({t.replace(" != ", " == ") for t in named if " != " in t and t not in prose})
    assumed = sorted({t for t in named if " != " not in t or t in prose})
    detail = ""
    if unless:
        detail += tr(" unless {conditions}").format(conditions=tr(" or ").join(f"`{u}`" for u in unless))
    if assumed:
        listed = tr(", ").join(a if a in prose else f"`{a}`" for a in assumed)
        detail += tr(" (assuming {assumptions})").format(assumptions=listed)
    return detail, False


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
            "permute that only moves size-1 dims.",
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


# ----------------------------------------------------------------------------- SL103
_RESHAPES = ("reshape", "reshape_as")


def check_reshape_copies(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for event in analysis.events:
        if event.kind != "reshape-copies":
            continue
        call = None
        for name in _RESHAPES:
            call = _call_at_event(analysis, event.line, event.col, event.end_line, event.end_col, name)
            if call is not None:
                break
        if call is None:
            continue
        size = (
            tr("{nbytes} bytes").format(nbytes=f"{event.nbytes:,}")
            if event.nbytes is not None
            else tr("an unknown number of bytes")
        )
        if isinstance(call.func, ast.Attribute) and analysis.fact_of(call.func.value) is not None:
            where = call_from_attr_range(analysis, call)
            line, col, _, _ = dot_attr_range(analysis, call.func)
            edits = [insert_at(line, col, ".contiguous()")]
            subject = segment(analysis, call.func.value)
        elif call.args:  # torch.reshape(x, shape)
            where = node_range(analysis, call)
            edits = append_edit(analysis, call.args[0], ".contiguous()")
            subject = segment(analysis, call.args[0])
        else:
            continue
        sizes = tr(" (for every size{conditions})").format(conditions=event.detail) if event.detail else ""
        message = tr(
            "`reshape` copies {size} here: `{tensor}` is not contiguous, so no view is "
            "possible{sizes}; make the copy explicit with `.contiguous()`"
        ).format(size=size, tensor=short(subject), sizes=sizes)
        fix = Fix(tr("Make the copy explicit with `.contiguous()`"), tuple(edits))
        out.append(make_finding(analysis, SL103, where, message, fix))
    return out


SL103 = register(
    Rule(
        code="SL103",
        name="reshape-copies",
        severity=Severity.HINT,
        summary="`.reshape()` on a known non-contiguous tensor where it really copies",
        doc=RuleDoc(
            what="Flags a `.reshape(...)` (or `torch.reshape`, `.reshape_as`) that really copies: "
            "the replay on a meta tensor with the exact layout returned a new storage, not a "
            "view. The message says how many bytes are copied.",
            why="`reshape` silently falls back to a copy when the layout cannot be viewed. In a "
            "hot loop that is an allocation plus a full read and write of the tensor every "
            "time, and later in-place writes to the result no longer reach the original.",
            example="x = torch.randn(64, 128, 128).transpose(1, 2)\ny = x.reshape(64, -1)  # SL103: copies 4.2 MB",
            fix="Make the copy explicit: `x.contiguous().reshape(...)` (the quick fix), or change "
            "the layout upstream so no copy is needed.",
        ),
        check=check_reshape_copies,
        safe_fix=True,
    )
)


# ----------------------------------------------------------------------------- SL104
def _write_target(stmt: ast.stmt) -> tuple[ast.Name, ast.AST] | None:
    """The named tensor written in place by `stmt`, and the node to report."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if (
            isinstance(func, ast.Attribute)
            and is_inplace_method(func.attr)
            and isinstance(func.value, ast.Name)
        ):
            return func.value, stmt.value
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target, stmt
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Subscript):
        if isinstance(stmt.target.value, ast.Name):
            return stmt.target.value, stmt
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        if isinstance(stmt.targets[0].value, ast.Name):
            return stmt.targets[0].value, stmt
    return None


def check_write_through_view(analysis: Analysis) -> list[Finding]:
    out: list[Finding] = []
    index = index_of(analysis)
    scopes: set[ast.AST | None] = set()
    for node, value in analysis.values.items():
        if isinstance(node, ast.Name) and isinstance(value, TensorFact) and value.view_of and value.view_of != node.id:
            scopes.add(enclosing(index, node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    if not scopes:
        return out
    bodies = [fn.body for fn in index.functions if fn in scopes]
    if None in scopes:
        bodies.append(analysis.tree.body)
    for body in bodies:
        statements = list(walk_statements(body))
        last_fact: dict[str, TensorFact] = {}
        aliases: set[str] = set()  # names last bound by `a = b`: not a view, the tensor itself
        for i, stmt in enumerate(statements):
            write = _write_target(stmt)
            if write is not None:
                name, report = write
                fact = last_fact.get(name.id)
                base = fact.view_of if fact is not None and fact.is_view is not False else None
                if fact is not None and base and base != name.id:
                    reader = _later_read(statements[i + 1 :], base, name.id)
                    if reader is not None:
                        what = (
                            tr("the same tensor as `{base}`") if name.id in aliases else tr("a view of `{base}`")
                        ).format(base=base)
                        message = tr(
                            "in-place write through `{name}`, {what}: it also changes "
                            "`{base}`, which is read afterwards (line {line})"
                        ).format(name=name.id, what=what, base=base, line=reader)
                        out.append(make_finding(analysis, SL104, node_range(analysis, report), message))
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        if isinstance(stmt.value, ast.Name):
                            aliases.add(target.id)
                        else:
                            aliases.discard(target.id)
                        fact = analysis.fact_of(target)
                        if fact is not None:
                            last_fact[target.id] = fact
                        else:
                            last_fact.pop(target.id, None)
    return out


def _later_read(statements: list[ast.stmt], base: str, view: str) -> int | None:
    for stmt in statements:
        if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)):
            continue  # their bodies are visited as statements of their own
        for node in walk(stmt):
            if isinstance(node, ast.Name) and node.id == base and isinstance(node.ctx, ast.Load):
                return stmt.lineno
        if stores_name(stmt, base) or stores_name(stmt, view):
            return None
    return None


SL104 = register(
    Rule(
        code="SL104",
        name="write-through-view",
        severity=Severity.INFORMATION,
        summary="in-place write through a named view whose base is read afterwards",
        doc=RuleDoc(
            what="Flags an in-place write (`v.add_(...)`, `v += ...`, `v[i] = ...`) through a "
            "name the analysis knows to be a view of another tensor, when that base tensor is "
            "read later in the same function.",
            why="A view shares its base's storage: writing through it changes the base too. "
            "When the base is read afterwards, that is either intended (then say so) or a "
            "hard-to-see bug where a value changed behind your back.",
            example="x = torch.zeros(4, 4)\nrow = x[0]\nrow += 1  # SL104: also changes x\nprint(x.sum())",
            fix="If the base should not change, `.clone()` the view first. If it should, keep "
            "the code and silence the line with `# noqa: SL104`.",
        ),
        check=check_write_through_view,
    )
)
