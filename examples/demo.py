"""`make demo`: stridelens on the bundled examples, in three screens.

1. `stridelens explain` on one line of a GPT-style attention whose sizes are not literal
   (shape, strides and the conditions they assume, written over the code's own names);
2. `stridelens check` on a `.view()` that raises at run time, with its fix as a diff;
3. `stridelens inspect` stopped in a training loop whose `losses` list keeps every
   iteration's autograd graph alive (a leak report).

`python examples/demo.py --all` is the long tour: every line marked `# explain` in
examples/*.py, `check` on all of them, and the `stridelens inspect` command written in the
docstring of each runtime example (examples/runtime/). Each command is printed before it
runs, so it can be copied.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import shlex
import subprocess
import sys
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
MARKER = re.compile(r"#\s*explain\b")
# The target scripts import torch, which warns once when numpy is absent; that warning says
# nothing about the example.
QUIET_TORCH = {"PYTHONWARNINGS": "ignore:Failed to initialize NumPy"}


def explain_positions(path: Path) -> list[str]:
    """`file:line:col` of each line of code that ends in a `# explain` comment (a real
    comment token: the words inside a docstring are not a marker)."""
    positions = []
    text = path.read_text(encoding="utf-8")
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and MARKER.match(token.string) and token.start[0] in code_lines:
            line = token.line
            column = len(line) - len(line.lstrip()) + 1
            positions.append(f"{path.relative_to(Path.cwd())}:{token.start[0]}:{column}")
        elif token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(token.start[0])
    return positions


def inspect_command(path: Path) -> list[str] | None:
    """The `stridelens inspect ...` command in the example's docstring, as arguments."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    joined = doc.replace("\\\n", " ")
    for line in joined.splitlines():
        if line.strip().startswith("stridelens inspect "):
            return shlex.split(line.strip())[1:]
    return None


def run(args: list[str], ok: tuple[int, ...] = (0,)) -> bool:
    print(f"\n$ stridelens {shlex.join(args)}", flush=True)
    status = subprocess.call([sys.executable, "-m", "stridelens", *args], env={**os.environ, **QUIET_TORCH})
    return status in ok


def short_tour() -> bool:
    examples = HERE.relative_to(Path.cwd())
    views = examples / "view_vs_reshape.py"
    k_line = next(p for p in explain_positions(HERE / "symbolic_attention.py") if "k = " in _line_of(p))
    ok = run(["explain", k_line])
    # `check` exits 1 when it finds something, and `--diff` when it would fix something.
    ok &= run(["check", str(views), "--select", "SL101"], ok=(1,))
    ok &= run(["check", str(views), "--select", "SL101", "--diff"], ok=(1,))
    command = inspect_command(HERE / "runtime" / "leaky_losses.py")
    ok &= command is not None and run(command)
    return ok


def _line_of(position: str) -> str:
    path, line, _ = position.rsplit(":", 2)
    return Path(path).read_text(encoding="utf-8").splitlines()[int(line) - 1]


def long_tour() -> bool:
    ok = True
    for path in sorted(HERE.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        positions = explain_positions(path)
        if positions:
            ok &= run(["explain", *positions])
    ok &= run(["check", str(HERE.relative_to(Path.cwd()))], ok=(0, 1))
    for path in sorted((HERE / "runtime").glob("*.py")):
        command = inspect_command(path)
        if command is not None:
            ok &= run(command)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every example, not just the three screens")
    args = parser.parse_args()
    return 0 if (long_tour() if args.all else short_tour()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
