"""`stridelens check` on Jupyter notebooks: cells as one program, findings per cell, fixes
written back with nbformat (outputs, metadata and ids kept), and clear errors on bad files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat import v4

CELLS = [
    ("markdown", "# A notebook\nwith `%magic` text in markdown"),
    ("code", "import torch\nx = torch.randn(2, 3, 4)"),
    ("code", "%timeit x.sum()\n!pip list\nfiles = !ls\nxt = x.transpose(0, 1)"),
    ("code", "%%bash\necho not python"),
    ("code", "print('ok')\ny = xt.view(-1)  # raises: xt is not contiguous"),
    ("code", "z = xt.view(-1)  # " + "noqa: SL101"),  # (split so that ruff does not read it)
]


def make_notebook(path: Path) -> str:
    nb = v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    for kind, source in CELLS:
        cell = v4.new_markdown_cell(source) if kind == "markdown" else v4.new_code_cell(source)
        nb.cells.append(cell)
    nb.cells[1].outputs = [v4.new_output("stream", name="stdout", text="kept output\n")]
    nb.cells[1].execution_count = 1
    nb.cells[4].metadata["tags"] = ["keep-me"]
    nbformat.write(nb, str(path))
    return path.read_text(encoding="utf-8")


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stridelens", "check", "--no-config", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture()
def notebook(tmp_path: Path) -> Path:
    path = tmp_path / "nb.ipynb"
    make_notebook(path)
    return path


def test_findings_carry_the_cell_and_the_line_inside_it(notebook: Path) -> None:
    proc = check("nb.ipynb", cwd=notebook.parent)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == ""  # magics and shell lines are skipped cleanly
    # `xt` comes from cell 3: names flow from cell to cell in order.
    assert proc.stdout.startswith("nb.ipynb:cell 5:2:7: SL101 `.view()` raises here")
    assert "  2 | y = xt.view(-1)" in proc.stdout
    assert "cell 6" not in proc.stdout  # suppressed by the noqa comment in its cell
    findings = json.loads(check("nb.ipynb", "--format", "json", cwd=notebook.parent).stdout)
    assert [(f["code"], f["cell"], f["line"], f["column"]) for f in findings] == [("SL101", 5, 2, 7)]
    assert findings[0]["fix"]["edits"][0]["line"] == 2


def test_sarif_points_at_the_line_of_the_ipynb_file(notebook: Path) -> None:
    sarif = json.loads(check("nb.ipynb", "--format", "sarif", cwd=notebook.parent).stdout)
    (result,) = sarif["runs"][0]["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    rows = notebook.read_text(encoding="utf-8").splitlines()
    assert "y = xt.view(-1)" in rows[region["startLine"] - 1]
    assert result["properties"] == {"cell": 5, "cellLine": 2, "cellColumn": 7}


def test_fix_writes_a_valid_notebook_changing_only_the_fixed_line(notebook: Path) -> None:
    before = notebook.read_text(encoding="utf-8")
    diff = check("nb.ipynb", "--diff", cwd=notebook.parent)
    assert diff.returncode == 1
    assert "--- a/nb.ipynb:cell 5\n+++ b/nb.ipynb:cell 5\n" in diff.stdout
    assert "+y = xt.reshape(-1)  # raises: xt is not contiguous" in diff.stdout
    assert notebook.read_text(encoding="utf-8") == before  # --diff writes nothing
    fixed = check("nb.ipynb", "--fix", cwd=notebook.parent)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    after = notebook.read_text(encoding="utf-8")
    nbformat.validate(nbformat.reads(after, as_version=4))
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert changed == [('    "y = xt.view(-1)  # raises: xt is not contiguous"', '    "y = xt.reshape(-1)  # raises: xt is not contiguous"')]
    nb = nbformat.reads(after, as_version=4)
    assert nb.cells[1].outputs[0]["text"] == "kept output\n" and nb.cells[4].metadata["tags"] == ["keep-me"]
    assert nb.cells[2].source.startswith("%timeit x.sum()\n!pip list")  # IPython lines as written


def test_directory_walks_find_notebooks_and_exclude_applies(notebook: Path) -> None:
    (notebook.parent / "mod.py").write_text("x = 1\n")
    found = check(".", "--format", "json", cwd=notebook.parent)
    assert {f["path"] for f in json.loads(found.stdout)} == {"./nb.ipynb"}
    (notebook.parent / "pyproject.toml").write_text('[tool.stridelens]\nexclude = ["nb.ipynb"]\n')
    excluded = subprocess.run(
        [sys.executable, "-m", "stridelens", "check", "."], cwd=notebook.parent, capture_output=True, text=True, timeout=300
    )
    assert excluded.returncode == 0, excluded.stdout + excluded.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"cells": [', "not a valid notebook: JSON error at line 1"),
        (json.dumps({"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}), "nbformat 3 notebook"),
        (
            json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
                {"cell_type": "code", "id": "a", "metadata": {}, "outputs": [], "execution_count": None, "source": 5}]}),
            "cell 1 has a source that is not text (int)",
        ),
    ],
    ids=["bad-json", "nbformat-3", "non-string-source"],
)
def test_bad_notebooks_get_one_line_and_nothing_is_written(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.ipynb"
    bad.write_text(content)
    proc = check("bad.ipynb", "--fix", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("stridelens check: bad.ipynb: "), proc.stderr
    assert bad.read_text() == content
