"""The stride algebra (`layouts.py`) agrees with torch: exactly on int sizes (size-1 dims
included), and generically on symbolic sizes (every assignment of atoms >= 2 gives torch's
answer for those sizes)."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stridelens.server.analysis import layouts as lay
from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.layouts import Layout


def _factorizations(n: int, rng: random.Random) -> tuple[int, ...]:
    """A random shape with `n` elements (with some size-1 dims)."""
    out = []
    while n > 1:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = rng.choice(divisors)
        out.append(d)
        n //= d
        if rng.random() < 0.2:
            out.append(1)
    rng.shuffle(out)
    return tuple(out) or (1,)


def _program(rng: random.Random, ndim: int) -> list[tuple]:
    ops = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(["permute", "transpose", "unsqueeze", "squeeze", "select", "slice", "view", "reshape", "flatten", "expand"])
        ops.append((kind, rng.random(), rng.random(), rng.random()))
    return ops


def _run_torch(t: torch.Tensor, op: tuple, rng_shape: tuple[int, ...] | None) -> torch.Tensor:
    kind, a, b, _ = op
    n = t.dim()
    if kind == "permute":
        order = list(range(n))
        random.Random(a).shuffle(order)
        return t.permute(order)
    if kind == "transpose":
        return t.transpose(int(a * n) if n else 0, int(b * n) if n else 0)
    if kind == "unsqueeze":
        return t.unsqueeze(int(a * (n + 1)))
    if kind == "squeeze":
        return t.squeeze(int(a * n)) if n else t
    if kind == "select":
        d = int(a * n) if n else None
        if d is None or t.shape[d] == 0:
            return t
        return t.select(d, int(b * t.shape[d]))
    if kind == "slice":
        if not n:
            return t
        d = int(a * n)
        index = [slice(None)] * n
        index[d] = slice(int(b * t.shape[d]), None)
        return t[tuple(index)]
    if kind in ("view", "reshape"):
        shape = rng_shape if rng_shape is not None else (-1,)
        return getattr(t, kind)(*shape)
    if kind == "flatten":
        if n < 2:
            return t.flatten()
        s = int(a * n)
        e = s + int(b * (n - s))
        return t.flatten(s, min(e, n - 1))
    if kind == "expand":
        return t.unsqueeze(0).expand(2, *t.shape)
    raise AssertionError(kind)


def _run_algebra(layout: Layout, op: tuple, new_shape: tuple | None) -> Layout:
    kind, a, b, _ = op
    n = layout.ndim
    if kind == "permute":
        order = list(range(n))
        random.Random(a).shuffle(order)
        return lay.permute(layout, tuple(order))
    if kind == "transpose":
        return lay.transpose(layout, int(a * n) if n else 0, int(b * n) if n else 0)
    if kind == "unsqueeze":
        return lay.unsqueeze(layout, int(a * (n + 1)))
    if kind == "squeeze":
        return lay.squeeze(layout, (int(a * n),)) if n else layout
    if kind == "select":
        if not n:
            return layout
        d = int(a * n)
        size = layout.shape[d]
        assert isinstance(size, int)
        return layout if size == 0 else lay.select(layout, d, int(b * size))
    if kind == "slice":
        if not n:
            return layout
        d = int(a * n)
        size = layout.shape[d]
        assert isinstance(size, int)
        return lay.slice_dim(layout, d, int(b * size), None, 1)
    if kind in ("view", "reshape"):
        shape = new_shape if new_shape is not None else (-1,)
        if kind == "view":
            out = lay.view(layout, shape)
            if out is None:
                raise RuntimeError("view size is not compatible")
            return out
        return lay.reshape(layout, shape)[0]
    if kind == "flatten":
        if n < 2:
            return lay.reshape(layout, (-1,))[0]
        s = int(a * n)
        e = min(s + int(b * (n - s)), n - 1)
        return lay.flatten(layout, s, e)[0]
    if kind == "expand":
        return lay.expand(lay.unsqueeze(layout, 0), (2, *layout.shape))
    raise AssertionError(kind)


def _check_same(layout: Layout, t: torch.Tensor) -> None:
    assert layout.shape == tuple(t.shape)
    if t.numel():
        assert layout.strides == tuple(t.stride())
        assert lay.is_contiguous(layout) == t.is_contiguous()
    assert layout.offset == t.storage_offset()


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10**9), st.sampled_from([1, 2, 4, 6, 8, 12, 24, 36]))
def test_algebra_equals_torch_on_int_sizes(seed: int, numel: int) -> None:
    rng = random.Random(seed)
    shape = _factorizations(numel, rng)
    t = torch.empty(shape, device="meta")
    layout = lay.contiguous(shape)
    for op in _program(rng, len(shape)):
        new_shape = _factorizations(t.numel(), rng) if op[0] in ("view", "reshape") else None
        try:
            t_next = _run_torch(t, op, new_shape)
        except (RuntimeError, IndexError, ValueError) as err:
            with pytest.raises((RuntimeError, IndexError, ValueError)):
                _run_algebra(layout, op, new_shape)
            assert "view" in str(err) or op[0] != "view" or "shape" in str(err)
            return
        layout = _run_algebra(layout, op, new_shape)
        t = t_next
        _check_same(layout, t)


SYMBOLIC_PROGRAMS = [
    # ops on an input of symbolic shape (B, T, C); strings in shapes name those sizes.
    [("transpose", 1, 2), ("view", ("B", -1))],
    [("transpose", 1, 2), ("reshape", ("B", -1))],
    [("permute", (0, 2, 1)), ("view", ("B", "C", "T"))],
    [("permute", (2, 0, 1)), ("view", ("C", "B*T"))],
    [("permute", (1, 0, 2)), ("view", ("T", -1))],
    [("view", ("B", "T", 4, "C/4")), ("transpose", 1, 2)],
    [("view", ("B", "T", 4, "C/4")), ("transpose", 1, 2), ("transpose", 1, 2), ("view", ("B", "T", "C"))],
    [("view", ("B", "T", 4, "C/4")), ("transpose", 1, 2), ("view", ("B", "T", "C"))],
    [("transpose", 0, 1), ("view", (-1,))],
    [("unsqueeze", 1), ("transpose", 0, 1), ("view", (-1,))],
    [("transpose", 1, 2), ("unsqueeze", 0), ("view", (1, "B", "C", "T"))],
    [("select", 1, -1), ("view", (-1,))],
    [("transpose", 0, 2), ("flatten", 1, 2)],
    [("transpose", 0, 2), ("flatten", 0, 1)],
]


def _shape_arg(spec: tuple, atoms: tuple[sz.Size, ...]) -> tuple[sz.Size, ...]:
    names = {"B": atoms[0], "T": atoms[1], "C": atoms[2]}
    out: list[sz.Size] = []
    for s in spec:
        if isinstance(s, int):
            out.append(s)
        elif s == "C/4":
            out.append(sz.exact_div(names["C"], 4))
        elif s == "B*T":
            out.append(sz.mul(names["B"], names["T"]))
        else:
            out.append(names[s])
    return tuple(out)


def _apply(layout_or_tensor, op, atoms, *, algebra: bool):
    kind = op[0]
    if kind == "transpose":
        return lay.transpose(layout_or_tensor, op[1], op[2]) if algebra else layout_or_tensor.transpose(op[1], op[2])
    if kind == "permute":
        return lay.permute(layout_or_tensor, op[1]) if algebra else layout_or_tensor.permute(op[1])
    if kind == "unsqueeze":
        return lay.unsqueeze(layout_or_tensor, op[1]) if algebra else layout_or_tensor.unsqueeze(op[1])
    if kind == "select":
        return lay.select(layout_or_tensor, op[1], op[2]) if algebra else layout_or_tensor.select(op[1], op[2])
    if kind == "flatten":
        if algebra:
            return lay.flatten(layout_or_tensor, op[1], op[2])[0]
        return layout_or_tensor.flatten(op[1], op[2])
    shape = _shape_arg(op[1], atoms)
    if algebra:
        if kind == "view":
            out = lay.view(layout_or_tensor, shape)
            if out is None:
                raise RuntimeError("view size is not compatible")
            return out
        return lay.reshape(layout_or_tensor, shape)[0]
    return getattr(layout_or_tensor, kind)(*shape)


@pytest.mark.parametrize("program", SYMBOLIC_PROGRAMS, ids=lambda p: " ".join(o[0] for o in p))
def test_symbolic_verdicts_hold_for_every_size_at_least_two(program: list[tuple]) -> None:
    atoms = tuple(sz.atom(a) for a in range(3))
    layout = lay.contiguous(atoms)
    generic_error = False
    try:
        for op in program:
            layout = _apply(layout, op, atoms, algebra=True)
    except RuntimeError:
        generic_error = True
    rng = random.Random(0)
    for _ in range(25):
        values = {0: rng.randint(2, 5), 1: rng.randint(2, 5), 2: 4 * rng.randint(2, 3)}  # every size >= 2, C // 4 too
        concrete = tuple(values[a] for a in range(3))
        t = torch.empty(concrete, device="meta")
        dims = tuple(sz.substitute(a, values) for a in atoms)
        try:
            for op in program:
                t = _apply(t, op, dims, algebra=False)
        except RuntimeError:
            assert generic_error, f"torch raised for {concrete}, the algebra did not"
            continue
        assert not generic_error, f"the algebra raised, torch did not for {concrete}"
        got = layout.substitute(values)
        assert got is not None
        _check_same(got, t)
