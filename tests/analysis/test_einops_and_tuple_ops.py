"""Oracle for ops the engine used to drop: einops (`rearrange` / `repeat` / `reduce`, the
`Rearrange` layer), `torch.einsum`, ops returning `(values, indices)` (`max`/`min` over a dim,
`topk`, `sort`, `kthvalue`, `median`, `mode`) and `stack` / `cat` of lists.

Two kinds of check, both against real torch on CPU:

* literal sizes (LITERAL): the snippet runs for real (tests/analysis/oracle.py); for every
  assigned name the engine must state the exact fact (`oracle.compare`: shape, strides, offset,
  dtype, contiguity, view-ness, requires_grad, storage bytes), or nothing it states may differ
  (names in PARTIAL_LITERAL, where some field is unknown on purpose);
* symbolic sizes (SOURCE): the module runs for real with three size combinations
  (tests/realcode/driver.py instruments it); every field of the engine's `explain` JSON is
  checked against every run (tests/realcode/compare.py: ints equal, strings evaluated in the
  pre-statement locals), and lines marked `# cover: KIND` must have their whole shape stated.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from stridelens.server.analysis.symbolic_einops import PatternError, einsum_shape, recipe
from tests.analysis.oracle import analyse, compare, contradictions, probes_of, run_for_real
from tests.realcode import compare as realcompare
from tests.realcode import driver
from tests.realcode.driver import Probe

einops = pytest.importorskip("einops")

# --------------------------------------------------------------------------- literal sizes

LITERAL = '''
import torch
import einops
from einops import rearrange, repeat, reduce
from einops.layers.torch import Rearrange, Reduce

x = torch.randn(2, 6, 8, requires_grad=True)
img = torch.randn(2, 3, 8, 12)
split = rearrange(x, "b n (h d) -> b h n d", h=2)
merged = einops.rearrange(split, "b h n d -> b n (h d)")
flat = rearrange(x, "b n d -> b (n d)")
same = rearrange(x, "b n d -> b n d")
moved = rearrange(x, "b n d -> b d n")
rows = rearrange(moved, "b d n -> (b d) n")
unit = rearrange(x, "b n d -> b 1 n d")
squeezed = rearrange(unit, "b 1 n d -> n b d")
ell = rearrange(img, "b c ... -> b (...) c")
patches = rearrange(img, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=4, p2=4)
rep = repeat(x, "b n d -> b r n d", r=3)
rep_merged = repeat(x, "b n d -> (b r) n d", r=3)
rep_anon = repeat(x, "b n d -> b n d 2")
mean = reduce(x, "b n d -> b d", "mean")
pooled = reduce(img, "b c (h p) (w q) -> b c h w", "max", p=2, q=2)
kept = reduce(x, "b n d -> b 1 d", "sum")
with torch.no_grad():
    quiet = rearrange(x, "b n (h d) -> b h n d", h=4)
to_seq = Rearrange("b c h w -> b (h w) c")
seq = to_seq(img)
pool = Reduce("b c h w -> b c", "mean")
gap = pool(img)

a = torch.randn(3, 4, 5)
b = torch.randn(3, 5, 6)
bmm = torch.einsum("bij,bjk->bik", a, b)
perm = torch.einsum("bij->jib", a)
implicit = torch.einsum("bij,bjk", a, b)
summed = torch.einsum("bij->j", a)
listed = torch.einsum("bij,bjk->bik", [a, b])

values, indices = torch.topk(x, 3, dim=-1)
top = x.topk(2, dim=1)
top_v = top.values
top_i = top.indices
mx = x.max(dim=1)
mx_v = mx[0]
mx_i = mx[1]
mn_v, mn_i = torch.min(x, 2, keepdim=True)
srt_v, srt_i = torch.sort(x, dim=1, descending=True)
srt2 = x.sort()
srt2_v = srt2.values
kth_v, kth_i = torch.kthvalue(x, 2, dim=1)
med_v, med_i = torch.median(x, 1)
mode_v, mode_i = x.mode(1)
xt = x.transpose(1, 2)
tsort_v, tsort_i = xt.sort(dim=1)
ttop_v, ttop_i = xt.topk(2, dim=1)

stacked = torch.stack([a, a * 2], dim=1)
catted = torch.cat([a, a], dim=2)
cat_mixed = torch.cat([a, b.transpose(1, 2)], dim=1)
'''

# Names whose fact is partly unknown on purpose: the engine may leave fields out there, but
# nothing it states may differ from torch.
PARTIAL_LITERAL: frozenset[str] = frozenset()


@pytest.fixture(scope="module")
def literal() -> tuple[dict[Any, Any], Any]:
    return run_for_real(LITERAL), analyse(LITERAL)


def _literal_cases() -> list[Probe]:
    return [p for p in probes_of(LITERAL)]


@pytest.mark.parametrize("probe", _literal_cases(), ids=lambda p: f"{p.line}:{p.name}")
def test_literal_fact_equals_real_tensor(literal: tuple[dict[Any, Any], Any], probe: Any) -> None:
    real_values, analysis = literal
    real = real_values.get(probe)
    if not isinstance(real, torch.Tensor):
        pytest.skip(f"`{probe.name}` is not a tensor")
    explanation = analysis.explain_at(probe.line, probe.col)
    assert explanation is not None and explanation.expr == probe.name
    if probe.name in PARTIAL_LITERAL:
        problems = contradictions(explanation.fact, real)
    else:
        problems = compare(explanation.fact, real)
    assert not problems, f"line {probe.line} `{probe.name}`: " + "; ".join(problems)


# --------------------------------------------------------------------------- symbolic sizes

NAME = "einops_and_tuple_ops"

SOURCE = '''"""einops, einsum, (values, indices) ops and stack/cat on symbolic sizes (a stridelens oracle input)."""

import einops
import torch
from einops import rearrange, repeat, reduce
from einops.layers.torch import Rearrange
from torch import nn


class Attention(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = heads
        self.to_seq = Rearrange("b c h w -> b (h w) c")

    def forward(self, x, img):
        B, N, C = x.shape
        q = rearrange(x, "b n (h d) -> b h n d", h=self.heads)  # cover: rearrange_split
        o = rearrange(q, "b h n d -> b n (h d)")  # cover: rearrange_merge
        t = einops.rearrange(x, "b n c -> b c n")  # cover: rearrange_permute
        f = rearrange(x, "b n c -> (b n) c")  # cover: rearrange_flatten
        tf = rearrange(t, "b c n -> b (c n)")  # cover: rearrange_copy
        u = rearrange(x, "b n c -> b 1 n c")  # cover: rearrange_unit
        r = repeat(x, "b n c -> b k n c", k=4)  # cover: repeat_expand
        rm = repeat(x, "b n c -> (b k) n c", k=2)  # cover: repeat_merge
        m = reduce(x, "b n c -> b c", "max")  # cover: reduce_max
        s = reduce(x, "b n c -> b 1 c", "mean")  # cover: reduce_keep
        seq = self.to_seq(img)  # cover: rearrange_layer
        return o, t, f, tf, u, r, rm, m, s, seq


def attention_scores(x, heads, mask):
    B, N, C = x.shape
    q = rearrange(x, "b n (h d) -> b h n d", h=heads)
    k = q * 0.5
    scores = torch.einsum("bhnd,bhmd->bhnm", q, k)  # cover: einsum_scores
    out = torch.einsum("bhnm,bhmd->bhnd", scores, q)  # cover: einsum_out
    moved = torch.einsum("bhnd->bnhd", q)  # cover: einsum_permute
    total = torch.einsum("bhnd->d", q)  # cover: einsum_sum
    masked = torch.einsum("bhnm,bm->bhnm", scores, mask)  # a parameter: its shape is unknown
    return out, moved, total, masked


def tuple_ops(x, k):
    B, T, C = x.shape
    values, indices = torch.topk(x, k, dim=-1)  # cover: topk_values:values, topk_indices:indices
    top = x.topk(2, dim=1)
    tv = top.values  # cover: topk_attr_values
    ti = top.indices  # cover: topk_attr_indices
    mx, arg = x.max(dim=1)  # cover: max_values:mx, max_indices:arg
    mn = torch.min(x, -1, keepdim=True)[0]  # cover: min_keepdim
    sv, si = x.sort(dim=1, descending=True)  # cover: sort_values:sv, sort_indices:si
    kv, ki = torch.kthvalue(x, 2, dim=2)  # cover: kthvalue_values:kv, kthvalue_indices:ki
    md = torch.median(x, 1).values  # cover: median
    mo, moi = x.mode(-1)  # cover: mode_values:mo, mode_indices:moi
    return values, indices, tv, ti, mx, arg, mn, sv, si, kv, ki, md, mo, moi


def stack_cat(x, n):
    B, T, C = x.shape
    s = torch.stack([x, x * 2], dim=1)  # cover: stack_literal
    c = torch.cat([x, x], dim=0)  # cover: cat_literal
    many = torch.stack([x * 2 for _ in range(n)], dim=1)  # cover: stack_comprehension
    joined = torch.cat([x[:, i] for i in range(n)], dim=-1)  # cover: cat_comprehension
    tiled = x.repeat(2, 1, n)  # cover: repeat_method
    lead = x.transpose(0, 1).repeat(n, 1, 2, 1)  # cover: repeat_lead
    return s, c, many, joined, tiled, lead
'''

# Kinds whose shape the engine does not state (only what holds is checked there).
NOT_YET_COVERED = frozenset(
    {
        # the list's length is not known: the new dim has no name (a null entry)
        "stack_comprehension",
        "cat_comprehension",
    }
)

# Every size >= 2 and distinct within a combination; `heads` divides C.
COMBOS = (
    {"B": 2, "N": 5, "C": 12, "heads": 3, "H": 4, "W": 6, "k": 3, "items": 3},
    {"B": 3, "N": 7, "C": 8, "heads": 2, "H": 5, "W": 4, "k": 2, "items": 2},
    {"B": 4, "N": 6, "C": 15, "heads": 5, "H": 3, "W": 2, "k": 4, "items": 4},
)
EVAL_COMBOS = (2,)


def _run_combo(ns: dict[str, Any], s: dict[str, int]) -> None:
    B, N, C = s["B"], s["N"], s["C"]
    x = torch.randn(B, N, C, requires_grad=True)
    ns["Attention"](s["heads"])(x, torch.randn(B, C, s["H"], s["W"]))
    ns["attention_scores"](x, s["heads"], torch.ones(B, N))
    ns["tuple_ops"](x, s["k"])
    ns["stack_cat"](x, s["items"])


def _entry(ns: dict[str, Any]) -> None:
    for i, sizes in enumerate(COMBOS):
        if i in EVAL_COMBOS:
            with torch.no_grad():
                _run_combo(ns, sizes)
        else:
            _run_combo(ns, sizes)


_COVER = re.compile(r"#\s*cover:\s*(.+)$")


def cover_markers() -> dict[str, Probe]:
    probes = driver.probes_of(SOURCE)
    out: dict[str, Probe] = {}
    for number, text in enumerate(SOURCE.splitlines(), start=1):
        m = _COVER.search(text)
        if not m:
            continue
        on_line = [p for p in probes if p.line == number]
        for item in m.group(1).split(","):
            kind, _, name = item.strip().partition(":")
            probe = next(p for p in on_line if p.name == name) if name else on_line[0]
            assert kind not in out, f"kind {kind} marked twice"
            out[kind] = probe
    return out


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> realcompare.SnippetOracle:
    return realcompare.snippet_oracle(SOURCE, NAME, _entry, tmp_path_factory.mktemp(NAME))


def _states_shape(answer: dict[str, Any] | None) -> bool:
    shape = (answer or {}).get("shape")
    return isinstance(shape, list) and all(e is not None for e in shape)


def test_every_marked_probe_runs_in_every_combo(oracle: realcompare.SnippetOracle) -> None:
    for kind, probe in cover_markers().items():
        found = oracle.run.runs[probe]
        assert len(found) == len(COMBOS), kind
        assert all(r.tensor is not None for r in found), f"{kind}: `{probe.name}` is a tensor"


def test_no_wrong_facts(oracle: realcompare.SnippetOracle) -> None:
    if oracle.wrong_lines():
        pytest.fail("wrong facts:\n" + "\n".join(oracle.wrong_lines()), pytrace=False)


def test_engine_states_shapes(oracle: realcompare.SnippetOracle) -> None:
    missing = [
        f"{kind} (line {p.line} `{p.name}`)"
        for kind, p in cover_markers().items()
        if kind not in NOT_YET_COVERED and not _states_shape(oracle.answers[p])
    ]
    assert not missing, "no shape stated for: " + ", ".join(missing)


def test_not_yet_covered_is_exact(oracle: realcompare.SnippetOracle) -> None:
    markers = cover_markers()
    now = sorted(k for k in NOT_YET_COVERED if _states_shape(oracle.answers[markers[k]]))
    assert not now, f"shape now stated: move {now} out of NOT_YET_COVERED"


def _answer(oracle: realcompare.SnippetOracle, kind: str) -> dict[str, Any]:
    answer = oracle.answers[cover_markers()[kind]]
    assert answer is not None, kind
    return answer


def test_symbolic_facts_in_the_users_names(oracle: realcompare.SnippetOracle) -> None:
    q = _answer(oracle, "rearrange_split")
    assert q["shape"] == ["B", "self.heads", "N", "C // self.heads"]
    assert q["is_view"] is True and q["contiguous"] is False
    # einops (like view) raises unless heads divides C: every run past the line has it, so
    # it is no assumption of the fact.
    assert not any("%" in a for a in q["assumes"])
    assert _answer(oracle, "rearrange_copy")["is_view"] is False  # reshape of a permuted tensor
    assert _answer(oracle, "repeat_expand")["strides"][1] == 0
    assert _answer(oracle, "topk_values")["shape"] == ["B", "T", "k"]
    assert _answer(oracle, "topk_indices")["dtype"] == "int64"
    assert _answer(oracle, "topk_indices")["requires_grad"] is None or _answer(oracle, "topk_indices")["requires_grad"] is False
    assert _answer(oracle, "min_keepdim")["shape"] == ["B", "T", 1]
    for kind in ("einsum_scores", "einsum_permute", "einsum_sum"):
        assert _answer(oracle, kind).get("is_view") is None, kind  # torch: a view for some equations
    # The new dim's size (the list's length) has no name: a null entry where the JSON allows
    # one, else no shape; never a made-up size.
    assert _answer(oracle, "stack_comprehension").get("shape") in (None, ["B", None, "T", "C"])


def test_checker_catches_a_wrong_shape(oracle: realcompare.SnippetOracle) -> None:
    bad: dict[Probe, dict[str, Any] | None] = {}
    for kind, probe in cover_markers().items():
        answer = oracle.answers[probe]
        if kind in NOT_YET_COVERED or not _states_shape(answer):
            continue
        shape = list(answer["shape"])  # type: ignore[index]
        last = shape[-1]
        shape[-1] = last + 1 if isinstance(last, int) else f"({last}) + 1"
        bad[probe] = {"shape": shape}
    assert bad
    report = realcompare.check(NAME, bad, oracle.run)
    assert {(w.line, w.name) for w in report.wrong if w.field == "shape"} == {(p.line, p.name) for p in bad}


# --------------------------------------------------------------------------- the pieces


def _simulate(x: torch.Tensor, steps: Any, reduction: str | None = None) -> torch.Tensor:
    if steps.init_shape is not None:
        x = x.reshape(steps.init_shape)
    if steps.permutation is not None:
        x = x.permute(steps.permutation)
    if steps.reduced:
        if reduction in ("min", "max", "sum", "mean"):
            x = getattr(x, {"min": "amin", "max": "amax"}.get(reduction, reduction))(dim=steps.reduced)
        else:
            for d in sorted(steps.reduced, reverse=True):
                x = getattr(x, str(reduction))(dim=d)
    if steps.added:
        repeats = [-1] * steps.n_after_adding
        for position, length in steps.added:
            x = x.unsqueeze(position)
            repeats[position] = length
        x = x.expand(repeats)
    if steps.final_shape is not None:
        x = x.reshape(steps.final_shape)
    return x


RECIPES = [
    ("rearrange", "b n (h d) -> b h n d", (2, 6, 8), {"h": 2}, None),
    ("rearrange", "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", (2, 3, 8, 12), {"p1": 4, "p2": 4}, None),
    ("rearrange", "b ... -> b (...)", (2, 3, 4, 5), {}, None),
    ("rearrange", "... d -> d ...", (2, 3, 4), {}, None),
    ("rearrange", "b n d -> b 1 n d", (2, 3, 4), {}, None),
    ("rearrange", "b 1 n d -> b n d", (2, 1, 3, 4), {}, None),
    ("rearrange", "(b r) n -> b n r", (6, 5), {"r": 3}, None),
    ("rearrange", "b h n d -> b n (h d)", (2, 3, 4, 5), {}, None),
    ("rearrange", "b n d -> b n d", (2, 3, 4), {}, None),
    ("repeat", "b n d -> b r n d", (2, 3, 4), {"r": 5}, None),
    ("repeat", "b n d -> (b r) n d", (2, 3, 4), {"r": 5}, None),
    ("repeat", "b n -> b n 3", (2, 3), {}, None),
    ("repeat", "h w -> (h 2) (w 2)", (3, 4), {}, None),
    ("reduce", "b n d -> b d", (2, 3, 4), {}, "mean"),
    ("reduce", "b (n p) d -> b n d", (2, 6, 4), {"p": 2}, "max"),
    ("reduce", "b n d -> b () d", (2, 3, 4), {}, "sum"),
    ("reduce", "b ... d -> b d", (2, 3, 5, 4), {}, "prod"),
    ("reduce", "b n d -> b", (2, 3, 4), {}, "min"),
]


@pytest.mark.parametrize(("op", "pattern", "shape", "axes", "reduction"), RECIPES, ids=[r[1] for r in RECIPES])
def test_recipe_is_what_einops_runs(op: str, pattern: str, shape: tuple[int, ...], axes: dict[str, int], reduction: str | None) -> None:
    x = torch.randn(*shape)
    fn = getattr(einops, op)
    want = fn(x, pattern, reduction, **axes) if op == "reduce" else fn(x, pattern, **axes)
    steps = recipe(pattern, op, shape, axes)
    got = _simulate(x, steps, reduction)
    assert got.shape == want.shape and got.stride() == want.stride()
    assert (got._base is None) == (want._base is None)
    assert torch.allclose(got, want)
    assert steps.identity == (want is x)


@pytest.mark.parametrize(
    ("op", "pattern", "shape", "axes"),
    [
        ("rearrange", "b n d -> b n", (2, 3, 4), {}),
        ("rearrange", "b (h d) -> b h d", (2, 7), {"h": 2}),
        ("rearrange", "b n -> b n d", (2, 3), {}),
        ("repeat", "b n -> b n r", (2, 3), {}),
        ("reduce", "b n -> b n r", (2, 3), {}),
        ("rearrange", "b n d -> b n d", (2, 3), {}),
        ("rearrange", "b (n d) -> b n d", (2, 6), {}),
    ],
)
def test_recipe_rejects_what_einops_rejects(op: str, pattern: str, shape: tuple[int, ...], axes: dict[str, int]) -> None:
    with pytest.raises(PatternError):
        recipe(pattern, op, shape, axes)
    with pytest.raises(einops.EinopsError):
        fn = getattr(einops, op)
        fn(torch.randn(*shape), pattern, "sum", **axes) if op == "reduce" else fn(torch.randn(*shape), pattern, **axes)


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),
        ("ij,jk->ik", [(2, 1), (3, 4)]),
        ("...ij,...jk->...ik", [(5, 2, 3), (3, 4)]),
        ("b...d->...b", [(2, 3, 4, 5)]),
        ("ii->i", [(3, 3)]),
        ("ij->", [(3, 4)]),
        ("bhnd,bhmd->bhnm", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ],
)
def test_einsum_shape_is_torchs(equation: str, shapes: list[tuple[int, ...]]) -> None:
    want = torch.einsum(equation, *[torch.randn(*s) for s in shapes]).shape
    assert einsum_shape(equation, shapes) == tuple(want)
