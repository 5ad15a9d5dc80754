"""The "Write a gradcheck test" code action on a torch.autograd.Function subclass, through a
real server: the action is requested, its workspace edit applied the way an editor does, and the
generated test run with pytest in a subprocess (passes for a correct backward, fails for a
wrong one)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from lsprotocol import types

from stridelens.server.lsp import gradcheck_action

from .helpers import ROOT, Session, apply_edits

pytestmark = pytest.mark.timeout(240)

FIXTURES = ROOT / "tests" / "fixtures" / "gradcheck"


async def request(lsp: Session, uri: str, line0: int, only: list[str] | None) -> list[types.CodeAction]:
    result = await asyncio.wait_for(lsp.client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=line0, character=6), end=types.Position(line=line0, character=6)),
        context=types.CodeActionContext(diagnostics=[], only=only))), 60)
    return [a for a in result or [] if isinstance(a, types.CodeAction) and a.kind == gradcheck_action.KIND]


def apply(edit: types.WorkspaceEdit) -> Path:
    """What an editor does with the edit: create the file, then apply the text edits to it."""
    created: Path | None = None
    for change in edit.document_changes or []:
        if isinstance(change, types.CreateFile):
            created = Path(unquote(urlparse(change.uri).path))
            assert change.options is not None and change.options.overwrite
            created.write_text("")
        elif isinstance(change, types.TextDocumentEdit):
            path = Path(unquote(urlparse(change.text_document.uri).path))
            edits = [e for e in change.edits if isinstance(e, types.TextEdit)]
            path.write_text(apply_edits(path.read_text(), edits))
    assert created is not None
    return created


def run_pytest(test: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                          capture_output=True, text=True, timeout=180, cwd=test.parent)


async def generate(lsp: Session, tmp_path: Path, name: str, only: list[str] | None = None) -> tuple[Path, str]:
    src = tmp_path / name
    shutil.copy(FIXTURES / name, src)
    text = src.read_text()
    uri = src.as_uri()
    lsp.open(uri, text)
    await lsp.wait_analyzed(uri)
    line0 = next(i for i, line in enumerate(text.splitlines()) if line.startswith("class "))
    actions = await request(lsp, uri, line0, only)
    assert len(actions) == 1, actions
    (action,) = actions
    assert action.edit is not None
    test = apply(action.edit)
    return test, action.title


@pytest.mark.asyncio
async def test_generated_gradcheck_passes_for_a_correct_backward(lsp: Session, tmp_path: Path) -> None:
    test, title = await generate(lsp, tmp_path, "square_matmul.py", only=[gradcheck_action.KIND])
    assert title == "Write a gradcheck test for SquareMatmul (test_square_matmul_square_matmul_gradcheck.py)"
    assert test == tmp_path / "test_square_matmul_square_matmul_gradcheck.py"
    source = test.read_text()
    # Shapes from the analysis of `SquareMatmul.apply(x, w)`: (5, 3) and (3, 2), float64.
    assert "torch.randn((5, 3), dtype=torch.float64, requires_grad=True),  # x: shape known statically" in source
    assert "torch.randn((3, 2), dtype=torch.float64, requires_grad=True),  # w: shape known statically" in source
    assert "TODO" not in source
    res = run_pytest(test)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed" in res.stdout


@pytest.mark.asyncio
async def test_generated_gradcheck_fails_for_a_wrong_backward(lsp: Session, tmp_path: Path) -> None:
    test, _ = await generate(lsp, tmp_path, "square_matmul_wrong.py")
    source = test.read_text()
    # `n` rows are not known statically: a stand-in, marked TODO; the (3, 2) weight is known.
    assert "torch.randn((4, 3), dtype=torch.float64, requires_grad=True),  # x: TODO: n not known" in source
    assert "torch.randn((3, 2), dtype=torch.float64, requires_grad=True),  # w: shape known statically" in source
    res = run_pytest(test)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "GradcheckError" in res.stdout and "Jacobian mismatch" in res.stdout


@pytest.mark.asyncio
async def test_no_action_outside_a_function_class(lsp: Session, tmp_path: Path) -> None:
    src = tmp_path / "square_matmul.py"
    shutil.copy(FIXTURES / "square_matmul.py", src)
    uri = src.as_uri()
    lsp.open(uri, src.read_text())
    await lsp.wait_analyzed(uri)
    assert await request(lsp, uri, 0, None) == []  # the module docstring
    assert await request(lsp, uri, 6, ["quickfix"]) == []  # asked for quick fixes only


def test_a_function_inside_a_package_is_imported_by_its_dotted_name(tmp_path: Path) -> None:
    """The same generator without a server: a module with a relative import, two packages deep."""
    from stridelens.server.analysis import analyze_file

    ops = tmp_path / "mypkg" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (ops / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "consts.py").write_text("TWO = 2\n")
    module = ops / "square.py"
    module.write_text(
        "import torch\n"
        "from ..consts import TWO\n\n\n"
        "class Square(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * x\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return TWO * x * grad\n\n\n"
        "def use():\n"
        "    return Square.apply(torch.randn(6))\n")
    analysis = analyze_file(str(module))
    (cls,) = gradcheck_action.autograd_functions(analysis.tree)
    source = gradcheck_action.test_source(module, cls, gradcheck_action._inputs(cls, analysis.tree, analysis.values))
    assert "from mypkg.ops.square import Square" in source
    assert "torch.randn((6,), dtype=torch.float64" in source
    test = gradcheck_action.test_path(module, cls.name)
    test.write_text(source)
    res = run_pytest(test)
    assert res.returncode == 0, res.stdout + res.stderr
