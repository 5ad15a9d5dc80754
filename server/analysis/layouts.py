"""The stride algebra: what view-like ops do to (shape, strides, offset), over symbolic sizes.

These functions follow torch's own definitions (`computeStride` for `view`, `is_contiguous`,
the stride rules of `permute`/`unsqueeze`/`expand`/indexing) and work on `int`s and on
`SymExpr`s alike. On ints they are exact (tests compare them with torch on random programs and
sizes, size-1 dims included); on expressions they give the *generic* answer, true when every
atom is >= 2, or `UNDECIDED` where even that depends on the sizes. Where the layout rules need
to know which sizes would change a verdict, `symbolic_ops` substitutes 1 and asks again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.sizes import Size, SymExpr


class Undecided(Exception):
    """The answer depends on the values of the sizes (beyond "every atom >= 2")."""


@dataclass(frozen=True)
class Layout:
    shape: tuple[Size, ...]
    strides: tuple[Size, ...] | None  # None: the layout is unknown, only the shape is
    offset: Size | None = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def substitute(self, values: dict[int, Size]) -> Layout | None:
        shape = _subs_all(self.shape, values)
        if shape is None:
            return None
        strides = None if self.strides is None else _subs_all(self.strides, values)
        offset = None if self.offset is None else sz.substitute(self.offset, values)
        return Layout(shape, strides, offset)

    def atoms(self) -> frozenset[int]:
        found: frozenset[int] | None = self.__dict__.get("_atoms")
        if found is None:  # kept on the instance: a layout is asked at every op it reaches
            out: set[int] = set()
            for x in (*self.shape, *(self.strides or ()), self.offset):
                if isinstance(x, SymExpr):
                    out |= x.atoms()
            found = self.__dict__["_atoms"] = frozenset(out)
        return found


def _subs_all(items: tuple[Size, ...], values: dict[int, Size]) -> tuple[Size, ...] | None:
    out = []
    for x in items:
        y = sz.substitute(x, values)
        if y is None:
            return None
        out.append(y)
    return tuple(out)


def _need(x: Size | None) -> Size:
    if x is None:
        raise Undecided
    return x


# ------------------------------------------------------------------ comparisons
def equal(a: Size, b: Size) -> bool:
    """a == b for every value of the atoms (the same canonical expression)."""
    return a == b


def differs(a: Size, b: Size) -> bool:
    """a != b whenever every size is >= 2 (generic); Undecided when they may be equal.

    Decided by bounds: with atoms >= 2, a term with only positive powers is at least
    c * 2**degree, one with only negative powers lies in (0, c / 2**degree], one with mixed
    powers (an exact quotient the code formed) is a size, at least 2c; if the positive
    terms' lower bound exceeds the negative terms' upper bound (or the reverse), the
    difference is never 0."""
    d = sz.sub(a, b)
    if d is None:
        raise Undecided
    if isinstance(d, int):
        return d != 0
    d = _without_common_factor(d)
    if isinstance(d, int):
        return d != 0
    pos_low = pos_high = neg_low = neg_high = sz.Fraction(0)
    inf = False
    pos_inf = neg_inf = False
    for m, c in d.terms:
        low, high, unbounded = _term_bounds(m, sz.Fraction(c if c > 0 else -c))
        if c > 0:
            pos_low += low
            pos_high += high
            pos_inf = pos_inf or unbounded
        else:
            neg_low += low
            neg_high += high
            neg_inf = neg_inf or unbounded
    del inf
    if (not neg_inf and pos_low > neg_high) or (not pos_inf and neg_low > pos_high):
        return True
    raise Undecided


def _term_bounds(m: sz.Monomial, c: sz.Fraction) -> tuple[sz.Fraction, sz.Fraction, bool]:
    """(lower bound, upper bound, unbounded above) of c * m for atoms >= 2."""
    if not m:
        return c, c, False
    degree = sum(e for _, e in m)
    if all(e > 0 for _, e in m):
        return c * 2**degree, c * 2**degree, True
    if all(e < 0 for _, e in m):
        return sz.Fraction(0), c / sz.Fraction(2) ** (-degree), False
    # Mixed powers come from the code's own exact quotients (`W // ws`, `C // n_head`):
    # sizes too, so generically >= 2 like every size (`flip_conditions` asks about 1).
    return 2 * c, 2 * c, True


def _without_common_factor(d: SymExpr) -> Size:
    """d divided by the largest monomial dividing all its terms (atoms are positive, so this
    does not change whether d is 0): `T*C - T` becomes `C - 1`."""
    common: dict[int, int] | None = None
    for m, _ in d.terms:
        powers = dict(m)
        if common is None:
            common = powers
        else:
            common = {a: min(e, powers.get(a, 0)) for a, e in common.items() if a in powers}
    factor = tuple(sorted((a, e) for a, e in (common or {}).items() if e))
    if not factor:
        return d
    divisor = sz.SymExpr({factor: sz.Fraction(1)})
    out = sz.exact_div(d, divisor)
    return d if out is None else out


def is_one(size: Size) -> bool:
    """size == 1; a symbolic size is generically not 1 (the caller substitutes 1 to check)."""
    if isinstance(size, int):
        return size == 1
    if len(size.terms) == 1 and size.terms[0][1] > 0:
        return False  # a size (`T`, `C // n_head`): generically >= 2
    if differs(size, 1):
        return False
    raise Undecided


def is_zero(size: Size) -> bool:
    if isinstance(size, int):
        return size == 0
    return not differs(size, 0)


# ------------------------------------------------------------------ basics
def contiguous_strides(shape: tuple[Size, ...]) -> tuple[Size, ...]:
    strides: list[Size] = []
    running: Size = 1
    for size in reversed(shape):
        strides.append(running)
        # torch multiplies by max(size, 1): a 0-size dim does not zero the strides before it.
        factor = size if not (isinstance(size, int) and size == 0) else 1
        running = _need(sz.mul(running, factor))
    return tuple(reversed(strides))


def contiguous(shape: tuple[Size, ...]) -> Layout:
    return Layout(tuple(shape), contiguous_strides(shape), 0)


def numel(shape: tuple[Size, ...]) -> Size:
    return _need(sz.product(shape))


def is_contiguous(layout: Layout) -> bool:
    """torch's `is_contiguous()`: dense row-major, ignoring the strides of size-1 dims."""
    if layout.strides is None:
        raise Undecided
    if any(isinstance(s, int) and s == 0 for s in layout.shape):
        return True
    expected: Size = 1
    for size, stride in zip(reversed(layout.shape), reversed(layout.strides), strict=True):
        if is_one(size):
            continue
        if differs(stride, expected):
            return False
        expected = _need(sz.mul(expected, size))
    return True


def _dim(d: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


# ------------------------------------------------------------------ view ops
def permute(layout: Layout, dims: tuple[int, ...]) -> Layout:
    if len(dims) != layout.ndim:
        raise ValueError("number of dims don't match in permute")
    order = [_dim(d, layout.ndim) for d in dims]
    if len(set(order)) != len(order):
        raise ValueError("repeated dim in permute")
    strides = None if layout.strides is None else tuple(layout.strides[d] for d in order)
    return Layout(tuple(layout.shape[d] for d in order), strides, layout.offset)


def transpose(layout: Layout, d0: int, d1: int) -> Layout:
    if layout.ndim == 0:
        return layout
    order = list(range(layout.ndim))
    a, b = _dim(d0, layout.ndim), _dim(d1, layout.ndim)
    order[a], order[b] = order[b], order[a]
    return permute(layout, tuple(order))


def unsqueeze(layout: Layout, dim: int) -> Layout:
    d = _dim(dim, layout.ndim + 1)
    shape = (*layout.shape[:d], 1, *layout.shape[d:])
    if layout.strides is None:
        return Layout(shape, None, layout.offset)
    stride: Size = 1 if d >= layout.ndim else _need(sz.mul(layout.shape[d], layout.strides[d]))
    return Layout(shape, (*layout.strides[:d], stride, *layout.strides[d:]), layout.offset)


def squeeze(layout: Layout, dims: tuple[int, ...] | None) -> Layout:
    keep = []
    targets = range(layout.ndim) if dims is None else {_dim(d, layout.ndim) for d in dims}
    for i, size in enumerate(layout.shape):
        if i in targets and is_one(size):
            continue
        keep.append(i)
    strides = None if layout.strides is None else tuple(layout.strides[i] for i in keep)
    return Layout(tuple(layout.shape[i] for i in keep), strides, layout.offset)


def expand(layout: Layout, new: tuple[Size, ...]) -> Layout:
    if len(new) < layout.ndim:
        raise ValueError("the number of sizes provided must be greater or equal to the number of dimensions")
    lead = len(new) - layout.ndim
    shape: list[Size] = []
    strides: list[Size] = []
    for i, target in enumerate(new):
        if i < lead:
            if isinstance(target, int) and target < 0:
                raise ValueError("expanded size must be >= 0 for a new leading dim")
            shape.append(target)
            strides.append(0)
            continue
        size = layout.shape[i - lead]
        stride = layout.strides[i - lead] if layout.strides is not None else None
        if isinstance(target, int) and target == -1:
            target = size
        if equal(target, size):
            shape.append(size)
            strides.append(_need(stride) if layout.strides is not None else 0)
        elif is_one(size):
            shape.append(target)
            strides.append(0)
        else:
            raise ValueError("expanded size must match the existing size at a non-singleton dim")
    return Layout(tuple(shape), tuple(strides) if layout.strides is not None else None, layout.offset)


def infer_shape(shape: tuple[Size, ...], total: Size) -> tuple[Size, ...]:
    """`view`/`reshape` sizes with one `-1` filled in; ValueError when numel differs."""
    holes = [i for i, s in enumerate(shape) if isinstance(s, int) and s == -1]
    if len(holes) > 1:
        raise ValueError("only one dimension can be inferred")
    known = _need(sz.product(s for i, s in enumerate(shape) if i not in holes))
    if holes:
        if is_zero(known):
            raise Undecided
        filled = sz.exact_div(total, known)
        if filled is None:
            raise Undecided
        if isinstance(filled, SymExpr) and not filled.atoms():
            raise ValueError(f"shape '{list(shape)}' is invalid for input of size {total}")
        out = list(shape)
        out[holes[0]] = filled
        return tuple(out)
    if not equal(known, total):
        if isinstance(known, int) and isinstance(total, int):
            raise ValueError(f"shape '{list(shape)}' is invalid for input of size {total}")
        raise Undecided
    return tuple(shape)


def view_strides(layout: Layout, new: tuple[Size, ...]) -> tuple[Size, ...] | None:
    """torch's computeStride: the strides `view(new)` would have, or None when it raises."""
    old, old_strides = layout.shape, layout.strides
    if old_strides is None:
        raise Undecided
    if not old:
        return contiguous_strides(new)
    total = numel(old)
    if is_zero(total) and tuple(old) == tuple(new):
        return old_strides
    if is_zero(total):
        raise Undecided  # torch's 0-numel branch: not worth modelling
    new_strides: list[Size] = [0] * len(new)
    view_d = len(new) - 1
    chunk_base: Size = old_strides[-1]
    tensor_numel: Size = 1
    view_numel: Size = 1
    tensor_dims: list[Size] = []
    view_dims: list[Size] = []
    for tensor_d in range(len(old) - 1, -1, -1):
        tensor_numel = _need(sz.mul(tensor_numel, old[tensor_d]))
        tensor_dims.append(old[tensor_d])
        boundary = tensor_d == 0 or (
            not is_one(old[tensor_d - 1])
            and differs(old_strides[tensor_d - 1], _need(sz.mul(tensor_numel, chunk_base)))
        )
        if boundary:
            while view_d >= 0:
                less = _product_lt(view_dims, tensor_dims, new[: view_d + 1])
                if not (less or is_one(new[view_d])):
                    break
                new_strides[view_d] = _need(sz.mul(view_numel, chunk_base))
                view_numel = _need(sz.mul(view_numel, new[view_d]))
                view_dims.append(new[view_d])
                view_d -= 1
            if view_numel != tensor_numel and differs(view_numel, tensor_numel):
                return None
            if tensor_d > 0:
                chunk_base = old_strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
                tensor_dims = []
                view_dims = []
    if view_d != -1:
        return None
    return tuple(new_strides)


def _product_lt(small: list[Size], large: list[Size], upcoming: tuple[Size, ...] = ()) -> bool:
    """prod(small) < prod(large), for lists of dim sizes (each a size: >= 2 generically).

    Dims equal on both sides cancel; what is left decides: only large dims left means a
    product of sizes > 1, only small dims left means < 1. Otherwise, if the ratio is the
    product of the next new dims (`upcoming`, innermost last), it is a product of sizes."""
    ratio = sz.exact_div(_need(sz.product(large)), _need(sz.product(small)))
    if ratio is not None:
        if ratio == 1:
            return False
        acc: Size = 1
        for size in reversed(upcoming):
            acc = _need(sz.mul(acc, size))
            if acc == ratio:
                return True
    rest = list(large)
    left: list[Size] = []
    for size in small:
        if size in rest:
            rest.remove(size)
        else:
            left.append(size)
    rest = [s for s in rest if not (isinstance(s, int) and s == 1)]
    left = [s for s in left if not (isinstance(s, int) and s == 1)]
    if not left and not rest:
        return False
    if not left:
        if all(isinstance(s, SymExpr) or s > 1 for s in rest):
            return True
    if not rest:
        if all(isinstance(s, SymExpr) or s > 1 for s in left):
            return False
    less = sz.generic_lt(_need(sz.product(left)), _need(sz.product(rest)))
    if less is None:
        raise Undecided
    return less


def view(layout: Layout, shape: tuple[Size, ...]) -> Layout | None:
    """The layout of `view(shape)`, or None when torch raises "view size is not compatible"."""
    new = infer_shape(shape, numel(layout.shape))
    strides = view_strides(layout, new)
    return None if strides is None else Layout(new, strides, layout.offset)


def reshape(layout: Layout, shape: tuple[Size, ...]) -> tuple[Layout, bool]:
    """The layout of `reshape(shape)`, and whether it is a view (else a contiguous copy)."""
    new = infer_shape(shape, numel(layout.shape))
    if layout.strides is None:
        raise Undecided
    strides = view_strides(layout, new)
    if strides is None:
        return contiguous(new), False
    return Layout(new, strides, layout.offset), True


def flatten_shape(shape: tuple[Size, ...], start: int, end: int) -> tuple[Size, ...]:
    if not shape:
        return (1,)
    a, b = _dim(start, len(shape)), _dim(end, len(shape))
    if a > b:
        raise ValueError("flatten() has invalid args: start_dim cannot come after end_dim")
    merged = _need(sz.product(shape[a : b + 1]))
    return (*shape[:a], merged, *shape[b + 1 :])


def flatten(layout: Layout, start: int, end: int) -> tuple[Layout, bool]:
    """`flatten(start, end)`: torch returns the input itself when there is nothing to merge."""
    if layout.ndim and _dim(start, layout.ndim) == _dim(end, layout.ndim):
        return layout, True
    return reshape(layout, flatten_shape(layout.shape, start, end))


def select(layout: Layout, dim: int, index: int) -> Layout:
    d = _dim(dim, layout.ndim)
    size = layout.shape[d]
    if isinstance(size, int) and not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for dimension {d} with size {size}")
    shape = layout.shape[:d] + layout.shape[d + 1 :]
    if layout.strides is None or layout.offset is None:
        return Layout(shape, None, None)
    position = index if index >= 0 else _need(sz.add(size, index))
    offset = _need(sz.add(layout.offset, _need(sz.mul(position, layout.strides[d]))))
    return Layout(shape, layout.strides[:d] + layout.strides[d + 1 :], offset)


def slice_dim(layout: Layout, dim: int, start: Size | None, stop: Size | None, step: int) -> Layout:
    """`x[..., start:stop:step, ...]` where the result size needs no clamping to be known."""
    d = _dim(dim, layout.ndim)
    size = layout.shape[d]
    if step <= 0:
        raise ValueError("slice step must be positive")
    begin: Size = 0 if start is None else start
    end: Size = size if stop is None else stop
    for bound in (begin, end):
        if isinstance(bound, int) and bound < 0:
            if isinstance(size, int):
                continue
            raise Undecided
    if isinstance(size, int) and isinstance(begin, int) and isinstance(end, int):
        begin, end = _clamp(begin, size), _clamp(end, size)
        length: Size = max(0, (end - begin + step - 1) // step)
    else:
        if not (equal(end, size) or stop is None) and not isinstance(end, SymExpr):
            raise Undecided
        span = _need(sz.sub(end, begin))
        if step != 1:
            raise Undecided
        length = span
    shape = (*layout.shape[:d], length, *layout.shape[d + 1 :])
    if layout.strides is None or layout.offset is None:
        return Layout(shape, None, None)
    offset = _need(sz.add(layout.offset, _need(sz.mul(begin, layout.strides[d]))))
    stride = _need(sz.mul(layout.strides[d], step))
    return Layout(shape, (*layout.strides[:d], stride, *layout.strides[d + 1 :]), offset)


def _clamp(i: int, size: int) -> int:
    if i < 0:
        i += size
    return min(max(i, 0), size)


def split_sizes(size: Size, split: Size) -> list[Size]:
    """`split(split_size)` pieces of a dim of `size`."""
    if isinstance(size, int) and isinstance(split, int):
        if split <= 0:
            raise ValueError("split_size must be positive")
        pieces: list[Size] = [split] * (size // split)
        if size % split:
            pieces.append(size % split)
        return pieces or [0]
    count = sz.exact_div(size, split)
    if not isinstance(count, int) or count <= 0 or count > 64:
        raise Undecided
    return [split] * count


def chunk_sizes(size: Size, chunks: int) -> list[Size]:
    if chunks <= 0:
        raise ValueError("chunk expects `chunks` to be greater than 0")
    if isinstance(size, int):
        per_chunk = -(-size // chunks) if size else 0
        return split_sizes(size, per_chunk) if per_chunk else [0]
    each = sz.exact_div(size, chunks)
    if each is None or (isinstance(each, SymExpr) and any(c.denominator != 1 for _, c in each.terms)):
        raise Undecided
    return [each] * chunks


def narrow(layout: Layout, dim: int, start: Size, length: Size) -> Layout:
    d = _dim(dim, layout.ndim)
    shape = (*layout.shape[:d], length, *layout.shape[d + 1 :])
    if layout.strides is None or layout.offset is None:
        return Layout(shape, None, None)
    offset = _need(sz.add(layout.offset, _need(sz.mul(start, layout.strides[d]))))
    return Layout(shape, layout.strides, offset)


# ------------------------------------------------------------------ shapes of new tensors
def broadcast_shapes(*shapes: tuple[Size, ...], undecided: Callable[[], Size] | None = None) -> tuple[Size, ...]:
    """Where two sizes may each be 1 or equal, `undecided()` stands for the result's (in
    every run past the op it is the larger one), else `Undecided` is raised."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Size] = []
    for i in range(ndim):
        size: Size = 1
        for shape in shapes:
            j = i - (ndim - len(shape))
            if j < 0:
                continue
            other = shape[j]
            if is_one(other) or equal(other, size):
                continue
            if is_one(size):
                size = other
                continue
            if isinstance(size, int) and isinstance(other, int):
                raise ValueError(f"The size of tensor a ({size}) must match the size of tensor b ({other})")
            if undecided is None:
                raise Undecided
            size = undecided()
            break
        out.append(size)
    return tuple(out)


def matmul_shape(a: tuple[Size, ...], b: tuple[Size, ...]) -> tuple[Size, ...]:
    if not a or not b:
        raise ValueError("both arguments to matmul need to be at least 1D")
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return (*b[:-2], b[-1])
    batch = broadcast_shapes(a[:-2], b[:-2])
    return (*batch, a[-2], b[-1])


def reduce_shape(shape: tuple[Size, ...], dims: tuple[int, ...] | None, keepdim: bool) -> tuple[Size, ...]:
    if dims is None:
        return tuple(1 for _ in shape) if keepdim else ()
    targets = {_dim(d, len(shape)) for d in dims}
    if keepdim:
        return tuple(1 if i in targets else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in targets)


def conv_out(size: Size, kernel: int, stride: int, padding: int, dilation: int) -> Size:
    """floor((size + 2p - d(k-1) - 1) / s) + 1, exact only when it needs no floor."""
    span = _need(sz.add(size, 2 * padding - dilation * (kernel - 1) - 1))
    if isinstance(span, int):
        return span // stride + 1
    if stride == 1:
        return _need(sz.add(span, 1))
    raise Undecided
