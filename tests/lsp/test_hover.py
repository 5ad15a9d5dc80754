"""Hover cards over LSP, checked against what real torch says."""

from __future__ import annotations

import pytest
import torch

from .helpers import Session

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

SOURCE = """import torch

x = torch.randn(2, 3, 4)
xt = x.transpose(0, 1)
copied = xt.reshape(-1)
fails = xt.view(-1)
ok = x.permute(2, 0, 1).view(4, 6)
w = torch.randn(4, 4, requires_grad=True)
frozen = w.detach()
y = x[:, 1:, ::2]
"""
URI = "file:///tmp/stridelens-hover/model.py"


def text(hover) -> str:
    assert hover is not None
    return hover.contents.value


async def test_tensor_card_matches_torch(lsp: Session) -> None:
    lsp.open(URI, SOURCE)
    await lsp.wait_analyzed(URI, exact=True)
    x = torch.randn(2, 3, 4)
    xt = x.transpose(0, 1)
    card = text(await lsp.hover(URI, 3, 1))  # `xt`
    assert f"`{tuple(xt.shape)}`" in card
    assert f"**strides** `{xt.stride()}`" in card
    assert "**contiguous** no" in card
    assert "view of `x`" in card
    assert "transpose(0, 1) at line 4" in card
    # The storage picture: each storage cell numbered by the element of `xt` that reads it
    # (torch's order), every row within the hover's width.
    picture = card.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert picture[0].startswith("storage 24 × float32") and picture[-1].startswith("offset 0, strides (4, 12, 1)")
    positions = torch.arange(24).as_strided(xt.shape, xt.stride()).flatten().tolist()
    assert " ".join(picture[1:-1]).split() == [str(positions.index(i)) for i in range(24)]
    assert max(map(len, picture)) <= 64

    y = x[:, 1:, ::2]
    card = text(await lsp.hover(URI, 9, 0))
    assert f"`{tuple(y.shape)}`" in card
    assert f"`{y.stride()}`" in card
    assert f"**storage offset** `{y.storage_offset()}`" in card


async def test_operation_hover(lsp: Session) -> None:
    lsp.open(URI, SOURCE)
    await lsp.wait_analyzed(URI, exact=True)
    reshape = text(await lsp.hover(URI, 4, SOURCE.splitlines()[4].index("reshape") + 2))
    assert "copies 96 B" in reshape and "non-contiguous" in reshape
    view_bad = text(await lsp.hover(URI, 5, SOURCE.splitlines()[5].index("view") + 1))
    assert "raises at run time" in view_bad
    line6 = SOURCE.splitlines()[6]
    view_ok = text(await lsp.hover(URI, 6, line6.index("view") + 1))
    assert "is fine" in view_ok
    detach = text(await lsp.hover(URI, 8, SOURCE.splitlines()[8].index("detach") + 1))
    assert "shares storage with `w`" in detach and ".clone()" in detach


async def test_hover_nothing_known_is_quiet(lsp: Session) -> None:
    lsp.open(URI, "import os\nname = os.getcwd()\n")
    await lsp.wait_analyzed(URI)
    assert await lsp.hover(URI, 1, 1) is None
    assert await lsp.hover(URI, 40, 0) is None  # past the end


async def test_hover_unknown_sizes_shows_what_is_known(lsp: Session) -> None:
    # permute(0, 2, 1) says `a` has 3 dims: its sizes, in a's names; a transpose does not.
    src = (
        "import torch\n\ndef f(a: torch.Tensor):\n    b = a.permute(0, 2, 1)\n    return b\n\n"
        "def g(z: torch.Tensor):\n    w = z.transpose(0, 1)\n    return w\n"
    )
    lsp.open(URI, src)
    await lsp.wait_analyzed(URI, exact=True)
    card = text(await lsp.hover(URI, 4, 11))
    assert "permute(0, 2, 1)" in card
    assert "`(a.shape[0], a.shape[2], a.shape[1])`" in card
    assert "`a.is_contiguous()`" in card  # what the strides stated assume
    card = text(await lsp.hover(URI, 8, 11))
    assert "transpose(0, 1)" in card
    assert "sizes unknown" in card


async def test_explain_request_answers_like_the_cli(lsp: Session) -> None:
    lsp.open(URI, SOURCE)
    await lsp.wait_analyzed(URI, exact=True)
    answers = await lsp.client.protocol.send_request_async(
        "stridelens/explain",
        {
            "textDocument": {"uri": URI},
            "positions": [
                {"line": 3, "character": 0},  # xt
                {"line": 3, "character": SOURCE.splitlines()[3].index("0")},  # a literal
                {"line": 99, "character": 0},  # past the end
            ],
        },
    )
    xt_fact, literal, past = answers
    real = torch.randn(2, 3, 4).transpose(0, 1)
    assert xt_fact["shape"] == list(real.shape) and xt_fact["strides"] == list(real.stride())
    assert xt_fact["contiguous"] is False and xt_fact["view_of"] == "x"
    assert literal is None and past is None
    unopened = await lsp.client.protocol.send_request_async(
        "stridelens/explain",
        {"textDocument": {"uri": "file:///tmp/never-opened.py"}, "positions": [{"line": 0, "character": 0}]},
    )
    assert unopened == [None]


async def test_the_storage_picture_wraps_at_a_token_boundary(lsp: Session) -> None:
    """A footer wider than the hover ("reads 4.0 KiB of 4.0 KiB (100%) from element 0, strides
    (64, 1, 16)") goes on to a second line whole; it was cut mid-number ("strides (64, 1…")."""
    uri = "file:///tmp/stridelens-hover/wide.py"
    lsp.open(uri, "import torch\n\na = torch.randn(16, 4, 16)\nb = a.transpose(1, 2)\n")
    await lsp.wait_analyzed(uri, exact=True)
    b = torch.randn(16, 4, 16).transpose(1, 2)
    card = text(await lsp.hover(uri, 3, 0))
    picture = card.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert max(map(len, picture)) <= 64 and "…" not in "".join(picture), picture
    footer = " ".join(line.strip() for line in picture[1:])
    assert footer == f"reads 4.0 KiB of 4.0 KiB (100%) from element 0, strides {b.stride()}", picture
    assert picture[-1].strip() == f"{b.stride()}" or picture[-1].strip().endswith(f"strides {b.stride()}")
