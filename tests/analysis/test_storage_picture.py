"""The storage picture: rows never exceed the width they are drawn for, a small view of a
huge storage is marked at its true position, and a small strided tensor shows its order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stridelens.server.analysis.facts import TensorFact
from stridelens.server.analysis.storage_picture import USED, render_storage_picture

GiB = 1 << 30


def fact(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, storage: int, element: int = 4) -> TensorFact:
    return TensorFact(
        shape=shape, strides=strides, storage_offset=offset, storage_numel=storage, element_size=element,
        dtype={1: "uint8", 4: "float32"}.get(element, "float64"),
    )


@st.composite
def layouts(draw: st.DrawFn) -> TensorFact:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(rank))
    strides = tuple(draw(st.integers(0, 5000)) for _ in range(rank))
    offset = draw(st.integers(0, 10**9))
    span = sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
    storage = offset + span + 1 + draw(st.integers(0, 10**11))
    return fact(shape, strides, offset, storage, draw(st.sampled_from([1, 4, 8])))


@settings(max_examples=300, deadline=None)
@given(layouts(), st.integers(40, 140))
def test_no_row_is_wider_than_asked(layout: TensorFact, width: int) -> None:
    lines = render_storage_picture(layout, width=width)
    assert lines, "a known layout always gets a picture"
    assert all(len(line) <= width for line in lines), lines


SIZES = [1, 100, 1 << 10, 1 << 20, GiB, 100 * GiB]


@pytest.mark.parametrize("storage", SIZES)
@pytest.mark.parametrize("where", [0.0, 0.13, 0.5, 0.999])
@pytest.mark.parametrize("length", [1, 8 << 10, 1 << 30])
def test_a_window_is_marked_at_its_true_position(storage: int, where: float, length: int) -> None:
    length = min(length, storage)
    offset = min(int(storage * where), storage - length)
    lines = render_storage_picture(fact((length,), (1,), offset, storage, element=1), width=80)
    if not lines[0].startswith("storage ▕"):  # a small storage is drawn cell by cell
        cells = " ".join(lines[1:-1]).split()
        assert len(cells) == storage
        assert [i for i, c in enumerate(cells) if c != "·"] == list(range(offset, offset + length))
        return
    bar = lines[0]
    assert bar.startswith("storage ▕") and bar.endswith("▏")
    cells = bar[len("storage ▕") : -1]
    marked = [i for i, c in enumerate(cells) if c != "░"]
    # The first and last marked cells hold the window's first and last byte, within a cell.
    assert abs(marked[0] - offset * len(cells) / storage) < 1
    assert abs(marked[-1] - (offset + length - 1) * len(cells) / storage) < 1
    assert all(cells[i] == USED for i in range(marked[0], marked[-1] + 1))  # a dense window
    if storage > 1 << 20:
        assert "of " in lines[1] and ("GiB" in lines[1] or "MiB" in lines[1])


def test_eight_kib_of_a_big_activation_says_both_sizes() -> None:
    lines = render_storage_picture(fact((2048,), (1,), 6_000_000, 12_800_000), width=80)
    assert "reads 8.0 KiB of 48.8 MiB" in lines[1]
    assert lines[0].count(USED) == 1


@pytest.mark.parametrize(
    ("numel", "storage", "share"),
    [
        (32_768, 32_768, "(100%)"),  # a whole storage: was "(1e+02%)"
        (32_767, 32_768, "(99%)"),  # never rounded up to all of it
        (4_000, 10_000, "(40%)"),
        (250, 10_000, "(2.5%)"),
        (2048, 12_800_000, "(0.016%)"),
        (1, 100 * GiB, "(<0.01%)"),
    ],
)
def test_the_share_of_the_storage_reads_as_a_percentage(numel: int, storage: int, share: str) -> None:
    lines = render_storage_picture(fact((numel,), (1,), 0, storage), width=80)
    assert share in lines[1], lines[1]


@pytest.mark.parametrize(
    "make",
    [
        lambda base: base.t(),
        lambda base: base[:, ::2],
        lambda base: base[1:, 1:3],
        lambda base: base.reshape(2, 3, 2).permute(2, 0, 1),
    ],
    ids=["transpose", "step-slice", "window", "permute"],
)
def test_a_small_tensor_shows_which_element_reads_each_cell(make) -> None:
    view = make(torch.arange(12.0).reshape(3, 4))
    layout = fact(tuple(view.shape), view.stride(), view.storage_offset(), 12)
    lines = render_storage_picture(layout, width=78)
    cells = " ".join(lines[1:-1]).split()
    assert len(cells) == 12
    # torch's own answer: the storage index each element (in row-major order) reads.
    positions = torch.arange(12).as_strided(view.shape, view.stride(), view.storage_offset()).flatten().tolist()
    expected = ["·"] * 12
    for number, position in reversed(list(enumerate(positions))):
        expected[position] = str(number)
    assert cells == expected
    assert lines[-1].startswith(f"offset {view.storage_offset()}, strides {view.stride()}")


def test_the_explain_card_fits_80_columns(tmp_path: Path) -> None:
    source = tmp_path / "big.py"
    source.write_text("import torch\nbig = torch.empty(1000, 12800)\nrow = big[400]\nt = torch.randn(3, 4).t()\n")
    for line in (3, 4):
        out = subprocess.run(
            [sys.executable, "-m", "stridelens", "explain", f"{source}:{line}:1"], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert max(len(row) for row in out.stdout.splitlines()) <= 80, out.stdout
    assert "reads 50.0 KiB of 48.8 MiB" in subprocess.run(
        [sys.executable, "-m", "stridelens", "explain", f"{source}:3:1"], capture_output=True, text=True, timeout=120
    ).stdout
