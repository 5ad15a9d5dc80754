"""Fills bundled/libs/ with stridelens and its pure-Python dependencies, for the .vsix.

As the vscode-python-tools template does: the stridelens wheel (built from this checkout) and
its dependencies go into bundled/libs with `pip install --target`, never torch (an optional
extra: the user's interpreter brings it). Only pure-Python wheels are taken (`--platform any`,
resolved for the oldest supported Python, 3.10, so the backports 3.10 needs are there too),
and debugpy's universal wheel is trimmed to what runs on every platform: its Windows binaries,
debug symbols and C/Cython sources go; the Python code and the small Linux/macOS libraries
that PID attach injects stay. `bundled/tool/launch.py` puts the folder on sys.path.

Usage: python scripts/bundle.py   (run from anywhere; `npm run bundle`, part of `npm run package`)
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLIENT = Path(__file__).resolve().parent.parent
REPO = CLIENT.parent
LIBS = CLIENT / "bundled" / "libs"
# The oldest Python stridelens runs on (pyproject.toml requires-python).
MIN_PYTHON = "3.10"
# What is left out of the universal debugpy wheel: compiled code for one platform (Windows
# DLLs/executables, CPython extension modules), their debug symbols, C/Cython sources and
# build scripts. pydevd runs without its Cython speedups (pure-Python tracing).
DROP = [
    "*.pdb", "*.exe", "*.dll", "*.pyd", "*.c", "*.cpp", "*.h", "*.hpp", "*.pyx", "*.pxd",
    "*.sh", "*.bat", "*.cmd", "*.cython-*.so", "*.cpython-*.so",
    "debugpy/_vendored/pydevd/pydevd_attach_to_process/winappdbg",
    "debugpy/_vendored/pydevd/pydevd_attach_to_process/windows",
    "debugpy/_vendored/pydevd/setup_pydevd_cython.py",
    "debugpy/_vendored/pydevd/build_tools",
]
# Copied to a scratch folder before building, so that a build in the checkout (build/,
# *.egg-info) by someone else at the same time cannot mix with this one.
SOURCES = ["pyproject.toml", "README.md", "LICENSE", "server", "inspector"]


def run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"bundle: {' '.join(cmd[:6])} ... failed ({r.returncode})")


def pip_install(target: Path, *reqs: str) -> None:
    run(sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
        "--target", str(target), "--only-binary=:all:", "--platform", "any", "--implementation", "py",
        "--python-version", MIN_PYTHON, *reqs)


def missing_for_oldest_python(target: Path) -> list[str]:
    """Requirements whose markers hold on Python 3.10 but were skipped (pip evaluates markers
    for the Python it runs on, `--python-version` only picks wheels): exceptiongroup for cattrs."""
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

    have = set()
    reqs = []
    for meta in target.glob("*.dist-info/METADATA"):
        lines = meta.read_text(encoding="utf-8").splitlines()
        have.update(canonicalize_name(x.split(":", 1)[1].strip()) for x in lines if x.startswith("Name:"))
        reqs += [Requirement(x.split(":", 1)[1].strip()) for x in lines if x.startswith("Requires-Dist:")]
    env = {"python_version": MIN_PYTHON, "python_full_version": f"{MIN_PYTHON}.0", "extra": ""}
    return sorted({f"{r.name}{r.specifier}" for r in reqs if canonicalize_name(r.name) not in have
                   and (r.marker is None or r.marker.evaluate(env))})


def dropped(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(rel.rsplit("/", 1)[-1], p) for p in DROP)


def main() -> int:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="stridelens-bundle-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for name in SOURCES:
            p = REPO / name
            if p.is_dir():
                shutil.copytree(p, src / name, ignore=ignore)
            else:
                shutil.copy2(p, src / name)
        wheels = Path(tmp) / "wheels"
        run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src))
        (wheel,) = wheels.glob("stridelens-*.whl")
        staging = Path(tmp) / "libs"
        pip_install(staging, str(wheel))
        for _ in range(3):  # their own requirements may have such markers too
            extra = missing_for_oldest_python(staging)
            if not extra:
                break
            pip_install(staging, *extra)
        shutil.rmtree(staging / "bin", ignore_errors=True)  # console scripts with this machine's shebang
        for path in sorted(staging.rglob("*"), reverse=True):
            rel = path.relative_to(staging).as_posix()
            if path.exists() and (dropped(rel) or path.name == "__pycache__"):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        if any(staging.glob("torch*")):
            raise SystemExit("bundle: torch must not be bundled")
        shutil.rmtree(LIBS, ignore_errors=True)
        LIBS.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), LIBS)
    size = sum(f.stat().st_size for f in LIBS.rglob("*") if f.is_file())
    tops = sorted(p.name for p in LIBS.iterdir() if p.suffix != ".dist-info")
    print(f"bundle: {wheel.name} and {len(tops)} packages ({', '.join(tops)}) in bundled/libs, "
          f"{size / 2**20:.1f} MiB unpacked, {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
