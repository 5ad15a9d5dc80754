"""`stridelens check` / `explain` on files Python refuses or reads in another encoding, as a
user runs them: a syntax error is a finding (SL001) at Python's position in Python's words,
and a file is decoded as Python decodes it (PEP 263 coding comments, a BOM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat import v4

BAD_VIEW = "y = torch.randn(2, 3, 4).transpose(0, 1).view(-1)"
# Two syntax errors: Python reports the first; the second is what it reports once the first is fixed.
BROKEN = f"import torch\n\nsizes = [1 2]\n{BAD_VIEW}\ntotal = torch.zeros(2,\n"


def run(command: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stridelens", command, *args],
        cwd=cwd, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run("check", "--no-config", *args, cwd=cwd)


def python_error(source: str) -> SyntaxError:
    """What Python itself says of `source`."""
    try:
        compile(source, "<test>", "exec")
    except SyntaxError as err:
        return err
    raise AssertionError("the source compiles")


def test_a_syntax_error_is_a_finding_in_text_json_and_sarif(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN, encoding="utf-8")
    first = python_error(BROKEN)
    second = python_error(BROKEN.replace("[1 2]", "[1, 2]"))
    assert (first.lineno, second.lineno) == (3, 5)

    text = check("broken.py", cwd=tmp_path)
    assert text.returncode == 1, text.stderr
    assert "All checks passed" not in text.stdout
    assert f"broken.py:3:{first.offset}: SL001 {first.msg}\n" in text.stdout
    assert f"broken.py:5:{second.offset}: SL001 {second.msg}\n" in text.stdout
    assert "invalid syntax. Perhaps you forgot a comma?" in text.stdout
    assert "'(' was never closed" in text.stdout
    # The caret sits under the place Python points at.
    rows = text.stdout.splitlines()
    at = rows.index(f"broken.py:3:{first.offset}: SL001 {first.msg}")
    assert rows[at + 1] == "  3 | sizes = [1 2]"
    assert rows[at + 2].index("^") == rows[at + 1].index("1 2")
    # The rest of the file is still analysed: the `.view()` between the two errors raises.
    assert "broken.py:4:" in text.stdout and " SL101 " in text.stdout

    findings = json.loads(check("broken.py", "--format", "json", cwd=tmp_path).stdout)
    syntax = [f for f in findings if f["code"] == "SL001"]
    assert [(f["line"], f["column"], f["message"], f["severity"]) for f in syntax] == [
        (3, first.offset, first.msg, "error"),
        (5, second.offset, second.msg, "error"),
    ]
    assert all(f["fix"] is None and f["end_line"] == f["line"] and f["end_column"] > f["column"] for f in syntax)

    sarif = check("broken.py", "--format", "sarif", cwd=tmp_path)
    assert sarif.returncode == 1
    run_ = json.loads(sarif.stdout)["runs"][0]
    rules = [r["id"] for r in run_["tool"]["driver"]["rules"]]
    results = [r for r in run_["results"] if r["ruleId"] == "SL001"]
    assert [r["message"]["text"] for r in results] == [first.msg, second.msg]
    region = results[0]["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (3, first.offset)
    assert results[0]["level"] == "error" and rules[results[0]["ruleIndex"]] == "SL001"


def test_select_ignore_and_noqa_do_not_hide_a_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import torch\nsizes = [1 2]  # noqa\n", encoding="utf-8")
    for flags in (["--select", "SL2"], ["--ignore", "SL001"], ["--ignore", "SL"]):
        proc = check("broken.py", "--format", "json", *flags, cwd=tmp_path)
        assert proc.returncode == 1, flags
        assert [f["code"] for f in json.loads(proc.stdout)] == ["SL001"], flags
    ignored = check("broken.py", "--ignore", "SL001", cwd=tmp_path)
    assert "SL001 (syntax error) is reported whatever `ignore` says" in ignored.stderr
    rule = run("rule", "SL001", cwd=tmp_path)
    assert rule.returncode == 0 and "# SL001 syntax-error" in rule.stdout
    assert "Always reported" in rule.stdout and "# noqa: SL001" not in rule.stdout


def test_one_broken_file_and_the_others_are_still_checked(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a_broken.py").write_text("def forward(self, x)\n    return x\n", encoding="utf-8")
    (pkg / "b_view.py").write_text(f"import torch\n{BAD_VIEW}\n", encoding="utf-8")
    (pkg / "c_clean.py").write_text("import torch\nx = torch.randn(2, 3)\n", encoding="utf-8")
    proc = check("pkg", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    found = {(Path(f["path"]).name, f["code"]) for f in json.loads(proc.stdout)}
    assert found == {("a_broken.py", "SL001"), ("b_view.py", "SL101")}
    # Fixes are applied to the file that parses, never to the broken one.
    before = (pkg / "a_broken.py").read_text(encoding="utf-8")
    fixed = check("pkg", "--fix", cwd=tmp_path)
    assert fixed.returncode == 1
    assert ".reshape(-1)" in (pkg / "b_view.py").read_text(encoding="utf-8")
    assert (pkg / "a_broken.py").read_text(encoding="utf-8") == before


def test_latin1_file_with_a_coding_comment_is_analysed_with_character_columns(tmp_path: Path) -> None:
    line = 's = "ééé"; ' + BAD_VIEW
    source = f"# -*- coding: latin-1 -*-\nimport torch\n{line}\n"
    path = tmp_path / "latin1.py"
    path.write_bytes(source.encode("latin-1"))
    column = line.index(".view") + 1  # 1-based, in characters of the decoded line

    proc = check("latin1.py", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    (finding,) = json.loads(proc.stdout)
    assert (finding["code"], finding["line"], finding["column"]) == ("SL101", 3, column)
    assert finding["end_column"] == column + len(".view(-1)")
    text = check("latin1.py", cwd=tmp_path)
    assert f"latin1.py:3:{column}: SL101 " in text.stdout
    assert f"  3 | {line}" in text.stdout  # the line shown decoded, not as mojibake

    # On `transpose` (a character column after the three é): the call's result.
    card = run("explain", f"latin1.py:3:{line.index('transpose') + 1}", "--format", "json", cwd=tmp_path)
    assert card.returncode == 0, card.stderr
    answer = json.loads(card.stdout)
    assert answer["expr"] == "torch.randn(2, 3, 4).transpose(0, 1)" and answer["shape"] == [3, 2, 4]

    # --fix writes the file back in its own encoding.
    assert check("latin1.py", "--fix", cwd=tmp_path).returncode == 0
    assert path.read_bytes() == source.replace(".view(", ".reshape(").encode("latin-1")


def test_a_byte_order_mark_is_read_and_kept(tmp_path: Path) -> None:
    line = 's = "ééé"; ' + BAD_VIEW
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + f"import torch\n{line}\n".encode())
    findings = json.loads(check("bom.py", "--format", "json", cwd=tmp_path).stdout)
    assert [(f["line"], f["column"]) for f in findings] == [(2, line.index(".view") + 1)]
    assert check("bom.py", "--fix", cwd=tmp_path).returncode == 0
    assert path.read_bytes() == b"\xef\xbb\xbf" + f"import torch\n{line}\n".replace(".view(", ".reshape(").encode()


def test_bytes_not_valid_in_the_declared_encoding_are_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "ascii.py").write_bytes(b"# coding: ascii\nimport torch\nname = 'caf\xe9'\n")
    (tmp_path / "unknown.py").write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    (tmp_path / "default.py").write_bytes(b"import torch\nname = 'caf\xe9'\n")
    (tmp_path / "good.py").write_text(f"import torch\n{BAD_VIEW}\n", encoding="utf-8")
    expected = {
        "ascii.py": "ascii.py: not valid ascii, the encoding declared on line 1 (byte 0xe9 at line 3, column 12)",
        "unknown.py": "unknown.py: line 1 declares the encoding 'no-such-codec', which Python does not know",
        "default.py": "default.py: not valid UTF-8 (byte 0xe9 at line 2, column 12)",
    }
    proc = check("ascii.py", "unknown.py", "default.py", "good.py", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 3
    for name, message in expected.items():
        assert any(message in error for error in errors), (name, errors)
    assert "PEP 263" in next(e for e in errors if "default.py" in e)
    # The file that reads is still checked and reported.
    assert [(Path(f["path"]).name, f["code"]) for f in json.loads(proc.stdout)] == [("good.py", "SL101")]

    for name, message in expected.items():
        card = run("explain", f"{name}:2:1", "--format", "json", cwd=tmp_path)
        assert card.returncode == 2 and card.stdout == ""
        (error,) = card.stderr.strip().splitlines()  # one line, no traceback
        assert error.startswith(f"stridelens explain: {message}"), error


def test_a_broken_notebook_cell_is_reported_in_that_cell(tmp_path: Path) -> None:
    nb = v4.new_notebook()
    cells = ["import torch", "%time 1\ntotal = torch.zeros(2,", f"x = torch.randn(2, 3, 4)\n{BAD_VIEW}"]
    nb.cells = [v4.new_markdown_cell("# notes"), *(v4.new_code_cell(c) for c in cells)]
    nbformat.write(nb, str(tmp_path / "nb.ipynb"))
    alone = python_error("\ntotal = torch.zeros(2,\n")  # the cell as Jupyter compiles it (magic blanked)
    proc = check("nb.ipynb", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"nb.ipynb:cell 3:2:{alone.offset}: SL001 {alone.msg}\n" in proc.stdout
    assert "nb.ipynb:cell 4:2:" in proc.stdout and " SL101 " in proc.stdout  # the next cell is still checked
    findings = json.loads(check("nb.ipynb", "--format", "json", cwd=tmp_path).stdout)
    assert [(f["code"], f["cell"], f["line"]) for f in findings] == [("SL001", 3, 2), ("SL101", 4, 2)]
