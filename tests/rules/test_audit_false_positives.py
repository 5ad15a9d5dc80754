"""False-positive kinds a hand audit of findings on public repositories found in SL201, SL202,
SL204, SL207, SL210 and SL217, and a missed bug (SL218): each snippet is analysed through the
real engine, the false-positive form must be silent and the true bug still flagged; where a
rule's message makes a claim about torch, the snippet is run for real on CPU and torch must
behave as the message says."""

from __future__ import annotations

import textwrap
import warnings
from typing import Any

import pytest

from stridelens.server.analysis import analyze_source
from stridelens.server.rules import run_rules
from stridelens.server.rules.base import Finding

torch = pytest.importorskip("torch")

PRELUDE = "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
OFFSET = PRELUDE.count("\n")


def _found(src: str, code: str) -> list[Finding]:
    return run_rules(analyze_source(PRELUDE + textwrap.dedent(src), "<snippet>"), select=[code])


def _lines(src: str, code: str) -> list[int]:
    return [f.line - OFFSET for f in _found(src, code)]


def _run(src: str) -> dict[str, Any]:
    scope: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(PRELUDE + textwrap.dedent(src), "<snippet>", "exec"), scope)  # the test's own snippet
    return scope


def _line_of(src: str, text: str) -> int:
    return next(i for i, line in enumerate(textwrap.dedent(src).splitlines(), start=1) if text in line)


# --------------------------------------------------------------------------------- SL210
SL210_GUARDED = [
    # the non-tensor branch of a tensor test: the code tells tensors from other data
    """\
    def to_tensor(t):
        if not torch.is_tensor(t):
            t = torch.tensor(t)
        return t
    items = [torch.randn(()), torch.randn(())]
    out = to_tensor(items[0])
    """,
    """\
    def as_batch(xs):
        xs = [torch.randn(()) for _ in range(3)] if xs is None else xs
        if torch.is_tensor(xs):
            return xs
        return torch.tensor(xs)
    """,
    """\
    def as_batch(xs):
        xs = [torch.randn(()) for _ in range(3)] if xs is None else xs
        if isinstance(xs, (torch.Tensor, float)):
            return xs
        else:
            return torch.tensor(xs)
    """,
    """\
    xs = [torch.randn(()) for _ in range(3)]
    ys = torch.tensor(xs) if not isinstance(xs, torch.Tensor) else xs
    """,
    """\
    xs = [torch.randn(()) for _ in range(3)]
    if not torch.is_tensor(xs):
        xs = torch.tensor(xs)
    """,
]


@pytest.mark.parametrize("src", SL210_GUARDED)
def test_sl210_silent_under_a_tensor_test(src: str) -> None:
    assert _lines(src, "SL210") == []


def test_sl210_still_flags_unguarded_and_rebound_data() -> None:
    src = """\
    a = torch.randn((), requires_grad=True)
    b = torch.randn((), requires_grad=True)
    t = torch.tensor([a * 2, b * 3])
    def as_batch(xs):
        if torch.is_tensor(xs):
            return xs
        xs = [a * 2, b * 3]
        return torch.tensor(xs)
    """
    assert _lines(src, "SL210") == [3, 8]  # the early return tested another value of `xs`
    # What the message claims: one-element tensors lose their graph, larger ones raise.
    scope = _run(src)
    assert scope["t"].requires_grad is False and scope["a"].requires_grad is True
    assert scope["as_batch"](torch.ones(2)).shape == (2,)  # the tensor branch: returned as is
    with pytest.raises(ValueError, match="only one element tensors"):
        torch.tensor([torch.randn(2), torch.randn(2)])


# --------------------------------------------------------------------------------- SL201
def _node(tensor: Any, kind: str) -> Any:
    """The first grad_fn node of type `kind` in `tensor`'s graph."""
    todo = [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is None:
            continue
        if type(node).__name__ == kind:
            return node
        todo.extend(fn for fn, _ in node.next_functions)
    raise AssertionError(f"no {kind} in the graph")


TRAIN_LOOP = """\
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0.0
history = []
for step in range(2):
    opt.zero_grad()
    x = torch.randn(8, 4)
    logits = model(x).tanh()
    loss = logits.pow(2).mean()
    {before}
    loss.backward()
    opt.step()
    {after}
"""


def _train(before: str = "pass", after: str = "pass") -> str:
    return TRAIN_LOOP.format(before=before, after=after)


@pytest.mark.parametrize(
    "store",
    ["total = total + loss.detach()", "total = total + 0.5 * loss.detach()", "total = total + loss.item()",
     "total = 0.9 * total + 0.1 * float(loss)", "total += loss.detach()"],
)  # fmt: skip
def test_sl201_silent_on_graph_free_accumulation(store: str) -> None:
    src = _train(after=store)
    assert _lines(src, "SL201") == []
    assert _run(src)["total"].__class__ in (float, torch.Tensor)
    total = _run(src)["total"]
    assert not isinstance(total, torch.Tensor) or total.grad_fn is None  # no graph kept


def test_sl201_still_flags_the_graph_carrying_sum() -> None:
    src = _train(after="total = total + loss")
    assert _lines(src, "SL201") == [_line_of(src, "total = total + loss")]
    assert _run(src)["total"].grad_fn is not None


@pytest.mark.parametrize("where", ["before", "after"])
def test_sl201_after_a_backward_through_it_says_the_saved_tensors_are_freed(where: str) -> None:
    """`history.append(logits[:1])` in an iteration whose backward runs through `logits`:
    before or after that backward, the saved tensors are freed by the end of the iteration;
    the stored view (with its storage) and the grad_fn nodes stay."""
    src = _train(**{where: "history.append(logits[:1])"})
    (finding,) = _found(src, "SL201")
    assert finding.severity.value == "information"
    assert "frees the tensors that graph saved" in finding.message
    assert "whole graph" not in finding.message and "activations" not in finding.message
    kept = _run(src)["history"]
    tanh = _node(kept[0], "TanhBackward0")
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        _ = tanh._saved_result  # freed by the iteration's backward
    assert kept[0]._base is not None  # a view: its whole storage stays alive


def test_sl201_without_a_backward_says_the_activations_stay() -> None:
    src = """\
    model = nn.Linear(4, 2)
    history = []
    def evaluate(loader):
        for x in loader:
            loss = model(x).tanh().pow(2).mean()
            history.append(loss)
    evaluate([torch.randn(8, 4) for _ in range(2)])
    """
    (finding,) = _found(src, "SL201")
    assert finding.severity.value == "warning" and "activations it saved" in finding.message
    kept = _run(src)["history"]
    tanh = _node(kept[0], "TanhBackward0")
    assert tanh._saved_result.shape == (8, 2)  # no backward: the saved activation is alive


def test_sl201_a_new_forward_after_the_backward_is_not_said_to_be_freed() -> None:
    src = _train(after="history.append(model(x).tanh())")
    (finding,) = _found(src, "SL201")
    assert finding.severity.value == "warning"
    assert "does not reach keeps its saved tensors" in finding.message
    kept = _run(src)["history"]
    assert kept[0].grad_fn._saved_result.shape == (8, 2)  # not reached by the backward: kept


# --------------------------------------------------------------------------------- SL202
SL202_NEEDED = {
    "adaptive weight then backward": """\
    def generator_step(model, disc, x, last_layer, optimizer):
        rec = model(x)
        nll_loss = (rec - x).abs().mean()
        g_loss = -disc(rec).mean()
        nll_grads = torch.autograd.grad(nll_loss, last_layer, retain_graph=True)[0]
        g_grads = torch.autograd.grad(g_loss, last_layer, retain_graph=True)[0]
        weight = (nll_grads.norm() / (g_grads.norm() + 1e-4)).detach()
        loss = nll_loss + weight * g_loss
        loss.backward()
        optimizer.step()
    """,
    "the caller's graph": """\
    def adaptive_weight(nll_loss, g_loss, last_layer):
        nll_grads = torch.autograd.grad(nll_loss, last_layer, retain_graph=True)[0]
        g_grads = torch.autograd.grad(g_loss, last_layer, retain_graph=True)[0]
        return (nll_grads.norm() / (g_grads.norm() + 1e-4)).detach()
    """,
    "gradient penalty": """\
    def penalty(disc, real):
        mixed = real.clone().requires_grad_(True)
        grads = torch.autograd.grad(disc(mixed).sum(), mixed, create_graph=True, retain_graph=True)[0]
        return ((grads.norm(2, dim=1) - 1) ** 2).mean()
    """,
    "two losses of one forward": """\
    def step(model, x):
        out = model(x)
        first = out.pow(2).mean()
        second = out.abs().mean()
        first.backward(retain_graph=True)
        second.backward()
    """,
    "a trunk shared by heads": """\
    def step(model, heads, x):
        trunk = model(x)
        for head in heads:
            head(trunk).sum().backward(retain_graph=True)
    """,
}


@pytest.mark.parametrize("src", SL202_NEEDED.values(), ids=SL202_NEEDED.keys())
def test_sl202_silent_where_the_graph_is_used_again(src: str) -> None:
    assert _lines(src, "SL202") == []


def test_sl202_the_adaptive_weight_needs_it() -> None:
    """Without `retain_graph=True` the backward after `autograd.grad` raises: the graph is
    used again, so the flag is needed."""
    src = """\
    last = nn.Linear(4, 4)
    disc = nn.Linear(4, 1)
    x = torch.randn(8, 4)
    rec = last(x)
    nll_loss = (rec - x).abs().mean()
    g_loss = -disc(rec).mean()
    nll_grads = torch.autograd.grad(nll_loss, last.weight, retain_graph=RETAIN)[0]
    loss = nll_loss + nll_grads.norm().detach() * g_loss
    loss.backward()
    """
    assert _lines(src.replace("RETAIN", "True"), "SL202") == []
    _run(src.replace("RETAIN", "True"))
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        _run(src.replace("RETAIN", "False"))


def test_sl202_still_flags_a_graph_nothing_uses_again() -> None:
    src = """\
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    def train(loader):
        for x in loader:
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward(retain_graph=True)
            optimizer.step()
        return loss.item()
    train([torch.randn(8, 4) for _ in range(2)])
    """
    assert _lines(src, "SL202") == [7]
    _run(src.replace("retain_graph=True", "retain_graph=False"))  # nothing needed it


# --------------------------------------------------------------------------------- SL207
@pytest.mark.parametrize(
    "guarded",
    [
        "if config.detect_anomaly:\n        torch.autograd.set_detect_anomaly(True)",
        "if args.debug:\n        torch.autograd.set_detect_anomaly(True)",
        "if not args.debug:\n        return\n    torch.autograd.set_detect_anomaly(True)",
        "torch.autograd.set_detect_anomaly(args.detect_anomaly)",
        "with torch.autograd.detect_anomaly() if cfg.anomaly else contextlib.nullcontext():\n        pass",
        "if os.environ.get('ANOMALY'):\n        torch.autograd.set_detect_anomaly(True)",
    ],
)
def test_sl207_silent_behind_a_flag(guarded: str) -> None:
    src = f"import contextlib\nimport os\ndef main(args, config, cfg):\n    {guarded}\n"
    assert _lines(src, "SL207") == []


def test_sl207_still_flags_the_unconditional_call() -> None:
    src = """\
    def main(args):
        torch.autograd.set_detect_anomaly(True)
    if __name__ == "__main__":
        torch.autograd.set_detect_anomaly(True)
    if torch.cuda.is_available():
        torch.autograd.set_detect_anomaly(True)
    """
    assert _lines(src, "SL207") == [2, 4, 6]


# --------------------------------------------------------------------------------- SL204
def test_sl204_silent_on_metadata_copies_and_init_code() -> None:
    src = """\
    import math
    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(dim, dim))
            self.reset_parameters()

        def reset_parameters(self):
            self.weight.data.uniform_(-1 / math.sqrt(self.weight.size(1)), 1 / math.sqrt(self.weight.size(1)))

        @torch.no_grad()
        def _init_weights(self, m):
            m.weight.data.normal_(0, 0.02)

        def forward(self, x):
            n = self.weight.data.size(0)
            shape, dtype, device = self.weight.data.shape, self.weight.data.dtype, self.weight.data.device
            zeros = torch.zeros_like(self.weight.data)
            scale = self.weight.data.norm().item()
            return x * n * scale

    def train(model, loader, optimizer):
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.data.normal_(0, 0.02)  # before the training loop: set-up
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            for p in model.parameters():
                buf = torch.zeros_like(p.data)
                rank = p.data.dim()
                snapshot = p.data.clone()
            optimizer.step()
    """
    assert _lines(src, "SL204") == []


def test_sl204_still_flags_the_hazards() -> None:
    src = """\
    class Block(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(dim, dim))

        def forward(self, x):
            w = self.weight.data
            return x @ w

    def train(model, loader, optimizer):
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            for p in model.parameters():
                p.data.mul_(0.9)
            optimizer.step()
    """
    assert _lines(src, "SL204") == [7, 15]


def test_sl204_a_write_through_data_is_hidden_from_autograd() -> None:
    """What SL204 keeps: a write through `.data` bumps no version counter, so backward uses
    the changed value silently; the same write on the tensor under no_grad is caught."""
    w = torch.nn.Parameter(torch.ones(3))
    x = torch.ones(3, requires_grad=True)
    y = (x * w).sum()  # saves w for x's gradient
    w.data.mul_(2.0)
    y.backward()  # no error: the gradient uses the doubled weight
    assert x.grad is not None and x.grad.tolist() == [2.0, 2.0, 2.0]
    w2 = torch.nn.Parameter(torch.ones(3))
    y2 = (x * w2).sum()
    with torch.no_grad():
        w2.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y2.backward()
    # A read for metadata or a copy: nothing aliases the storage, nothing to hide.
    p = torch.nn.Parameter(torch.ones(3))
    buf = torch.zeros_like(p.data)
    copy = p.data.clone()
    assert buf.untyped_storage().data_ptr() != p.untyped_storage().data_ptr()
    assert copy.untyped_storage().data_ptr() != p.untyped_storage().data_ptr()


# --------------------------------------------------------------------------------- SL217
def test_sl217_silent_where_nothing_hooks_the_module() -> None:
    src = """\
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
        def forward(self, x):
            return self.fc.forward(x)
        def predict(self, x):
            return self.forward(x).argmax(-1)
    net = Net()
    out = net.forward(torch.randn(2, 3))
    """
    assert _lines(src, "SL217") == []
    scope = _run(src)
    x = torch.randn(2, 3)
    assert torch.equal(scope["net"].forward(x), scope["net"](x))  # no hook: the same call


def test_sl217_flags_a_module_hooked_in_the_file() -> None:
    src = """\
    from torch.nn.utils import weight_norm
    calls = []
    layer = weight_norm(nn.Linear(3, 3))
    x = torch.randn(2, 3)
    with torch.no_grad():
        layer.weight_g.mul_(2.0)
    direct = layer.forward(x)
    called = layer(x)
    """
    assert _lines(src, "SL217") == [7]
    scope = _run(src)
    # weight_norm recomputes `weight` from weight_g / weight_v in a forward pre-hook:
    # `.forward` skipped it and used the stale weight.
    assert not torch.allclose(scope["direct"], scope["called"])


def test_sl217_compiled_in_place_runs_uncompiled_forward() -> None:
    src = """\
    net = nn.Linear(3, 3)
    net.compile()
    y = net.forward(torch.randn(2, 3))
    """
    (finding,) = _found(src, "SL217")
    assert "uncompiled" in finding.message
    net = torch.nn.Linear(3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # importing dynamo warns about torch.jit
        net.compile()
    assert net._compiled_call_impl is not None  # used by `net(x)`, not by `net.forward(x)`


# --------------------------------------------------------------------------------- SL218
def test_sl218_module_attribute_freezes_nothing() -> None:
    src = """\
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(4, 4)
            self.head = nn.Linear(4, 2)
        def forward(self, x):
            return self.head(self.encoder(x))
    model = Net()
    model.encoder.requires_grad = False
    head = nn.Linear(2, 2)
    head.requires_grad = False
    """
    assert _lines(src, "SL218") == [9, 11]
    scope = _run(src)
    assert all(p.requires_grad for p in scope["model"].encoder.parameters())  # nothing frozen
    assert all(p.requires_grad for p in scope["head"].parameters())
    fixed = _run(src.replace(".requires_grad = False", ".requires_grad_(False)"))
    assert not any(p.requires_grad for p in fixed["model"].encoder.parameters())


def test_sl218_silent_on_tensors_and_unknown_objects() -> None:
    src = """\
    model = nn.Linear(4, 4)
    for p in model.parameters():
        p.requires_grad = False
    model.weight.requires_grad = False
    def freeze(module):
        module.requires_grad = False
    class Stored(nn.Module):
        def __init__(self, requires_grad=True):
            super().__init__()
            self.requires_grad = requires_grad
    """
    assert _lines(src, "SL218") == []
    assert not _run(src)["model"].weight.requires_grad  # the tensor flag works
