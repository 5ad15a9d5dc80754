"""`stridelens check --format json` is byte-identical across runs, job counts and hash seeds.

TorchFix 0.7.0 was seen to report or drop findings depending on PYTHONHASHSEED; a linter whose
output changes between two CI runs of the same tree cannot gate a merge. The corpus: the
examples, every rule fixture, and a generated model file (bench/generate_model.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.generate_model import generate_model_source

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)

# (PYTHONHASHSEED, -j): every seed at least once, both job counts under one seed; all five
# outputs must be equal (so repetition is covered too). About 35 s on 2 cores: a -j 2 run
# pays torch's import in three processes.
RUNS = [("0", "1"), ("0", "2"), ("1", "1"), ("123", "1"), ("random", "2")]


def check(paths: list[str], seed: str, jobs: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-m", "stridelens", "check", "--format", "json", "--no-config", "--select", "ALL", "-j", jobs,
         *paths],
        capture_output=True, text=True, timeout=180, cwd=cwd, env=env,
    )  # fmt: skip


def test_check_output_is_deterministic(tmp_path: Path) -> None:
    model = tmp_path / "generated_model.py"
    model.write_text(generate_model_source(1200), encoding="utf-8")
    paths = [str(ROOT / "examples"), str(ROOT / "tests" / "fixtures" / "rules"), str(model)]
    outputs: dict[tuple[str, str], str] = {}
    for seed, jobs in RUNS:
        result = check(paths, seed, jobs, tmp_path)
        assert result.returncode == 1, result.stderr  # the corpus has findings, and no errors
        assert result.stderr == "", result.stderr
        outputs[(seed, jobs)] = result.stdout
    first = outputs[RUNS[0]]
    findings = json.loads(first)
    # A meaningful corpus: many rules fire, in several files, the generated model among them.
    assert len({f["code"] for f in findings}) >= 10
    assert any(f["path"] == str(model) for f in findings)
    for key, out in outputs.items():
        assert out == first, f"PYTHONHASHSEED={key[0]} -j {key[1]} differs from {RUNS[0]}"
    # And in a stable order: sorted by (path, line, column, code, message).
    order = [(f["path"], f["line"], f["column"], f["code"], f["message"]) for f in findings]
    assert order == sorted(order)


SLOW_IMPORT = """
import json, sys, time
from stridelens.server.analysis import replay
from stridelens.server.cli import check_command

real = replay.load_torch
def slow_load_torch():
    if not replay.torch_loaded():
        time.sleep(2.5)  # a cold torch import on a loaded CI machine
    return real()
replay.load_torch = slow_load_torch
check_command.BUDGET_STEPS = 2_000  # the file stops part-way: where must not depend on time
settings = check_command.Settings(select=None, ignore=(), severity=(), keep_source=False)
cold = check_command.check_file(sys.argv[1], settings)
warm = check_command.check_file(sys.argv[1], settings)
print(json.dumps([cold.replayed, [f.to_json() for f in cold.findings] == [f.to_json() for f in warm.findings],
                  len(cold.findings)]))
"""


def test_a_slow_torch_import_changes_no_finding(tmp_path: Path) -> None:
    """Regression: the first replay in a `check` worker counted torch's import (3-7 s here)
    against a 5 s budget, timed out, and dropped most findings of whichever file came first.
    The budget is a count of statements now: a cold import and a warm one stop at the same place."""
    model = tmp_path / "m.py"
    model.write_text(generate_model_source(400), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", SLOW_IMPORT, str(model)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    replayed, same, count = json.loads(out.stdout)
    assert replayed and count >= 10
    assert same, "the cold run (torch imported during it) found less than the warm one"


def _burn() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@pytest.mark.timeout(600)
def test_the_same_findings_under_a_cpu_burning_neighbour(tmp_path: Path) -> None:
    """Issue 31: a file that stops at its budget stops at the same statement on a fast machine and
    on a slower one (here: beside a busy loop on every core), so `check` gives the same bytes on
    both. A budget in seconds gave fewer findings
    on the slow one."""
    model = tmp_path / "generated_model.py"
    model.write_text(generate_model_source(3000), encoding="utf-8")
    command = [sys.executable, "-m", "stridelens", "check", "--format", "json", "--no-config", "--select", "ALL",
               "-j", "1", "--budget", "3000", str(model)]  # fmt: skip
    fast = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    burners = [_burn() for _ in range(os.cpu_count() or 1)]
    try:
        slow = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert fast.returncode == 1 and "stopped at its budget (3000 statements" in fast.stderr, fast.stderr
    assert slow.stderr == fast.stderr
    findings = json.loads(fast.stdout)
    assert len(findings) >= 5  # findings before the stop, and the same ones
    assert slow.stdout == fast.stdout
