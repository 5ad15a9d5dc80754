"""Lint throughput and findings on real model code: timm and torchvision wheels.

    python bench/lint_corpus.py [--skip-torchfix] [--torchfix-timeout S] [--jobs N] [--transformers]

`--transformers` adds transformers 5.24.0's `models/` (1,048,775 lines; TorchFix is not run on
it: FACTS.md records 1,215 s for it on this machine).

Downloads the wheels with `pip download --no-deps` into bench/_corpus/ (git-ignored),
unzips them (never imports them), then times on each tree:
  - a loop that only `ast.parse`s every file (the floor for any AST-based analyser),
  - `stridelens check --select ALL` on one core (`-j 1`) and on all cores: every rule, those off
    by default included (a benchmark measures them all, whatever the default selection is),
  - `torchfix` (installed into the current environment for the bench only, if it can be),
and prints files, lines, seconds and ratios (wall, and for one core also the CPU seconds
of the check process against the floor's: the figure to read on a shared, busy machine),
then the findings per rule, every error-severity finding, and a sample of warnings to judge
by hand.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
import warnings
import zipfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "_corpus"
PACKAGES = (("timm", ""), ("torchvision", ""))  # (name, sub-folder of the package to lint)
TRANSFORMERS = ("transformers==5.24.0", "models")
BIN = Path(sys.executable).with_name("stridelens")


def fetch(packages: tuple[tuple[str, str], ...]) -> dict[str, Path]:
    CORPUS.mkdir(exist_ok=True)
    trees: dict[str, Path] = {}
    for spec, sub in packages:
        name, _, version = spec.partition("==")
        wheels = sorted(CORPUS.glob(f"{name}-{version or '*'}-*.whl"))
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec, "-d", str(CORPUS)],
                check=True,
            )
            wheels = sorted(CORPUS.glob(f"{name}-{version or '*'}-*.whl"))
        wheel = wheels[-1]
        target = CORPUS / wheel.name.removesuffix(".whl")
        if not target.exists():
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(target)
        label = wheel.name.split("-")[0] + " " + wheel.name.split("-")[1] + (f" {sub}/" if sub else "")
        trees[label] = target / name / sub if sub else target / name
    return trees


def python_files(root: Path) -> list[str]:
    return sorted(glob.glob(str(root / "**" / "*.py"), recursive=True))


def parse_loop(files: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of reading and `ast.parse`-ing every file."""
    start, cpu = time.perf_counter(), time.process_time()
    for path in files:
        with open(path, "rb") as handle:
            data = handle.read()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(data)
    return time.perf_counter() - start, time.process_time() - cpu


def compile_stridelens() -> None:
    """Bytecode for stridelens' own modules, as `pip install` writes for an installed tool.
    An editable checkout under PYTHONDONTWRITEBYTECODE=1 (this machine's default) has none,
    so every `check` would recompile ~50 modules first (~0.2 s, a tenth of timm's floor)."""
    import compileall

    for folder in ("server", "inspector"):
        compileall.compile_dir(str(HERE.parent / folder), quiet=1)


def run_check(root: Path, jobs: int) -> tuple[float, list[dict], float]:
    """Wall seconds, findings, and CPU seconds of the `check` process (and its workers):
    the CPU figure is what to compare on a shared machine, where wall time also counts the
    other processes' turns."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [str(BIN), "check", str(root), "--format", "json", "-j", str(jobs), "--no-config", "--select", "ALL"],
        capture_output=True, text=True,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        print(proc.stderr, file=sys.stderr)
    return elapsed, json.loads(proc.stdout or "[]"), cpu


def ensure_torchfix() -> str | None:
    exe = shutil.which("torchfix") or str(Path(sys.executable).with_name("torchfix"))
    if os.path.exists(exe):
        return exe
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "torchfix"], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"torchfix could not be installed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return exe if os.path.exists(exe) else shutil.which("torchfix")


def run_torchfix(exe: str, root: Path, timeout: float) -> float | None:
    start = time.perf_counter()
    try:
        subprocess.run([exe, str(root)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-torchfix", action="store_true")
    parser.add_argument("--torchfix-timeout", type=float, default=900)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--transformers", action="store_true", help="also transformers' models/")
    args = parser.parse_args()

    trees = fetch(PACKAGES + ((TRANSFORMERS,) if args.transformers else ()))
    compile_stridelens()
    torchfix = None if args.skip_torchfix else ensure_torchfix()
    all_findings: list[dict] = []
    print(f"{'tree':<27} {'files':>6} {'lines':>8} {'parse s':>8} {'check 1c':>9} {'x parse':>8} "
          f"{'cpu x':>7} {f'check {args.jobs}c':>9} {'x parse':>8} {'torchfix':>9} {'tf/check':>9}")
    for label, root in trees.items():
        files = python_files(root)
        lines = 0
        for path in files:
            with open(path, "rb") as handle:
                lines += handle.read().count(b"\n")
        parse_s, parse_cpu = min(parse_loop(files) for _ in range(2))
        # The same treatment as the floor: the best of two runs (this machine is noisy).
        one_s, findings, one_cpu = min(run_check(root, 1), run_check(root, 1), key=lambda run: run[0])
        many_s, _, _ = run_check(root, args.jobs)
        all_findings.extend(findings)
        run_tf = torchfix is not None and not label.startswith("transformers")
        tf = run_torchfix(torchfix, root, args.torchfix_timeout) if run_tf and torchfix else None
        tf_text = "skipped" if not run_tf else (f"{tf:.1f}" if tf is not None else f">{args.torchfix_timeout:.0f}")
        ratio = f"{tf / one_s:.0f}x" if tf else "-"
        print(f"{label:<27} {len(files):>6} {lines:>8} {parse_s:>8.2f} {one_s:>9.2f} {one_s / parse_s:>7.1f}x "
              f"{one_cpu / parse_cpu:>6.1f}x {many_s:>9.2f} {many_s / parse_s:>7.1f}x {tf_text:>9} {ratio:>9}")

    print("\nfindings per rule:")
    counts = Counter(f["code"] for f in all_findings)
    for code in sorted(counts):
        print(f"  {code}: {counts[code]}")
    errors = [f for f in all_findings if f["severity"] == "error"]
    print(f"\nerror-severity findings: {len(errors)}")
    for f in errors:
        print(f"  {f['path']}:{f['line']}:{f['column']}: {f['code']} {f['message']}")
    warn = [f for f in all_findings if f["severity"] == "warning"]
    random.Random(0).shuffle(warn)
    print(f"\nsample of {min(args.sample, len(warn))} of {len(warn)} warnings:")
    for f in sorted(warn[: args.sample], key=lambda f: (f["path"], f["line"])):
        print(f"  {f['path']}:{f['line']}:{f['column']}: {f['code']} {f['message'][:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
