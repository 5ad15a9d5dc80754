"""`make demo`: run stridelens on the bundled examples.

Explains every line marked `# explain` (the assigned name), lints the examples with
`stridelens check`, then runs the `stridelens inspect` command written in the docstring of
each runtime example (examples/runtime/). Each command is printed before it runs, so it
can be copied.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARKED = re.compile(r"^\s*[A-Za-z_].*#\s*explain")  # code, then a trailing `# explain`


def explain_positions(path: Path) -> list[str]:
    positions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if MARKED.match(line):
            column = len(line) - len(line.lstrip()) + 1
            positions.append(f"{path.relative_to(Path.cwd())}:{number}:{column}")
    return positions


def inspect_command(path: Path) -> list[str] | None:
    """The `stridelens inspect ...` command in the example's docstring, as arguments."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    joined = doc.replace("\\\n", " ")
    for line in joined.splitlines():
        if line.strip().startswith("stridelens inspect "):
            return shlex.split(line.strip())[1:]
    return None


def run(args: list[str]) -> int:
    print(f"\n$ stridelens {shlex.join(args)}", flush=True)
    return subprocess.call([sys.executable, "-m", "stridelens", *args])


def main() -> int:
    failures = 0
    for path in sorted(HERE.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        positions = explain_positions(path)
        if positions:
            failures += run(["explain", *positions]) != 0
    # `check` exits 1 when it finds something: that is the point of these examples.
    status = run(["check", str(HERE.relative_to(Path.cwd()))])
    failures += status not in (0, 1)
    for path in sorted((HERE / "runtime").glob("*.py")):
        command = inspect_command(path)
        if command is not None:
            failures += run(command) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
