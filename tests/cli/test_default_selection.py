"""Rules off by default (issue 30): below precision 0.9 on a fresh audit, they run only where
`select` names them, on the command line as in `[tool.stridelens]`; `stridelens rule` and SARIF
say which they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = (Path(__file__).resolve().parents[1] / "fixtures" / "default_selection.py").read_text(encoding="utf-8")
ON, OFF = ("SL102", 9), ("SL204", 19)  # on by default / off by default, and their lines


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stridelens", *args], cwd=cwd, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip


def found(*args: str, cwd: Path) -> list[tuple[str, int]]:
    proc = run("check", "--format", "json", *args, "model.py", cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    return [(d["code"], d["line"]) for d in json.loads(proc.stdout)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "model.py").write_text(SAMPLE, encoding="utf-8")
    return tmp_path


def test_default_check_reports_only_rules_on_by_default(project: Path) -> None:
    proc = run("check", "model.py", cwd=project)
    assert proc.returncode == 1
    assert "SL102" in proc.stdout and "SL204" not in proc.stdout
    assert found("--no-config", cwd=project) == [ON]


def test_select_enables_an_off_by_default_rule_by_code_prefix_or_all(project: Path) -> None:
    assert found("--select", "SL204", cwd=project) == [OFF]
    assert found("--select", "SL2", cwd=project) == [OFF]  # a prefix selects off-by-default rules too
    assert found("--select", "ALL", cwd=project) == [ON, OFF]
    assert found("--select", "all", cwd=project) == [ON, OFF]
    assert found("--select", "SL1", cwd=project) == [ON]
    assert found("--select", "ALL", "--ignore", "SL204", cwd=project) == [ON]


def test_config_file_selection_is_the_same(project: Path) -> None:
    config = project / "pyproject.toml"
    config.write_text('[tool.stridelens]\nselect = ["SL204"]\n', encoding="utf-8")
    assert found(cwd=project) == [OFF]
    assert found("--select", "SL102", cwd=project) == [ON]  # the command line wins
    config.write_text('[tool.stridelens]\nselect = ["ALL"]\n', encoding="utf-8")
    assert found(cwd=project) == [ON, OFF]
    config.write_text('[tool.stridelens]\nselect = ["SL2"]\n', encoding="utf-8")
    assert found(cwd=project) == [OFF]
    config.write_text('[tool.stridelens]\nignore = ["SL103"]\n', encoding="utf-8")  # no select: the default
    assert found(cwd=project) == [ON]


def test_rule_command_and_sarif_say_a_rule_is_off_by_default(project: Path) -> None:
    doc = run("rule", "SL204", cwd=project).stdout
    assert "Off by default (precision 0.32 (14/44) on fresh real code, bench/audits/fresh-audit-2026-12-03.md" in doc
    assert "Enable it with `--select SL204`" in doc
    assert "Off by default" not in run("rule", "SL102", cwd=project).stdout
    data = json.loads(run("rule", "SL204", "--format", "json", cwd=project).stdout)
    assert (data["default"], data["precision"]) == (False, "0.32 (14/44)")
    assert data["measured_in"] == "bench/audits/fresh-audit-2026-12-03.md"
    assert json.loads(run("rule", "SL102", "--format", "json", cwd=project).stdout)["default"] is True
    listing = {line.split()[0]: line for line in run("rule", "--all", cwd=project).stdout.splitlines()}
    assert listing["SL204"].endswith("(off by default: precision 0.32 (14/44))")
    assert "off by default" not in listing["SL102"]
    chinese = run("rule", "SL204", "--lang", "zh-CN", cwd=project).stdout
    assert "默认关闭（在全新的真实代码上精确率为 0.32 (14/44)" in chinese and "`--select SL204`" in chinese
    sarif = json.loads(run("check", "--format", "sarif", "--no-config", "model.py", cwd=project).stdout)
    rules = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["SL204"]["defaultConfiguration"]["enabled"] is False
    assert rules["SL102"]["defaultConfiguration"]["enabled"] is True
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["SL102"]
