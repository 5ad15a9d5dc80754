"""Oracle for nn module outputs on symbolic sizes.

The module below (a source string, analysed and run by this test only) builds layers from
constructor arguments and takes every size from its inputs: no size is a literal except kernel
sizes (and 1 / 2 where an API takes a count). Each forward states its input's rank first
(`B, T, C = x.shape`). The engine's `explain` JSON (DESIGN.md "Machine-readable interfaces",
README "Symbolic sizes") is asked about every assigned name; the module is then run for real
(tests/realcode/driver.py instruments it) with three size combinations, and every stated
field is checked against every run (tests/realcode/compare.py: ints equal, strings evaluated
in the pre-statement locals equal, a failing eval is wrong, runs whose `assumes` is false are
skipped). Two combinations run in train mode with grad; the third in eval mode under
`torch.no_grad()`, as real code evaluates.

Coverage: lines marked `# cover: KIND` (or `# cover: KIND:name, ...` for one of several
targets) are the results of one module kind each; the engine must state their `shape`, except
for the kinds listed in NOT_YET_COVERED.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from tests.realcode import compare, driver
from tests.realcode.driver import Probe

NAME = "symbolic_modules"

SOURCE = '''"""nn modules and functions whose sizes are all symbolic (a stridelens oracle input)."""

import torch
import torch.nn.functional as F
from torch import nn


class LinearBlock(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        B, T, C = x.shape
        y = self.fc(x)  # cover: linear
        return y


class Conv1dBlock(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, 3, stride=2, padding=1)

    def forward(self, x):
        B, C, L = x.shape
        y = self.conv(x)  # cover: conv1d
        return y


class Conv2dBlock(nn.Module):
    def __init__(self, c_in, c_mid, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_mid, 3, padding=1)
        self.down = nn.Conv2d(c_mid, c_out, (3, 5), stride=(2, 1), padding=(1, 2))

    def forward(self, x):
        B, C, H, W = x.shape
        y = self.conv(x)  # cover: conv2d
        z = self.down(y)  # cover: conv2d_strided
        return z


class PoolBlock(nn.Module):
    def __init__(self, out_size):
        super().__init__()
        self.pool = nn.MaxPool2d(2)
        self.pool_pad = nn.MaxPool2d(3, stride=2, padding=1)
        self.adaptive = nn.AdaptiveAvgPool2d(out_size)
        self.adaptive_row = nn.AdaptiveAvgPool2d((1, out_size))

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.pool(x)  # cover: maxpool2d
        q = self.pool_pad(x)  # cover: maxpool2d_padded
        a = self.adaptive(x)  # cover: adaptiveavgpool2d
        r = self.adaptive_row(x)  # cover: adaptiveavgpool2d_tuple
        return p, q, a, r


class EmbeddingBlock(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim)

    def forward(self, idx):
        B, T = idx.shape
        e = self.emb(idx)  # cover: embedding
        return e


class NormBlock(nn.Module):
    def __init__(self, dim, p):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.act = nn.GELU()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        B, T, C = x.shape
        n = self.ln(x)  # cover: layernorm
        g = self.act(n)  # cover: gelu
        d = self.drop(g)  # cover: dropout
        return d


class BatchNormBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        B, C, H, W = x.shape
        y = self.bn(x)  # cover: batchnorm2d
        return y


class BiLSTMBatchFirst(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(
            input_size, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=True
        )

    def forward(self, x):
        B, T, C = x.shape
        out, (h, c) = self.lstm(x)  # cover: lstm_bf_bi:out, lstm_h:h, lstm_c:c
        return out, h, c


class LSTMSeqFirst(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers)

    def forward(self, x):
        T, B, C = x.shape
        out, (h, c) = self.lstm(x)  # cover: lstm_seq_first:out
        return out, h, c


class BiGRUSeqFirst(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers=num_layers, bidirectional=True)

    def forward(self, x):
        T, B, C = x.shape
        out, h = self.gru(x)  # cover: gru_seq_first_bi:out, gru_h:h
        return out, h


class GRUBatchFirst(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers, batch_first=True)

    def forward(self, x):
        B, T, C = x.shape
        out, h = self.gru(x)  # cover: gru_bf:out
        return out, h


class SelfAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        B, T, C = x.shape
        out, w = self.attn(x, x, x)  # cover: multiheadattention:out, multiheadattention_weights:w
        return out, w


class SeqFirstAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads)

    def forward(self, x):
        T, B, C = x.shape
        out, w = self.attn(x, x, x)  # cover: multiheadattention_seq_first:out
        return out, w


class MLP(nn.Module):
    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))

    def forward(self, x):
        B, T, C = x.shape
        y = self.net(x)  # cover: sequential
        return y


class QKVSplit(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.n_embd = n_embd
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)  # cover: split:k
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # cover: sdpa_causal
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return y


def attention(q, k, v):
    B, nh, T, hs = q.shape
    _b, _h, S, _d = k.shape
    _bv, _hv, _sv, Dv = v.shape
    y = F.scaled_dot_product_attention(q, k, v)  # cover: sdpa
    return y


def cat_stack(a, b):
    B, T, C = a.shape
    _b, _t, D = b.shape
    y = torch.cat([a, b], dim=-1)  # cover: cat
    s = torch.stack([a, a * 2], dim=1)  # cover: stack
    z = torch.cat((a, a), dim=0)  # cover: cat_dim0
    return y, s, z


def split_chunk(x, part):
    B, T, C = x.shape
    u, w = x.chunk(2, dim=1)  # cover: chunk:u, chunk_rest:w
    head, tail = x.split([part, C - part], dim=-1)  # cover: split_sizes:head, split_rest:tail
    return u, w, head, tail


def reductions(x):
    B, T, C = x.shape
    m = x.mean(dim=1)  # cover: mean
    s = x.sum(dim=-1, keepdim=True)  # cover: sum_keepdim
    mx, arg = x.max(dim=1)  # cover: max_dim:mx, max_indices:arg
    a = x.amax(dim=(0, 2), keepdim=True)  # cover: amax_keepdim
    return m, s, mx, arg, a


def project(x, w):
    B, T, C = x.shape
    C2, D = w.shape
    y = x @ w  # cover: matmul
    g = torch.matmul(x, x.transpose(1, 2))  # cover: matmul_batched
    return y, g
'''

# Every module kind the source exercises (the `# cover:` markers, in order). The engine must
# state the output `shape` at each, except for those in NOT_YET_COVERED.
MODULE_KINDS = (
    "linear",
    "conv1d",
    "conv2d",
    "conv2d_strided",
    "maxpool2d",
    "maxpool2d_padded",
    "adaptiveavgpool2d",
    "adaptiveavgpool2d_tuple",
    "embedding",
    "layernorm",
    "gelu",
    "dropout",
    "batchnorm2d",
    "lstm_bf_bi",
    "lstm_h",
    "lstm_c",
    "lstm_seq_first",
    "gru_seq_first_bi",
    "gru_h",
    "gru_bf",
    "multiheadattention",
    "multiheadattention_weights",
    "multiheadattention_seq_first",
    "sequential",
    "split",
    "sdpa_causal",
    "sdpa",
    "cat",
    "stack",
    "cat_dim0",
    "chunk",
    "chunk_rest",
    "split_sizes",
    "split_rest",
    "mean",
    "sum_keepdim",
    "max_dim",
    "max_indices",
    "amax_keepdim",
    "matmul",
    "matmul_batched",
)

# Kinds whose output shape the engine does not state yet (it states at most `contiguous` or
# nothing there). Not a pass: the coverage test checks every other kind, and
# test_not_yet_covered_is_exact fails as soon as one of these gets a shape, so that it moves
# back into the checked set.
NOT_YET_COVERED = frozenset(
    {
        # stride > 1 or pooling: the output length is a floor division of the input's
        "conv1d",
        "conv2d_strided",
        "maxpool2d",
        "maxpool2d_padded",
        # AdaptiveAvgPool2d((1, out_size)): a tuple holding a symbolic size
        "adaptiveavgpool2d_tuple",
        # MultiheadAttention's averaged weights (N, L, S)
        "multiheadattention_weights",
        # Sequential whose last Linear's out_features differs from the input's last dim
        "sequential",
        # cat along a dim of different (or equal) symbolic sizes: the summed size
        "cat",
        # chunk's pieces (ceil division; uneven when the size is odd)
        "chunk",
        "chunk_rest",
    }
)

# Three size combinations: every size >= 2 and all distinct within a combination; `heads`
# divides `C` (MultiheadAttention, the qkv split); `T` is odd in two (chunk's uneven halves).
COMBOS = (
    {"B": 8, "T": 5, "C": 12, "D": 7, "H": 9, "W": 10, "hidden": 6, "heads": 3, "layers": 2,
     "out": 4, "vocab": 14, "part": 11},
    {"B": 4, "T": 7, "C": 14, "D": 6, "H": 8, "W": 13, "hidden": 9, "heads": 2, "layers": 3,
     "out": 5, "vocab": 12, "part": 11},
    {"B": 3, "T": 6, "C": 16, "D": 9, "H": 11, "W": 12, "hidden": 7, "heads": 4, "layers": 2,
     "out": 5, "vocab": 10, "part": 13},
)
EVAL_COMBOS = (2,)  # indices of COMBOS run in eval mode under torch.no_grad()


def _run_combo(ns: dict[str, Any], s: dict[str, int]) -> None:
    B, T, C, D, H, W = s["B"], s["T"], s["C"], s["D"], s["H"], s["W"]
    hidden, heads, layers = s["hidden"], s["heads"], s["layers"]
    seq = torch.randn(B, T, C)
    seq_first = torch.randn(T, B, C)
    image = torch.randn(B, C, H, W)
    calls = [
        (ns["LinearBlock"](C, D), (seq,)),
        (ns["Conv1dBlock"](C, D), (torch.randn(B, C, W),)),
        (ns["Conv2dBlock"](C, hidden, D), (image,)),
        (ns["PoolBlock"](s["out"]), (image,)),
        (ns["EmbeddingBlock"](s["vocab"], C), (torch.randint(0, s["vocab"], (B, T)),)),
        (ns["NormBlock"](C, 0.25), (seq,)),
        (ns["BatchNormBlock"](C), (image,)),
        (ns["BiLSTMBatchFirst"](C, hidden, layers), (seq,)),
        (ns["LSTMSeqFirst"](C, hidden, layers), (seq_first,)),
        (ns["BiGRUSeqFirst"](C, hidden, layers), (seq_first,)),
        (ns["GRUBatchFirst"](C, hidden, layers), (seq,)),
        (ns["SelfAttention"](C, heads), (seq,)),
        (ns["SeqFirstAttention"](C, heads), (seq_first,)),
        (ns["MLP"](C, hidden, D), (seq,)),
        (ns["QKVSplit"](C, heads), (seq,)),
    ]
    training = torch.is_grad_enabled()
    for module, args in calls:
        module.train(training)
        module(*args)
    q = torch.randn(B, heads, T, hidden)
    k, v = torch.randn(B, heads, H, hidden), torch.randn(B, heads, H, D)
    ns["attention"](q, k, v)
    ns["cat_stack"](seq, torch.randn(B, T, D))
    ns["split_chunk"](seq, s["part"])
    ns["reductions"](seq)
    ns["project"](seq, torch.randn(C, D))


def _entry(ns: dict[str, Any]) -> None:
    for i, sizes in enumerate(COMBOS):
        if i in EVAL_COMBOS:
            with torch.no_grad():
                _run_combo(ns, sizes)
        else:
            _run_combo(ns, sizes)


# --------------------------------------------------------------------------- the oracle

_COVER = re.compile(r"#\s*cover:\s*(.+)$")


def cover_markers() -> dict[str, Probe]:
    """kind -> the probe of its result, from the `# cover:` comments."""
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
def oracle(tmp_path_factory: pytest.TempPathFactory) -> compare.SnippetOracle:
    return compare.snippet_oracle(SOURCE, NAME, _entry, tmp_path_factory.mktemp("symbolic_modules"))


def _states_shape(answer: dict[str, Any] | None) -> bool:
    shape = (answer or {}).get("shape")
    return isinstance(shape, list) and all(e is not None for e in shape)


# --------------------------------------------------------------------------- tests


def test_markers_are_the_module_kinds() -> None:
    assert tuple(cover_markers()) == MODULE_KINDS
    assert NOT_YET_COVERED.issubset(MODULE_KINDS)


def test_every_probe_runs_in_every_combo(oracle: compare.SnippetOracle) -> None:
    runs = oracle.run.runs
    assert all(runs[p] for p in oracle.run.probes), "the entry point reaches every assignment"
    for kind, probe in cover_markers().items():
        found = runs[probe]
        assert len(found) == len(COMBOS), kind
        assert all(r.tensor is not None for r in found), f"{kind}: `{probe.name}` is a tensor"
    # the combinations really differ at every covered result
    for kind, probe in cover_markers().items():
        shapes = {r.tensor.shape for r in runs[probe] if r.tensor is not None}
        assert len(shapes) == len(COMBOS), f"{kind}: one shape in two runs"


def test_no_wrong_facts(oracle: compare.SnippetOracle) -> None:
    lines = compare.wrong_facts_summary([oracle.report])
    if oracle.report.wrong:
        pytest.fail(f"{len(lines)} wrong fact(s):\n" + "\n".join(lines), pytrace=False)


def test_engine_states_output_shapes(oracle: compare.SnippetOracle) -> None:
    markers = cover_markers()
    missing = [
        f"{kind} (line {p.line} `{p.name}`)"
        for kind, p in markers.items()
        if kind not in NOT_YET_COVERED and not _states_shape(oracle.answers[p])
    ]
    assert not missing, "no shape stated for: " + ", ".join(missing)


def test_not_yet_covered_is_exact(oracle: compare.SnippetOracle) -> None:
    markers = cover_markers()
    now_covered = sorted(k for k in NOT_YET_COVERED if _states_shape(oracle.answers[markers[k]]))
    assert not now_covered, f"shape now stated: move {now_covered} out of NOT_YET_COVERED"


def test_checker_catches_a_wrong_shape(oracle: compare.SnippetOracle) -> None:
    # Off by one in the last dim of every covered kind's stated shape: one wrong fact per run.
    bad: dict[Probe, dict[str, Any] | None] = {}
    for kind, probe in cover_markers().items():
        answer = oracle.answers[probe]
        if kind in NOT_YET_COVERED or not _states_shape(answer):
            continue
        shape = list(answer["shape"])
        last = shape[-1]
        shape[-1] = last + 1 if isinstance(last, int) else f"({last}) + 1"
        bad[probe] = {"shape": shape}
    assert bad
    report = compare.check(NAME, bad, oracle.run)
    flagged = {(w.line, w.name) for w in report.wrong if w.field == "shape"}
    assert flagged == {(p.line, p.name) for p in bad}
    assert len(report.wrong) == len(bad) * len(COMBOS)
