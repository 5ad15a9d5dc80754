"""`pip install .` ships every module under its namespaced name (no bare `server`)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_every_module_under_stridelens(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("stridelens-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "stridelens/" + str(path.relative_to(ROOT / folder)).replace("\\", "/")
        if folder == "server/_root"
        else f"stridelens/{prefix}/" + str(path.relative_to(ROOT / folder)).replace("\\", "/")
        for folder, prefix in (("server", "server"), ("inspector", "inspector"), ("server/_root", ""))
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts and (folder == "server/_root" or "_root" not in path.parts)
    }
    missing = sorted(expected - names)
    assert not missing, f"modules missing from the wheel (add their package to pyproject.toml): {missing}"
    assert not any(n.startswith(("server/", "inspector/")) for n in names), "bare top-level packages"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "stridelens = stridelens.server.cli:main" in text
