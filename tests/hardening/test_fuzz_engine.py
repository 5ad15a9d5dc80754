"""Fuzzing the analysis (hypothesis): generated tensor programs and mutated real files.

Properties: no exception escapes; the analysis stops within its budget; every finding and
every fix lies inside the document; a fix of a parseable file still parses; where the
engine states a fact about a generated program that runs, real torch agrees.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules
from stridelens.server.rules.fixes import apply_edits, parses
from tests.analysis.oracle import compare, contradictions, run_for_real, run_for_real_all

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))
CORPUS = [p.read_text(encoding="utf-8") for p in EXAMPLES] + [
    (ROOT / "bench" / "generate_model.py").read_text(encoding="utf-8")
]

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same cases in every CI run; widen by hand with --hypothesis-seed
)

# --------------------------------------------------------------------- generated programs
SIZES = st.one_of(st.integers(0, 5), st.sampled_from([1, 1, 2, 3, 2**40, -1]))
SHAPES = st.lists(SIZES, min_size=0, max_size=4)
FACTORIES = st.sampled_from(["zeros", "ones", "randn", "empty", "rand"])


@st.composite
def op_on(draw: st.DrawFn, name: str) -> str:
    dim = draw(st.integers(-3, 3))
    dim2 = draw(st.integers(-3, 3))
    choice = draw(
        st.sampled_from(
            [
                "t()", "T", "mT", "transpose({d}, {e})", "permute({perm})", "unsqueeze({d})",
                "squeeze()", "flatten()", "reshape(-1)", "view(-1)", "contiguous()", "clone()",
                "detach()", "[1:]", "[:, ::2]", "[..., None]", "[0]", "chunk(2, dim={d})[0]",
                "movedim({d}, {e})", "expand({shape})", "sum({d})", "exp()", "float()",
                "narrow({d}, 0, 1)", "select({d}, 0)", "view({shape})", "reshape({shape})",
                "unflatten({d}, (1, -1))", "diagonal()", "split(1)[0]", "unbind({d})[0]",
                "contiguous(memory_format=torch.channels_last)", "to(torch.float16)",
            ]
        )
    )  # fmt: skip
    perm = ", ".join(str(i) for i in draw(st.permutations(range(draw(st.integers(1, 4))))))
    shape = ", ".join(str(s) for s in draw(st.lists(st.integers(-1, 6), min_size=1, max_size=4)))
    text = choice.format(d=dim, e=dim2, perm=perm, shape=shape)
    sep = "" if text.startswith("[") else "."
    return f"{name}{sep}{text}"


@st.composite
def tensor_program(draw: st.DrawFn) -> str:
    lines = ["import torch", "from torch import nn"]
    names: list[str] = []
    body: list[str] = []
    for i in range(draw(st.integers(1, 8))):
        name = f"v{i}"
        kind = draw(st.integers(0, 4)) if names else 0
        if kind == 0:
            shape = ", ".join(str(s) for s in draw(SHAPES))
            grad = draw(st.sampled_from(["", ", requires_grad=True"]))
            body.append(f"{name} = torch.{draw(FACTORIES)}(({shape}{',' if shape.count(',') == 0 and shape else ''}){grad})")
        elif kind == 1:
            body.append(f"{name} = {draw(op_on(draw(st.sampled_from(names))))}")
        elif kind == 2:
            a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
            body.append(f"{name} = {a} {draw(st.sampled_from(['+', '*', '-', '@']))} {b}")
        elif kind == 3:
            n = draw(st.integers(1, 4))
            body.append(f"layer{i} = nn.Linear({n}, 2)")
            body.append(f"{name} = layer{i}({draw(st.sampled_from(names))})")
        else:
            src = draw(st.sampled_from(names))
            body.append(f"for _ in range(2):\n    {name} = {draw(op_on(src))}")
        names.append(name)
    wrap = draw(st.sampled_from(["module", "function", "class"]))
    if wrap == "module":
        lines += body
    elif wrap == "function":
        lines.append("def run():")
        lines += ["    " + line.replace("\n", "\n    ") for line in body]
        lines.append("run()")
    else:
        lines += ["class Holder:", "    def go(self):"]
        lines += ["        " + line.replace("\n", "\n        ") for line in body]
        lines.append("Holder().go()")
    return "\n".join(lines) + "\n"


def _check_findings_inside(source: str) -> None:
    analysis = analyze_source(source, budget_steps=10_000)
    lines = analysis.lines
    for finding in run_rules(analysis, select=["ALL"]):  # every rule, those off by default too
        assert 1 <= finding.line <= finding.end_line <= max(len(lines), 1), finding
        assert 1 <= finding.col <= len(lines[finding.line - 1]) + 1, finding
        assert finding.end_col <= len(lines[finding.end_line - 1]) + 1, finding
        if finding.fix is not None and parses(source):
            fixed = apply_edits(source, finding.fix.edits)
            assert fixed is None or parses(fixed) or not finding.fix, finding


@FUZZ
@given(tensor_program())
@pytest.mark.timeout(600)
def test_generated_programs_agree_with_torch_where_known(program: str) -> None:
    analysis = analyze_source(program, budget_steps=10_000)
    _check_findings_inside(program)
    if str(2**40) in program:
        return  # analysed above (meta needs no memory); far too big to run for real
    try:
        real = run_for_real(program)
    except Exception:  # noqa: BLE001 - torch rejects the program: only "no crash" applies
        return
    symbolic = analyze_source(program, replay=False)
    for probe, value in real.items():
        if not isinstance(value, torch.Tensor):
            continue
        # What the symbolic pass states for any size must hold for these sizes too.
        sym = symbolic.explain_at(probe.line, probe.col)
        sym_fact = sym.fact if sym is not None else None
        if sym_fact is not None and sym_fact.contiguous is not None:
            assert sym_fact.contiguous == value.is_contiguous(), (program, probe, "symbolic contiguity")
        explanation = analysis.explain_at(probe.line, probe.col)
        fact = explanation.fact if explanation is not None else None
        if fact is None or fact.shape is None:
            continue  # unknown is allowed; wrong is not
        assert not compare(fact, value), (program, probe, compare(fact, value))


@st.composite
def two_call_program(draw: st.DrawFn) -> str:
    """A function of `x` called from two (or three) sites with tensors of different shapes."""
    names = ["x"]
    body: list[str] = []
    for i in range(draw(st.integers(1, 6))):
        name = f"v{i}"
        if draw(st.booleans()):
            body.append(f"{name} = {draw(op_on(draw(st.sampled_from(names))))}")
        else:
            a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
            body.append(f"{name} = {a} {draw(st.sampled_from(['+', '*', '@']))} {b}")
        names.append(name)
    lines = ["import torch", "", "def run(x):", *("    " + line for line in body), "    return x", ""]
    for _ in range(draw(st.integers(2, 3))):
        shape = ", ".join(str(n) for n in draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        lines.append(f"run(torch.{draw(FACTORIES)}({shape}){draw(st.sampled_from(['', '.t()', '[1:]']))})")
    return "\n".join(lines) + "\n"


@FUZZ
@given(two_call_program())
@pytest.mark.timeout(600)
def test_a_function_called_with_several_shapes_states_only_what_holds_for_every_call(program: str) -> None:
    try:
        real = run_for_real_all(program)
    except Exception:  # noqa: BLE001 - torch rejects one of the calls: nothing to compare
        return
    analysis = analyze_source(program, budget_steps=10_000)
    for probe, values in real.items():
        explanation = analysis.explain_at(probe.line, probe.col)
        fact = explanation.fact if explanation is not None else None
        if fact is None:
            continue
        for value in values:
            if isinstance(value, torch.Tensor):
                assert not contradictions(fact, value), (program, probe, contradictions(fact, value))


# ------------------------------------------------------------------------ mutated files
@st.composite
def mutated_source(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(CORPUS))
    kind = draw(
        st.sampled_from(
            ["truncate", "delete", "duplicate", "flip", "bom", "crlf", "tabs", "long", "nest", "cr"]
        )
    )
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if kind in ("delete", "duplicate"):
        tokens = text.split(" ")
        i = draw(st.integers(0, len(tokens) - 1))
        tokens[i : i + 1] = [] if kind == "delete" else [tokens[i], tokens[i]]
        return " ".join(tokens)
    if kind == "flip":
        data = bytearray(text.encode("utf-8"))
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return data.decode("utf-8", errors="replace")
    if kind == "bom":
        return "\ufeff" + text
    if kind == "crlf":
        return text.replace("\n", "\r\n")
    if kind == "cr":
        return text.replace("\n", "\r")
    if kind == "tabs":
        return text.replace("    ", "\t")
    if kind == "long":
        return text + "\nx = torch.zeros(2)" + " + torch.zeros(2)" * 3000 + "\n"
    depth = draw(st.sampled_from([100, 1000, 10_000]))
    return text + "\ny = " + "(" * depth + "1" + ")" * depth + "\n"


@FUZZ
@given(mutated_source())
@pytest.mark.timeout(600)
def test_mutated_files_never_crash_and_findings_stay_inside(source: str) -> None:
    analysis = analyze_source(source, budget_steps=10_000)
    _check_findings_inside(source)
    # Every position can be asked about without an exception.
    for line in range(1, min(len(analysis.lines), 40) + 1):
        width = len(analysis.lines[line - 1])
        for col in range(0, width + 1, max(7, width // 40)):
            analysis.explain_at(line, col)


def test_ten_thousand_deep_nesting_is_an_answer_not_a_crash() -> None:
    source = "import torch\nx = torch.zeros(2)\ny = " + "[" * 10_000 + "]" * 10_000 + "\nz = x.t()\n"
    analysis = analyze_source(source)
    assert analysis.broken  # reported as a broken line ...
    assert ast.dump(analysis.tree)  # ... and the rest still analysed
    node = next(n for n in ast.walk(analysis.tree) if isinstance(n, ast.Name) and n.id == "x")
    assert analysis.fact_of(node) is not None
