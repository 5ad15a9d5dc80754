"""Run released PyTorch code (tests/realcode/sources/, kept verbatim) for real on tiny inputs.

Every statement that assigns to a name (``x = ...``, ``a, b = ...``, ``x: T = ...``,
``x += ...``; at any depth: module level, class bodies, functions, methods) is instrumented
with two probe calls:

* before it runs: a shallow copy of the frame's ``locals()`` (the names as the line starts);
* after it runs: the values just bound to the assigned names, and a copy of ``locals()``.

The instrumented text is compiled under the source file's own path and executed in the test
process; then an entry point written here (not in the verbatim file) builds the model with a
tiny config and runs it the way its repository does (a training step: forward, loss,
backward, optimizer step; evaluation under ``torch.no_grad()``; generation).

Facts about tensors are taken at the moment of the probe (later in-place changes do not
leak into them). Expressions given by the caller (``pre_exprs``: the engine's symbolic sizes
and ``assumes``; ``post_exprs``: its ``view_of`` names) are evaluated at the probe too, in the
pre-statement (resp. post-statement) locals with the module namespace as globals, because the
shallow snapshots hold live objects (``self``, a config) that later code may mutate.
"""

from __future__ import annotations

import ast
import contextlib
import io
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SOURCES = Path(__file__).resolve().parent / "sources"

PRE = "__stridelens_pre__"
POST = "__stridelens_post__"


@dataclass(frozen=True)
class Probe:
    """One assigned name in the source: 1-based line, 0-based column (UTF-8 bytes, as
    `ast` reports it) of the name itself."""

    line: int
    col: int
    name: str


@dataclass(frozen=True)
class TensorObs:
    """A real tensor, as the probe saw it."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int
    contiguous: bool
    is_view: bool
    requires_grad: bool
    dtype: str
    device: str  # the device type ("cpu")
    device_str: str  # str(device) ("cpu", "cuda:0")
    storage_ptr: int

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorObs:
        return cls(
            shape=tuple(t.shape),
            strides=tuple(t.stride()),
            storage_offset=int(t.storage_offset()),
            contiguous=t.is_contiguous(),
            is_view=t._base is not None,
            requires_grad=t.requires_grad,
            dtype=str(t.dtype).removeprefix("torch."),
            device=t.device.type,
            device_str=str(t.device),
            storage_ptr=t.untyped_storage().data_ptr(),
        )


@dataclass(frozen=True)
class Evaluated:
    """An expression evaluated in a snapshot: its value, or the error it raised."""

    ok: bool
    value: Any = None
    error: str = ""


@dataclass(frozen=True)
class ViewTarget:
    """A `view_of` expression evaluated in the post-statement locals."""

    ok: bool
    is_tensor: bool = False
    is_base: bool = False  # real._base is the target
    same_storage: bool = False  # real and target share one storage
    error: str = ""
    kind: str = ""  # type name of the target


@dataclass
class Run:
    """One execution of one probe."""

    value: Any  # the value bound (a live reference)
    tensor: TensorObs | None  # its facts at the probe, when it is a tensor
    pre_locals: dict[str, Any]
    post_locals: dict[str, Any]
    evaluated: dict[str, Evaluated] = field(default_factory=dict)
    view_targets: dict[str, ViewTarget] = field(default_factory=dict)
    grad_enabled: bool = True  # torch.is_grad_enabled() as the statement started

    @property
    def kind(self) -> str:
        return "tensor" if self.tensor is not None else type(self.value).__name__


@dataclass
class FileRun:
    name: str
    path: Path
    source: str
    namespace: dict[str, Any]
    probes: list[Probe]
    runs: dict[Probe, list[Run]]
    stdout: str

    def tensor_observations(self) -> int:
        return sum(r.tensor is not None for runs in self.runs.values() for r in runs)


# --------------------------------------------------------------------------- instrumenting


def _target_names(target: ast.expr) -> list[ast.Name]:
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def assigned_names(stmt: ast.stmt) -> list[ast.Name]:
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in _target_names(t)]
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return _target_names(stmt.target)
    if isinstance(stmt, ast.AugAssign):
        return _target_names(stmt.target)
    return []


def probes_of(source: str) -> list[Probe]:
    out: set[Probe] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt):
            out.update(Probe(n.lineno, n.col_offset, n.id) for n in assigned_names(node))
    return sorted(out, key=lambda p: (p.line, p.col))


class _Instrument(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field_name in ("body", "orelse", "finalbody"):
            body = getattr(node, field_name, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            new: list[ast.stmt] = []
            for stmt in body:
                names = assigned_names(stmt)
                if not names:
                    new.append(stmt)
                    continue
                key = f"({stmt.lineno}, {stmt.col_offset})"
                values = "".join(f"{n.id}, " for n in names)
                pre = ast.parse(f"{PRE}({key}, locals())").body[0]
                post = ast.parse(f"{POST}({key}, locals(), ({values}))").body[0]
                new += [ast.copy_location(pre, stmt), stmt, ast.copy_location(post, stmt)]
            setattr(node, field_name, new)
        return node


def instrument(source: str, filename: str) -> Any:
    tree = ast.fix_missing_locations(_Instrument().visit(ast.parse(source)))
    # dont_inherit: this module's own `from __future__ import annotations` must not leak in.
    return compile(tree, filename, "exec", dont_inherit=True)


# --------------------------------------------------------------------------- running


def _evaluate(expr: str, globals_: dict[str, Any], locals_: dict[str, Any]) -> Evaluated:
    try:
        return Evaluated(True, eval(expr, globals_, dict(locals_)))
    except Exception as err:  # noqa: BLE001 - an engine expression that fails is a finding
        return Evaluated(False, error=f"{type(err).__name__}: {err}")


def view_target(expr: str, real: Any, globals_: dict[str, Any], locals_: dict[str, Any]) -> ViewTarget:
    found = _evaluate(expr, globals_, locals_)
    if not found.ok:
        return ViewTarget(False, error=found.error)
    target = found.value
    if not isinstance(target, torch.Tensor) or not isinstance(real, torch.Tensor):
        return ViewTarget(True, is_tensor=False, kind=type(target).__name__)
    return ViewTarget(
        True,
        is_tensor=True,
        is_base=real._base is target,
        same_storage=real.untyped_storage().data_ptr() == target.untyped_storage().data_ptr(),
        kind="tensor",
    )


def execute(
    name: str,
    pre_exprs: Mapping[Probe, Iterable[str]] | None = None,
    post_exprs: Mapping[Probe, Iterable[str]] | None = None,
) -> FileRun:
    """Run sources/<name>.py under its entry point; every run of every probe."""
    path = SOURCES / f"{name}.py"
    source = path.read_text(encoding="utf-8")
    probes = probes_of(source)
    by_stmt: dict[tuple[int, int], list[Probe]] = {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            names = assigned_names(node)
            if names:
                by_stmt[(node.lineno, node.col_offset)] = [
                    Probe(n.lineno, n.col_offset, n.id) for n in names
                ]
    pre_exprs = pre_exprs or {}
    post_exprs = post_exprs or {}
    runs: dict[Probe, list[Run]] = {p: [] for p in probes}
    pending: dict[tuple[int, int], list[tuple[dict[str, Any], dict[str, dict[str, Evaluated]], bool]]] = {}
    module = types.ModuleType(f"realcode_{name}")
    module.__file__ = str(path)
    namespace: dict[str, Any] = module.__dict__

    def pre(key: tuple[int, int], frame_locals: dict[str, Any]) -> None:
        snapshot = dict(frame_locals)
        evaluated: dict[str, dict[str, Evaluated]] = {}
        for probe in by_stmt[key]:
            exprs = pre_exprs.get(probe, ())
            evaluated[probe.name] = {e: _evaluate(e, namespace, snapshot) for e in exprs}
        # A stack per statement: recursion nests pre/post pairs; a statement that raises
        # leaves its entry behind, and the next pre pushes above it.
        pending.setdefault(key, []).append((snapshot, evaluated, torch.is_grad_enabled()))

    def post(key: tuple[int, int], frame_locals: dict[str, Any], values: tuple[Any, ...]) -> None:
        snapshot, evaluated, grad_enabled = pending[key].pop()
        after = dict(frame_locals)
        for probe, value in zip(by_stmt[key], values, strict=True):
            run = Run(
                value=value,
                tensor=TensorObs.of(value) if isinstance(value, torch.Tensor) else None,
                pre_locals=snapshot,
                post_locals=after,
                evaluated=evaluated.get(probe.name, {}),
                grad_enabled=grad_enabled,
            )
            for expr in post_exprs.get(probe, ()):
                run.view_targets[expr] = view_target(expr, value, namespace, after)
            runs[probe].append(run)

    namespace[PRE] = pre
    namespace[POST] = post
    out = io.StringIO()
    torch.manual_seed(0)
    # Registered while it runs, as an imported module would be (dataclasses look it up).
    sys.modules[module.__name__] = module
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out):
            warnings.simplefilter("ignore")
            exec(instrument(source, str(path)), namespace)  # released code, run on purpose: the oracle
            ENTRIES[name](namespace)
    finally:
        sys.modules.pop(module.__name__, None)
    return FileRun(name, path, source, namespace, probes, runs, out.getvalue())


# --------------------------------------------------------------------------- entry points
# How each file is used in its own repository, on tiny sizes (all >= 2 and distinct where we
# choose them) and two input shapes per model, so that no fact can hold by accident of one size.


def _nanogpt(ns: dict[str, Any]) -> None:
    # nanoGPT's train.py: forward with targets, backward, AdamW step; estimate_loss under
    # no_grad in eval mode; sample.py: generate().
    config = ns["GPTConfig"](block_size=8, vocab_size=11, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True)
    model = ns["GPT"](config)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    for b, t in ((2, 5), (3, 8)):
        x = torch.randint(0, 11, (b, t))
        y = torch.randint(0, 11, (b, t))
        _logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, 11, (4, 6)), torch.randint(0, 11, (4, 6)))
    model.generate(torch.randint(0, 11, (2, 3)), max_new_tokens=7, temperature=0.8, top_k=5)
    model.estimate_mfu(fwdbwd_per_iter=4, dt=0.5)
    model.get_num_params(non_embedding=False)

    # The attention path for torch < 2.0 (no scaled_dot_product_attention): what the
    # constructor does when `self.flash` is False; then model surgery with crop_block_size.
    config = ns["GPTConfig"](block_size=9, vocab_size=13, n_layer=2, n_head=3, n_embd=12, dropout=0.1, bias=False)
    model = ns["GPT"](config)
    for block in model.transformer.h:
        block.attn.flash = False
        mask = torch.tril(torch.ones(config.block_size, config.block_size))
        block.attn.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))
    model.train()
    x = torch.randint(0, 13, (2, 7))
    _logits, loss = model(x, torch.randint(0, 13, (2, 7)))
    loss.backward()
    model.crop_block_size(6)
    model.eval()
    model.generate(torch.randint(0, 13, (3, 4)), max_new_tokens=4)


def _word_language_model(ns: dict[str, Any]) -> None:
    # word_language_model/main.py: sequence-first batches (T, B), hidden state carried and
    # detached between batches, nll_loss on the flattened output; evaluate() under no_grad.
    ntokens = 11
    for rnn_type, tie in (("LSTM", False), ("GRU", True), ("RNN_TANH", False)):
        model = ns["RNNModel"](rnn_type, ntokens, 16, 16 if tie else 12, 2, dropout=0.2, tie_weights=tie)
        model.train()
        hidden = model.init_hidden(3)
        for _ in range(2):
            data = torch.randint(0, ntokens, (5, 3))
            targets = torch.randint(0, ntokens, (5, 3)).view(-1)
            hidden = tuple(h.detach() for h in hidden) if isinstance(hidden, tuple) else hidden.detach()
            model.zero_grad()
            output, hidden = model(data, hidden)
            loss = torch.nn.functional.nll_loss(output, targets)
            loss.backward()
        model.eval()
        with torch.no_grad():
            hidden = model.init_hidden(2)
            model(torch.randint(0, ntokens, (4, 2)), hidden)
    model = ns["TransformerModel"](ntokens, 16, 2, 24, 2, dropout=0.2)
    model.train()
    for t, b in ((5, 3), (7, 2)):
        output = model(torch.randint(0, ntokens, (t, b)))
        loss = torch.nn.functional.nll_loss(output.view(-1, ntokens), torch.randint(0, ntokens, (t * b,)))
        loss.backward()
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, ntokens, (6, 4)))
        model(torch.randint(0, ntokens, (6, 4)), has_mask=False)


def _fsdp2_model(ns: dict[str, Any]) -> None:
    # distributed/FSDP2/example.py trains this toy model on random tokens; here without FSDP.
    args = ns["ModelArgs"](n_layers=2, vocab_size=11, max_seq_len=8, dim=12, n_heads=3, dropout_p=0.1)
    model = ns["Transformer"](args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for b, t in ((2, 5), (3, 8)):
        x = torch.randint(0, 11, (b, t))
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, 11, (4, 6)))
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()


def _mingpt_ddp_model(ns: dict[str, Any]) -> None:
    # distributed/minGPT-ddp: GPTConfig from explicit sizes, create_optimizer, the trainer's
    # step (forward with targets, backward, step); evaluation under no_grad; generate().
    config = ns["GPTConfig"](n_layer=2, n_head=2, n_embd=16, vocab_size=11, block_size=8)
    model = ns["GPT"](config)
    optimizer = ns["create_optimizer"](model, ns["OptimizerConfig"]())
    for b, t in ((2, 5), (3, 8)):
        x = torch.randint(0, 11, (b, t))
        y = torch.randint(0, 11, (b, t))
        _logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model(torch.randint(0, 11, (4, 6)), torch.randint(0, 11, (4, 6)))
    model.generate(torch.randint(0, 11, (2, 3)), max_new_tokens=7, do_sample=True, top_k=4)
    model.generate(torch.randint(0, 11, (3, 2)), max_new_tokens=3, do_sample=False)
    # a named model type fills in the sizes
    config = ns["GPTConfig"](model_type="gpt-nano", vocab_size=7, block_size=6)
    model = ns["GPT"](config)
    model.eval()
    model.generate(torch.randint(0, 7, (2, 4)), max_new_tokens=3)


def _transformer_net(ns: dict[str, Any]) -> None:
    # fast_neural_style: training step on a batch of images (a stand-in loss), then
    # stylize() under no_grad on images of another size (a batch of 2, not its 1).
    model = ns["TransformerNet"]()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for b, h, w in ((2, 12, 16), (3, 16, 12)):
        images = torch.rand(b, 3, h, w)
        out = model(images)
        loss = torch.nn.functional.mse_loss(out, images)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model(torch.rand(2, 3, 20, 24))


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "nanogpt_model": _nanogpt,
    "word_language_model": _word_language_model,
    "fsdp2_model": _fsdp2_model,
    "mingpt_ddp_model": _mingpt_ddp_model,
    "transformer_net": _transformer_net,
}


def _load_entry_modules() -> None:
    """Entry points of further repositories live one module per repository in entries/,
    each with `ENTRIES: dict[file name, entry]` (a name appears once in all of them)."""
    import importlib
    import pkgutil

    from tests.realcode import entries

    for info in sorted(pkgutil.iter_modules(entries.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{entries.__name__}.{info.name}")
        for name, entry in module.ENTRIES.items():
            if name in ENTRIES:
                raise ValueError(f"{name}: two entry points ({info.name})")
            ENTRIES[name] = entry


_load_entry_modules()

FILES = tuple(ENTRIES)
