"""Names for symbolic sizes: every size is written as a Python expression over names the
user can see at that line (`B`, `x.shape[0]`, `self.n_head`, `C // self.n_head`).

An atom (one unknown integer) is created with the path it came from. Binding a size to a
name (`B, T, C = x.shape`, `self.n_head = n_head`) adds that name as another path. A path is
only used where it still leads to the same size: the interpreter resolves it in the scope of
the line (`resolve`), so `x.shape[0]` is not offered after `x` was rebound to another
tensor, and no invented symbol (`s0`) ever reaches a user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stridelens.server.analysis import sizes as sz
from stridelens.server.analysis.conditions import Condition
from stridelens.server.analysis.facts import RenderedLayout
from stridelens.server.analysis.layouts import Layout
from stridelens.server.analysis.sizes import Size, SymExpr

# ("x", "shape", "[0]") is `x.shape[0]`; ("self", "n_head") is `self.n_head`.
Path = tuple[str, ...]

MAX_NAMES_PER_EXPR = 24


def path_text(path: Path) -> str:
    out = path[0]
    for step in path[1:]:
        out += step if step.startswith("[") else f".{step}"
    return out


@dataclass
class NameContext:
    """How to check paths at one line: `resolve(path)` is the size the path leads to there
    (or None), `tensor_name(key, layout)` a name bound to that tensor there (or None)."""

    resolve: Callable[[Path], Size | None]
    tensor_name: Callable[[int, object], str | None]
    # A size in the equalities known at that line (a fact recorded before a later line proved
    # two sizes equal still holds the older atom; its names resolve to the newer one).
    canon: Callable[[Size], Size] | None = None


class SizeNames:
    """The atoms of one analysis, and every path that names a size."""

    def __init__(self) -> None:
        self._next_atom = 0
        self.origins: dict[int, Path] = {}
        self.paths: dict[SymExpr, list[Path]] = {}
        self._memo: dict[tuple[object, ...], SymExpr] = {}

    def new_atom(self, origin: Path | None) -> SymExpr:
        self._next_atom += 1
        atom_id = self._next_atom
        if origin is not None:
            self.origins[atom_id] = origin
        return sz.atom(atom_id)

    def atom_for(self, key: tuple[object, ...], origin: Path | None) -> SymExpr:
        """The same atom each time `key` is asked for (an opaque path, a module argument)."""
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self.new_atom(origin)
        return found

    def peek(self, key: tuple[object, ...]) -> SymExpr | None:
        return self._memo.get(key)

    def add_path(self, size: Size, path: Path) -> None:
        if not isinstance(size, SymExpr):
            return
        known = self.paths.setdefault(size, [])
        if path not in known and len(known) < MAX_NAMES_PER_EXPR:
            known.insert(0, path)  # the newest name first: the one people just wrote

    def merge(self, old: SymExpr, new: Size) -> None:
        """`old` was proved equal to `new`: its names name `new` too."""
        if not isinstance(new, SymExpr):
            return
        target = self.paths.setdefault(new, [])
        for path in self.paths.get(old, []):
            if path not in target:
                target.append(path)
        origins = [self.origins[a] for a in old.atoms() if a in self.origins]
        for path in origins:
            if path not in target:
                target.append(path)

    # ------------------------------------------------------------------ rendering
    def render_size(self, size: Size, ctx: NameContext, cache: dict[Path, Size | None]) -> str | None:
        if isinstance(size, int):
            return str(size)
        if ctx.canon is not None:
            size = ctx.canon(size)
            if isinstance(size, int):
                return str(size)

        def valid(path: Path, target: Size) -> bool:
            if path not in cache:
                cache[path] = ctx.resolve(path)
            return cache[path] == target

        whole = next(
            (path_text(p) for p in sorted(self.paths.get(size, ()), key=lambda p: len(path_text(p))) if p and valid(p, size)),
            None,
        )

        def name_of(atom_id: int) -> str | None:
            target = sz.atom(atom_id)
            origin = self.origins.get(atom_id)
            candidates = [*self.paths.get(target, ()), *([origin] if origin else [])]
            for path in sorted(candidates, key=lambda p: len(path_text(p)) if p else 0):
                if path and valid(path, target):
                    return path_text(path)
            return None

        # The shorter of a name for the whole size (`hs`) and one built from its parts
        # (`3 * C` rather than `self.c_attn.out_features`).
        built = sz.render(size, name_of)
        if whole is None or (built is not None and len(built) <= len(whole)):
            return built
        return whole

    def render_all(
        self, items: tuple[Size, ...] | None, ctx: NameContext, cache: dict[Path, Size | None], partial: bool = False
    ) -> tuple[int | str | None, ...] | None:
        """Each size in the names of `ctx`; None when one has no name, or (`partial`, for a
        shape: its rank is still a fact) that entry None."""
        if items is None:
            return None
        out: list[int | str | None] = []
        for item in items:
            text = self.render_size(item, ctx, cache)
            if text is None and not partial:
                return None
            # (a size proved equal to a literal renders as that int, not as the text "8")
            out.append(item if isinstance(item, int) else int(text) if text is not None and text.isdigit() else text)
        return tuple(out)

    def render_condition(self, cond: Condition, ctx: NameContext, cache: dict[Path, Size | None]) -> str | None:
        if cond.kind == "contiguous":
            if cond.tensor_key is None:
                return None
            name = ctx.tensor_name(cond.tensor_key, cond.tensor_layout)
            return None if name is None else f"{name}.is_contiguous()"
        if cond.a is None or cond.b is None:
            return None
        a = self.render_size(cond.a, ctx, cache)
        b = self.render_size(cond.b, ctx, cache)
        if a is None or b is None:
            return None
        if cond.kind == "ne":
            return f"{a} != {b}"
        if cond.kind == "divides":
            return f"{_paren(a)} % {_paren(b)} == 0"
        if cond.kind == "le":
            return f"{a} <= {b}"
        if cond.kind == "ge":
            return f"{a} >= {b}"
        return None

    def render_layout(self, layout: Layout | None, conditions: frozenset[Condition], ctx: NameContext) -> RenderedLayout | None:
        """A symbolic layout and the conditions it holds under, in the names of `ctx`."""
        cache: dict[Path, Size | None] = {}
        if layout is None:
            # No sizes to write (a layer's output of an input of unknown rank): only the
            # conditions its other facts hold under (`x.is_contiguous()`).
            if not conditions:
                return None
            shape: Any = None
            strides: Any = None
            offset: int | str | None = None
        else:
            shape = self.render_all(layout.shape, ctx, cache, partial=True)
            strides = self.render_all(layout.strides, ctx, cache)
            offset = None
            if isinstance(layout.offset, int):
                offset = layout.offset
            elif layout.offset is not None:
                offset = self.render_size(layout.offset, ctx, cache)
        assumes: list[str] = []
        layout_ok = True
        for cond in sorted(conditions, key=_condition_order):
            text = self.render_condition(cond, ctx, cache)
            if text is None:
                if not cond.layout_only:
                    shape = None  # the shape itself needs a condition nobody can read
                layout_ok = False
                continue
            if text not in assumes:
                assumes.append(text)
            if cond.kind == "contiguous" and (strides is not None or offset is not None):
                # The layout taken for a parameter is row-major from its first element: a
                # contiguous view (`buf[1:]`) starts further on, and so do views of it.
                start = text.removesuffix(".is_contiguous()") + ".storage_offset() == 0"
                if start not in assumes:
                    assumes.append(start)
        if not layout_ok:
            strides, offset = None, None
        if shape is None and strides is None and offset is None and not assumes:
            return None
        # Strides are rendered whole or not at all (no None entries).
        return RenderedLayout(shape, strides, offset, tuple(assumes), layout_ok)  # type: ignore[arg-type]


def _paren(text: str) -> str:
    return f"({text})" if " " in text else text


def _condition_order(cond: Condition) -> tuple[int, str, str, str, int]:
    # Total over what is rendered: with `b` left out, `T % 4 == 0` and `T % 8 == 0` came out
    # in the set's order, which differs between processes (string hashes are randomized).
    return ({"divides": 0, "le": 1, "ge": 1, "ne": 2, "contiguous": 3}.get(cond.kind, 4), repr(cond.a), repr(cond.b), cond.tensor_name or "", cond.tensor_key or 0)
