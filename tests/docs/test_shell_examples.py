"""The shell examples of README.md and the docs run, and print what they show.

In every ```console (or bash/sh/shell) block of README.md, README.zh-CN.md and docs/**/*.md, a
line `$ stridelens ...` (or `$ .venv/bin/stridelens ...`; `\\` continues it) is run from the
repository root, and every line shown under it, up to the next `$ ` line, must appear in its
output. Compared with whitespace collapsed (so a report wrapped at another place still matches),
the checkout's path written as /path/to/stridelens, `pid N` for any pid and `0x…` for any
address; a shown line starting with `...` or `…` stands for lines left out (a table's rule `───`
is not compared either: its width follows the rows), and `…` inside a line
for anything (a number that changes from run to run: `process RSS … (peak …)`).

A block that cannot run here (a live process, a torchrun job) says so right above its fence:

    <!-- docs-test: skip: attaches to a running process (its PID) -->

and its commands are reported as skipped with that reason. Any other `$ ` command, one that is
neither stridelens nor in a skipped block, fails: nothing is left out silently.

`python -m tests.docs.test_shell_examples --write` runs the docs' examples and writes their
real output under each command (README's keep the few lines they show, chosen by hand).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOWN_ROOT = "/path/to/stridelens"
COLUMNS = "120"  # the width the shown reports were made at (inspect fits COLUMNS)
SHELL_FENCES = {"console", "bash", "sh", "shell", "shell-session"}
SKIP = re.compile(r"^<!-- docs-test: skip: (.+?) -->$")
PROGRAMS = ("stridelens", ".venv/bin/stridelens")


@dataclass
class Example:
    path: Path
    line: int  # 1-based, of the `$ ` line
    command: str
    shown: list[str] = field(default_factory=list)
    skip: str | None = None
    output_lines: tuple[int, int] = (0, 0)  # the shown output's lines (0-based, end excluded)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runs_stridelens(self) -> bool:
        return self.command.split(" ", 1)[0] in PROGRAMS


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "README.zh-CN.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples_in(path: Path) -> list[Example]:
    lines = path.read_text(encoding="utf-8").split("\n")
    found: list[Example] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        i += 1
        body_start = i
        while i < len(lines) and not lines[i].strip().startswith("```"):
            i += 1
        if fence.group(2) not in SHELL_FENCES:
            i += 1
            continue
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = SKIP.match(lines[before].strip()) if before >= 0 else None
        current: Example | None = None
        j = body_start
        while j < i:
            text = lines[j].strip()
            if text.startswith("$ "):
                command_line = j
                command = text[2:]
                while command.endswith("\\") and j + 1 < i:
                    j += 1
                    command = command[:-1].rstrip() + " " + lines[j].strip()
                current = Example(path, command_line + 1, command, skip=marker.group(1) if marker else None)
                current.output_lines = (j + 1, j + 1)
                found.append(current)
            elif current is not None:
                # A table's rule (its width follows the rows shown) and `...` lines are not compared.
                if text and not text.startswith(("...", "…")) and text.strip("─━═ "):
                    current.shown.append(lines[j])
                current.output_lines = (current.output_lines[0], j + 1)
            j += 1
        i += 1
    return found


def all_examples() -> list[Example]:
    return [example for path in markdown_files() for example in examples_in(path)]


def normalize(text: str) -> str:
    text = text.replace(str(ROOT), SHOWN_ROOT)
    text = re.sub(r"\b(pid|PID) \d+", r"\1 N", text)
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    return " ".join(text.split())


def shows(line: str, actual: str) -> bool:
    """Whether the normalized output has the shown line, each `…` in it matching anything."""
    parts = [re.escape(part) for part in normalize(line).split("…")]
    return re.search(".*?".join(parts), actual) is not None


def argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    assert words[0] in PROGRAMS, command
    return [sys.executable, "-m", "stridelens", *words[1:]]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANGUAGE")}
    env.update(LANG="C.UTF-8", COLUMNS=COLUMNS, PYTHONWARNINGS="ignore:Failed to initialize NumPy")
    return env


def run(command: str) -> tuple[int, str]:
    done = subprocess.run(argv(command), cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=180)
    return done.returncode, done.stdout + done.stderr


@cache
def results() -> dict[str, tuple[int, str]]:
    """Every runnable command's exit status and output, run side by side once (most of each
    is a Python start and torch's import: two cores run three of them at a time well)."""
    commands = sorted({e.command for e in all_examples() if e.runs_stridelens and e.skip is None})
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(commands, pool.map(run, commands), strict=True))


EXAMPLES = all_examples()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_shell_example_prints_what_it_shows(example: Example) -> None:
    if example.skip is not None:
        pytest.skip(f"marked in the markdown: {example.skip}")
    assert example.runs_stridelens, (
        f"{example.id}: `$ {example.command}` is not a stridelens command: run it here, or mark its "
        "block with <!-- docs-test: skip: REASON -->"
    )
    assert example.shown, f"{example.id}: no output shown under `$ {example.command}`"
    status, output = results()[example.command]
    assert status in (0, 1), f"{example.id}: exit status {status}\n{output[-3000:]}"
    actual = normalize(output)
    missing = [line for line in example.shown if not shows(line, actual)]
    assert not missing, f"{example.id}: not in the output of `$ {example.command}`:\n" + "\n".join(missing) + (
        f"\n--- the output:\n{output}"
    )


def test_the_readme_and_the_docs_have_examples_that_run() -> None:
    ran = [e for e in EXAMPLES if e.skip is None]
    assert sum(e.path.name == "README.md" for e in ran) >= 3
    assert sum("docs" in e.path.parts for e in ran) >= 10
    assert {e.command.split()[1] for e in ran} >= {"explain", "check", "inspect"}


def test_a_block_is_read_as_commands_shown_lines_and_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ stridelens check a.py \\\n    --select ALL\na.py:1:1: SL101 x\n...\n\n$ stridelens rule SL101\n"
        "# SL101 view-noncontiguous\n```\n\n<!-- docs-test: skip: a live process -->\n\n```console\n"
        "$ stridelens inspect --pid 1\nstopped\n```\n```text\n$ stridelens not a shell block\n```\n",
        encoding="utf-8",
    )
    first, second, third = examples_in(page)
    assert (first.line, first.command, first.shown, first.skip) == (2, "stridelens check a.py --select ALL", ["a.py:1:1: SL101 x"], None)
    assert (second.command, second.shown, second.skip) == ("stridelens rule SL101", ["# SL101 view-noncontiguous"], None)
    assert (third.command, third.skip) == ("stridelens inspect --pid 1", "a live process")
    actual = normalize(f"stopped {ROOT}/x.py:3\n  — pid 4242 at 0xdeadbeef, RSS 335.5 MiB (peak 341.6 MiB)")
    assert actual == f"stopped {SHOWN_ROOT}/x.py:3 — pid N at 0x…, RSS 335.5 MiB (peak 341.6 MiB)"
    assert shows(f"stopped {SHOWN_ROOT}/x.py:3 — pid 77", actual) and shows("at 0x12ab, RSS … (peak …)", actual)
    assert not shows("RSS … (peak 1.0 MiB)", actual) and not shows("at 0x1, RSS 1", actual)


def write_outputs() -> None:
    """Put each runnable command's real output under it in docs/ (for a maintainer)."""
    by_path: dict[Path, list[Example]] = {}
    for example in EXAMPLES:
        if example.runs_stridelens and example.skip is None and "docs" in example.path.relative_to(ROOT).parts:
            by_path.setdefault(example.path, []).append(example)
    outputs = results()
    for path, examples in by_path.items():
        lines = path.read_text(encoding="utf-8").split("\n")
        for example in sorted(examples, key=lambda e: -e.line):
            start, end = example.output_lines
            while end > start and not lines[end - 1].strip():
                end -= 1
            text = outputs[example.command][1].replace(str(ROOT), SHOWN_ROOT).rstrip("\n")
            lines[start:end] = [line.rstrip() for line in text.split("\n")]
        path.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.docs.test_shell_examples --write")
    write_outputs()
