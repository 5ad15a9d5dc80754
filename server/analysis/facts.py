"""What the analysis knows about a tensor-valued expression.

A `TensorFact` is the abstract value of the interpreter. Every field may be `None`,
meaning *unknown*: the engine never guesses. Exact layout fields (shape, strides,
storage_offset, contiguous) come from replaying the op on a meta tensor; the
symbolic fields (view_of, carries_graph, detached_from, permuted_by) survive where
sizes are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Provenance:
    """Why a fact holds: the op that made it so, and where."""

    what: str  # e.g. "non-contiguous", "view of `a`", "copy"
    because: str  # e.g. "permute(0, 2, 1)"
    line: int  # 1-based

    def render(self) -> str:
        return f"{self.what}: {self.because} at line {self.line}"


@dataclass(frozen=True)
class TensorFact:
    shape: tuple[int, ...] | None = None
    dtype: str | None = None  # "float32", ...
    device: str | None = None  # "cpu", "cuda", ...
    strides: tuple[int, ...] | None = None
    storage_offset: int | None = None
    contiguous: bool | None = None
    is_view: bool | None = None
    # The variable (as written in the source) whose storage this tensor shares.
    view_of: str | None = None
    # Number of elements of the storage this tensor looks into, when known.
    storage_numel: int | None = None
    element_size: int | None = None
    requires_grad: bool | None = None
    carries_graph: bool | None = None
    detached_from: str | None = None
    # Set when a permute/transpose-like op reordered dims (kept even when sizes are
    # unknown): "permute(0, 2, 1)".
    permuted_by: str | None = None
    provenance: tuple[Provenance, ...] = ()
    # Identity of the abstract storage: tensors with equal keys share memory.
    storage_key: int | None = None
    # The replayed meta tensor, when there is one (never leaves the engine's process).
    meta: Any = field(default=None, compare=False, repr=False)

    @property
    def known_layout(self) -> bool:
        return self.shape is not None and self.strides is not None

    @property
    def numel(self) -> int | None:
        if self.shape is None:
            return None
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        if n is None or self.element_size is None:
            return None
        return n * self.element_size

    @property
    def storage_nbytes(self) -> int | None:
        if self.storage_numel is None or self.element_size is None:
            return None
        return self.storage_numel * self.element_size

    def with_note(self, what: str, because: str, line: int) -> TensorFact:
        return replace(self, provenance=(*self.provenance, Provenance(what, because, line)))

    def notes(self) -> list[str]:
        return [p.render() for p in self.provenance]

    def to_json(self, expr: str) -> dict[str, Any]:
        """The `stridelens explain --format json` schema of DESIGN.md."""
        return {
            "expr": expr,
            "shape": list(self.shape) if self.shape is not None else None,
            "dtype": self.dtype,
            "device": self.device,
            "strides": list(self.strides) if self.strides is not None else None,
            "storage_offset": self.storage_offset,
            "contiguous": self.contiguous,
            "is_view": self.is_view,
            "view_of": self.view_of,
            "requires_grad": self.requires_grad,
            "notes": self.notes(),
        }


UNKNOWN = TensorFact()


@dataclass(frozen=True)
class ReplayEvent:
    """Something torch said while replaying an op: a raise, or a hidden copy."""

    kind: str  # "view-incompatible" | "reshape-copies" | "replay-error"
    line: int
    col: int  # 0-based, in UTF-8 bytes as `ast` reports them (see positions.py)
    end_line: int
    end_col: int
    message: str
    # Bytes copied by a reshape, when known.
    nbytes: int | None = None
