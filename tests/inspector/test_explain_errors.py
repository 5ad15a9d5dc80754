"""`inspect --launch SCRIPT --explain-errors` end to end: real debugpy, real torch on CPU.

The oracle is torch itself: each fixture is also run plainly, and the versions and shape in
its own error message must be the ones reported. The lines are marked in the fixtures
(`# saves:` on the op that saved the tensor, `# bumps:` on the in-place op).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, marker_line

pytestmark = pytest.mark.timeout(240)

FIXTURES = REPO / "tests" / "fixtures" / "explain_errors"


def torch_says(script: Path) -> tuple[list[int], int, int]:
    """Shape, actual and expected version from torch's own message, running the script plainly."""
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    m = re.search(r"\[torch\.\w+ \[([\d, ]*)\]\], which is .*? is at version (\d+); expected version (\d+)",
                  out.stdout + out.stderr)
    assert m, out.stderr[-2000:]
    return [int(x) for x in m.group(1).split(", ")], int(m.group(2)), int(m.group(3))


@pytest.mark.parametrize(("name", "saver", "op", "inplace", "names"), [
    ("sigmoid_scaled.py", "SigmoidBackward0", "sigmoid", "mul_", []),
    # torch's message names the tensor's last producer ("output 0 of Add"); the saver is mul.
    ("residual_add.py", "MulBackward0", "mul", "add_", []),
    ("index_assign.py", "TanhBackward0", "tanh", "fill_", ["h"]),
])
def test_names_the_saving_and_the_inplace_line(inspect_cli: Any, name: str, saver: str, op: str,
                                               inplace: str, names: list[str]) -> None:
    script = FIXTURES / name
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == 0, r.err
    rep = r.json()
    ex = rep["explain_errors"]
    assert ex["occurred"] is True and ex["recorder"]["mechanism"] == "TorchDispatchMode"
    shape, actual, expected = torch_says(script)
    assert (ex["actual_version"], ex["expected_version"]) == (actual, expected)
    assert ex["tensor"]["shape"] == shape
    saved = ex["saved_by"]
    assert saved["node"] == saver and saved["op"] == op
    assert saved["location"]["path"] == str(script)
    assert saved["location"]["line"] == marker_line(script, "# saves:")
    bump = ex["modified_by"][0]
    assert bump["op"] == inplace and bump["version_before"] == expected
    assert bump["location"]["line"] == marker_line(script, "# bumps:")
    assert [n["name"] for n in ex["tensor"]["names"]] == names
    # The stop is the user's line that called backward, not torch's internals.
    assert rep["stop"]["path"] == str(script) and "backward()" in script.read_text().splitlines()[rep["stop"]["line"] - 1]


def test_text_report_and_the_recorder_is_removed(inspect_cli: Any) -> None:
    script = FIXTURES / "index_assign.py"
    r = inspect_cli("--launch", str(script), "--explain-errors")
    assert r.rc == 0, r.err
    rel = script.relative_to(REPO)
    assert f"{rel}:{marker_line(script, '# saves:')} in step" in r.out
    assert f"{rel}:{marker_line(script, '# bumps:')} in step" in r.out
    assert "expected 0, actual 1" in r.out and "bound to: h in <module>" in r.out
    # The script caught the error and went on, without the recorder.
    assert "backward failed: one of the variables" in r.err
    assert "dispatch mode after the report: None" in r.err


def test_clean_script_says_the_error_did_not_occur(inspect_cli: Any) -> None:
    script = FIXTURES / "clean.py"
    r = inspect_cli("--launch", str(script), "--explain-errors", "--format", "json")
    assert r.rc == 0, r.err
    ex = r.json()["explain_errors"]
    assert ex["occurred"] is False and ex["finished"] is True and ex["exit_code"] == 0
    assert ex["other_runtime_errors"] == 1  # its caught `view` error was seen and let go
    assert "clean" in r.err  # the script ran to its end
    r = inspect_cli("--launch", str(script), "--explain-errors")
    assert r.rc == 0 and "No in-place error: the script finished (exit code 0)" in r.out, r.err


def test_explain_errors_usage(inspect_cli: Any) -> None:
    script = FIXTURES / "clean.py"
    r = inspect_cli("--connect", "127.0.0.1:1", "--explain-errors")
    assert r.rc == 2 and "needs --launch" in r.err
    r = inspect_cli("--launch", str(script), "--explain-errors", "--break", f"{script}:5", "--memory")
    assert r.rc == 2 and "drop --break, --memory" in r.err


def test_still_running_at_the_timeout(script: Any, inspect_cli: Any) -> None:
    p = script("forever.py", """
        import time
        import torch
        x = torch.ones(3, requires_grad=True)
        while True:
            (x * 2).sum().backward()
            time.sleep(0.05)
    """)
    r = inspect_cli("--launch", str(p), "--explain-errors", "--timeout", "8", "--kill", "--format", "json")
    assert r.rc == 0, r.err
    ex = r.json()["explain_errors"]
    assert ex["occurred"] is False and ex["finished"] is False and ex["waited_s"] == 8
