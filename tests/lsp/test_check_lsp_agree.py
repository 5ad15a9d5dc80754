"""`stridelens check` and the language server report the same findings for the same text.

Every rule fixture (tests/fixtures/rules/sl*.py, without the `.out.py` halves), every
example (examples/*.py) and a few texts written here are checked with ONE
`stridelens check --format json --no-config --select ALL` run and opened in ONE language server
session (started over stdio with an empty workspace folder, so no pyproject settings apply on
either side, and `select: ["ALL"]`: every rule, those off by default included). Per file, the sets of (line, column, code) must be equal: check's 1-based line and
1-based code-point column against the LSP diagnostic's 0-based line and UTF-16 character
(converted with the document's own text).

The texts written here show the "whatever else the file contains" property: the findings
inside a function (whose `.view()` raises for every size >= 2 on a tensor derived from its
parameter) must not change when an unrelated module-level `reshape`, or a call site of the
function, is added to the file, in check as in the LSP.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .helpers import EXAMPLES, ROOT, start_session, stop_session

pytestmark = pytest.mark.timeout(150)

FIXTURES = ROOT / "tests" / "fixtures" / "rules"
REAL_FILES = sorted(
    [p for p in FIXTURES.glob("sl*.py") if not p.name.endswith(".out.py")] + sorted(EXAMPLES.glob("*.py"))
)

Key = tuple[int, int, str]  # (1-based line, 1-based code-point column, code)

FUNCTION = '''import torch


def merge_heads(x):
    x = x.contiguous()
    B, T, C = x.shape
    return x.transpose(1, 2).view(B, -1)
'''
FUNCTION_LINES = range(4, 8)  # the def and its body: the same lines in every variant
VIEW_LINE = 7
UNRELATED_RESHAPE = "\n\ntable = torch.randn(4, 8).t().reshape(-1)\n"
CALL_SITE = "\n\nout = merge_heads(torch.randn(2, 3, 4))\n"
VARIANTS = {
    "alone": FUNCTION,
    "with_reshape": FUNCTION + UNRELATED_RESHAPE,
    "called": FUNCTION + CALL_SITE,
    "called_with_reshape": FUNCTION + CALL_SITE + UNRELATED_RESHAPE,
}
# UTF-16 columns differ from code-point columns after astral characters (emoji) on the line.
UNICODE = (
    "import torch\n\n"
    "# 形状 🙂 comments do not move columns on other lines\n"
    'note = "张量🙂🙂"; bad = torch.randn(2, 3, 4).transpose(0, 1).view(-1)\n'
    "t = torch.randn(4, 8).t()  # 转置 🙂\n"
    'tag = "🙂"; flat = t.reshape(-1)\n'
)
WRITTEN = {**{f"variant_{name}.py": text for name, text in VARIANTS.items()}, "unicode_columns.py": UNICODE}


def split_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def utf16_to_column(line: str, units: int) -> int:
    """A 0-based UTF-16 offset in `line` -> a 1-based code-point column."""
    count = 0
    for index, char in enumerate(line):
        if count >= units:
            return index + 1
        count += 2 if ord(char) > 0xFFFF else 1
    return len(line) + 1


def run_check(paths: list[Path]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stridelens", "check", "--format", "json", "--no-config", "--select", "ALL",
         *map(str, paths)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


async def lsp_findings(paths: list[Path], root: Path) -> dict[Path, set[Key]]:
    client, session = await start_session(root=root, init_options={"select": ["ALL"]})
    try:
        texts = {p: p.read_text(encoding="utf-8") for p in paths}
        for path, text in texts.items():
            session.open(path.as_uri(), text)
        waits = {p: asyncio.ensure_future(session.wait_analyzed(p.as_uri(), exact=True, timeout=60)) for p in paths}
        await asyncio.wait(waits.values(), timeout=60)
        silent = sorted(p.name for p, w in waits.items() if not w.done() or w.exception() is not None)
        for wait in waits.values():
            wait.cancel()
        assert not silent, f"no exact analysis published within 60 s for: {silent}"
        out: dict[Path, set[Key]] = {}
        for path, text in texts.items():
            uri = path.as_uri()
            lines = split_lines(text)
            out[path] = {
                (
                    d.range.start.line + 1,
                    utf16_to_column(lines[d.range.start.line], d.range.start.character),
                    str(d.code),
                )
                for d in session.diagnostics(uri)
            }
        return out
    finally:
        await stop_session(client)


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both tools' findings for every file: {"check": {path: keys}, "lsp": {path: keys}}."""
    root = tmp_path_factory.mktemp("agree")  # an empty workspace: no [tool.stridelens]
    written = []
    for name, text in WRITTEN.items():
        path = root / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    paths = REAL_FILES + written
    check = run_check(paths)  # runs while the server works (two processes, two cores)
    try:
        lsp = asyncio.run(lsp_findings(paths, root))
        stdout, stderr = check.communicate(timeout=120)
    finally:
        if check.poll() is None:
            check.kill()
            check.communicate()
    assert check.returncode in (0, 1), stderr
    assert "internal error" not in stderr, stderr
    by_path: dict[Path, set[Key]] = {p: set() for p in paths}
    for item in json.loads(stdout):
        by_path[Path(item["path"])].add((item["line"], item["column"], item["code"]))
    return {"check": by_path, "lsp": lsp, "root": root}


def _show(keys: set[Key]) -> list[str]:
    return [f"{line}:{col} {code}" for line, col, code in sorted(keys)]


def _assert_same(path: Path, findings: dict[str, Any]) -> None:
    check, lsp = findings["check"][path], findings["lsp"][path]
    assert check == lsp, (
        f"{path.name}: only in check: {_show(check - lsp)}; only in the LSP: {_show(lsp - check)}"
    )


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_check_and_lsp_agree(path: Path, findings: dict[str, Any]) -> None:
    _assert_same(path, findings)


@pytest.mark.parametrize("name", sorted(WRITTEN))
def test_check_and_lsp_agree_on_written_texts(name: str, findings: dict[str, Any]) -> None:
    _assert_same(findings["root"] / name, findings)


def test_unicode_text_has_findings_after_astral_characters(findings: dict[str, Any]) -> None:
    """The UTF-16 conversion is exercised: findings sit after emoji on their lines."""
    keys = findings["check"][findings["root"] / "unicode_columns.py"]
    assert {line for line, _, _ in keys} >= {4, 6}, _show(keys)


@pytest.mark.parametrize("tool", ["check", "lsp"])
def test_function_findings_do_not_depend_on_the_rest_of_the_file(tool: str, findings: dict[str, Any]) -> None:
    root = findings["root"]
    per_variant = {
        name: {k for k in findings[tool][root / f"variant_{name}.py"] if k[0] in FUNCTION_LINES}
        for name in VARIANTS
    }
    reference = per_variant["alone"]
    # The view raises for every B, T, C >= 2, whatever calls the function: SL101 there.
    assert any(line == VIEW_LINE and code == "SL101" for line, _, code in reference), _show(reference)
    differing = {name: _show(keys) for name, keys in per_variant.items() if keys != reference}
    assert not differing, (
        f"{tool}: the findings inside merge_heads() change with the rest of the file; "
        f"alone: {_show(reference)}; otherwise: {differing}"
    )
