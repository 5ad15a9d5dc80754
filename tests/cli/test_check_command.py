"""`stridelens check` and `stridelens rule` through the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.generate_model import generate_model_source

BIN = Path(sys.executable).with_name("stridelens")
BAD_VIEW = "import torch\nx = torch.randn(2, 3, 4)\ny = x.transpose(0, 1).view(-1)\n"
CLEAN = "import torch\nx = torch.randn(2, 3)\ny = x.view(-1)\n"
GRAPH = (
    "import torch\nfrom torch import nn\nm = nn.Linear(2, 1)\nlosses = []\n"
    "for _ in range(2):\n    loss = m(torch.randn(3, 2)).sum()\n    loss.backward()\n    losses.append(loss)\n"
)


def check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "check", *args], cwd=cwd, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bad.py").write_text(BAD_VIEW)
    (tmp_path / "pkg" / "clean.py").write_text(CLEAN)
    (tmp_path / "pkg" / "graph.py").write_text(GRAPH)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "skipped.py").write_text(BAD_VIEW)
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "skipped.py").write_text(BAD_VIEW)
    return tmp_path


def test_clean_file_exit_0(tree: Path) -> None:
    proc = check("pkg/clean.py", cwd=tree)
    assert proc.returncode == 0, proc.stderr
    assert "All checks passed" in proc.stdout


def test_text_output_like_ruff(tree: Path) -> None:
    proc = check("pkg/bad.py", cwd=tree)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("pkg/bad.py:3:22: SL101 ")
    assert "y = x.transpose(0, 1).view(-1)" in lines[1]
    caret = lines[2]
    assert caret.strip() == "^" * len(".view(-1)")
    assert caret.index("^") == lines[1].index(".view")


def test_json_schema_and_walk(tree: Path) -> None:
    proc = check(".", "--format", "json", "--select", "ALL", cwd=tree)  # graph.py's SL201 is off by default
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert {d["path"] for d in data} == {"./pkg/bad.py", "./pkg/graph.py"}
    keys = {"path", "line", "column", "end_line", "end_column", "code", "message", "severity", "fix"}
    for item in data:
        assert set(item) == keys
        assert item["line"] >= 1 and item["column"] >= 1
    view = next(d for d in data if d["code"] == "SL101")
    assert view["severity"] == "error"
    assert view["fix"]["edits"][0]["new_text"] == "reshape"
    assert [(d["path"], d["line"]) for d in data] == sorted((d["path"], d["line"]) for d in data)


def test_sarif(tree: Path) -> None:
    proc = check("pkg", "--format", "sarif", cwd=tree)
    assert proc.returncode == 1
    sarif = json.loads(proc.stdout)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert run["tool"]["driver"]["name"] == "stridelens"
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "SL101" in rule_ids
    result = next(r for r in run["results"] if r["ruleId"] == "SL101")
    assert result["level"] == "error"
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == 3 and region["startColumn"] == 22
    assert rule_ids[result["ruleIndex"]] == "SL101"


def test_select_ignore_and_config(tree: Path) -> None:
    assert check("pkg", "--select", "SL2", "--format", "json", cwd=tree).returncode == 1
    data = json.loads(check("pkg", "--select", "SL2", "--format", "json", cwd=tree).stdout)
    assert {d["code"] for d in data} == {"SL201"}
    assert check("pkg/bad.py", "--ignore", "SL101", cwd=tree).returncode == 0
    (tree / "pyproject.toml").write_text(
        '[tool.stridelens]\nselect = ["ALL"]\nignore = ["SL1"]\n[tool.stridelens.severity]\nSL201 = "error"\n'
    )
    data = json.loads(check("pkg", "--format", "json", cwd=tree).stdout)
    assert {(d["code"], d["severity"]) for d in data} == {("SL201", "error")}
    (tree / "pyproject.toml").write_text('[tool.stridelens]\nselect = ["SL999"]\n')
    proc = check("pkg/bad.py", cwd=tree)
    assert "unknown rule code 'SL999'" in proc.stderr
    assert proc.returncode == 1  # a bad entry is reported and ignored, not fatal


def test_unknown_select_is_usage_error(tree: Path) -> None:
    proc = check("pkg", "--select", "XYZ", cwd=tree)
    assert proc.returncode == 2
    assert "unknown rule code" in proc.stderr


def test_noqa(tree: Path) -> None:
    (tree / "pkg" / "bad.py").write_text(BAD_VIEW.replace(".view(-1)", ".view(-1)  # noqa: SL101"))
    assert check("pkg/bad.py", cwd=tree).returncode == 0
    (tree / "pkg" / "bad.py").write_text(BAD_VIEW.replace(".view(-1)", ".view(-1)  # noqa"))
    assert check("pkg/bad.py", cwd=tree).returncode == 0
    (tree / "pkg" / "bad.py").write_text(BAD_VIEW.replace(".view(-1)", ".view(-1)  # noqa: SL201"))
    assert check("pkg/bad.py", cwd=tree).returncode == 1


def test_errors_exit_2_others_still_checked(tree: Path) -> None:
    (tree / "empty").mkdir()
    (tree / "notes.txt").write_text("hello")
    (tree / "latin1.py").write_bytes(b"x = '\xe9'\n")
    proc = check("missing.py", "empty", "notes.txt", "latin1.py", "pkg/bad.py", "--format", "json", cwd=tree)
    assert proc.returncode == 2
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 4, proc.stderr
    assert any("missing.py" in e and "no such file" in e for e in errors)
    assert any("empty" in e and "no Python files" in e for e in errors)
    assert any("notes.txt" in e and "not a Python file" in e for e in errors)
    assert any("latin1.py" in e and "UTF-8" in e for e in errors)
    assert [d["code"] for d in json.loads(proc.stdout)] == ["SL101"]


def test_fix_and_diff(tree: Path) -> None:
    target = tree / "pkg" / "bad.py"
    proc = check("pkg/bad.py", "--diff", cwd=tree)
    assert proc.returncode == 1
    assert "-y = x.transpose(0, 1).view(-1)" in proc.stdout
    assert "+y = x.transpose(0, 1).reshape(-1)" in proc.stdout
    assert "--- a/pkg/bad.py\n+++ b/pkg/bad.py\n" in proc.stdout
    assert target.read_text() == BAD_VIEW
    # An absolute path is labelled as it is, not `a//tmp/...`.
    absolute = check(str(target), "--diff", cwd=tree)
    assert f"--- {target}\n+++ {target}\n" in absolute.stdout
    proc = check("pkg/bad.py", "--fix", cwd=tree)
    assert proc.returncode == 0, proc.stdout
    assert target.read_text() == BAD_VIEW.replace(".view(", ".reshape(")
    # Unsafe fixes are applied only on request.
    graph = tree / "pkg" / "graph.py"
    assert check("pkg/graph.py", "--fix", "--select", "SL201", cwd=tree).returncode == 1
    assert graph.read_text() == GRAPH
    assert check("pkg/graph.py", "--fix", "--unsafe-fixes", "--select", "SL201", cwd=tree).returncode == 0
    assert "losses.append(loss.detach())" in graph.read_text()


def test_parallel_matches_serial(tree: Path) -> None:
    for i in range(6):
        (tree / "pkg" / f"copy{i}.py").write_text(BAD_VIEW if i % 2 else GRAPH)
    one = check("pkg", "--format", "json", "-j", "1", "--select", "ALL", cwd=tree)
    many = check("pkg", "--format", "json", "-j", "3", "--select", "ALL", cwd=tree)
    assert one.stdout == many.stdout


def test_rule_command() -> None:
    proc = subprocess.run([str(BIN), "rule", "SL101"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for heading in ("What it does", "Why it matters", "Example", "Fix"):
        assert f"## {heading}" in proc.stdout
    proc = subprocess.run([str(BIN), "rule", "--all"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    from stridelens.server.rules import ALL_RULES

    listed = [line.split()[0] for line in proc.stdout.strip().splitlines()]
    assert listed == sorted(ALL_RULES)
    proc = subprocess.run([str(BIN), "rule", "SL999"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown rule" in proc.stderr


EVAL_HOOK = (Path(__file__).resolve().parents[1] / "fixtures" / "no_grad_hook.py").read_text(encoding="utf-8")


def test_no_grad_functions_from_config(tree: Path) -> None:
    # A project's own framework hook, run without grad: named in [tool.stridelens], SL206 is quiet.
    (tree / "pkg" / "hook.py").write_text(EVAL_HOOK)
    data = json.loads(check("pkg/hook.py", "--select", "SL206", "--format", "json", cwd=tree).stdout)
    forward_line = EVAL_HOOK.splitlines().index("        return self.model(batch)") + 1
    assert [(d["code"], d["line"]) for d in data] == [("SL206", forward_line)]
    (tree / "pyproject.toml").write_text('[tool.stridelens]\nno-grad-functions = ["my_eval_hook"]\n')
    proc = check("pkg/hook.py", "--select", "SL206", cwd=tree)
    assert proc.returncode == 0, proc.stdout
    (tree / "pyproject.toml").write_text('[tool.stridelens]\nno-grad-functions = "my_eval_hook"\n')
    proc = check("pkg/hook.py", "--select", "SL206", cwd=tree)
    assert "no-grad-functions must be a list of function names" in proc.stderr
    assert proc.returncode == 1


def test_a_file_over_its_budget_says_so(tmp_path: Path) -> None:
    """A file whose analysis stops at its budget would silently lose the findings after that
    point (on a slow CI machine, different ones than on a fast one): stderr says which file."""
    (tmp_path / "big.py").write_text(generate_model_source(3000), encoding="utf-8")
    (tmp_path / "bad.py").write_text(BAD_VIEW, encoding="utf-8")
    hurried = check("big.py", "bad.py", "--format", "json", "--budget", "200", "-j", "1", cwd=tmp_path)
    assert hurried.returncode == 1, hurried.stderr
    notes = [line for line in hurried.stderr.splitlines() if "stopped at its budget" in line]
    assert len(notes) == 1 and "big.py" in notes[0] and "200 statements" in notes[0] and "--budget" in notes[0]
    found = json.loads(hurried.stdout)  # stdout stays the findings
    assert any(f["path"] == "bad.py" and f["code"] == "SL101" for f in found)
    unlimited = check("big.py", "--format", "json", "--budget", "0", "-j", "1", cwd=tmp_path)
    assert "stopped at its budget" not in unlimited.stderr
    assert len(json.loads(unlimited.stdout)) > len([f for f in found if f["path"] == "big.py"])
    for wrong in ("-1", "0.5"):  # a count of statements, not seconds
        bad = check("bad.py", "--budget", wrong, cwd=tmp_path)
        assert bad.returncode == 2 and "--budget" in bad.stderr
