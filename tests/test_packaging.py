"""`pip install .` ships every module under its namespaced name (no bare `server`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from stridelens import __version__

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
    # The message catalogues ship as .po (compiled in memory when a language is chosen).
    assert "stridelens/i18n/locale/zh_CN/LC_MESSAGES/stridelens.po" in names


# --------------------------------------------------------------------------- installs
# What a user outside this repository does: build, install the wheel into a fresh venv (with
# and without torch), run the console script; and use the repository as a pre-commit hook.

# A view that raises for every size (symbolic), and one that needs torch's replay to be known.
SAMPLE = '''import torch


def forward(x):
    B, T, C = x.shape
    y = x.transpose(1, 2)
    return y.view(B, -1)


a = torch.randn(2, 3, 4)
b = a.transpose(0, 1).view(-1)
'''


def _venv(where: Path, *packages: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return where / "bin"


def _clean_env() -> dict[str, str]:
    # No PYTHONPATH/virtualenv of the test run may leak into the fresh environments.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_env(),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return next(out.glob("stridelens-*.whl")), next(out.glob("stridelens-*.tar.gz")), proc.stdout + proc.stderr


def test_build_makes_a_wheel_and_an_sdist_without_warnings(built: tuple[Path, Path, str]) -> None:
    wheel, sdist, log = built
    assert f"stridelens-{__version__}-" in wheel.name and sdist.name == f"stridelens-{__version__}.tar.gz"
    assert "warning" not in log.lower(), [line for line in log.splitlines() if "warning" in line.lower()]
    metadata = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: MIT" in text
    # torch is the user's choice (an extra), never pulled in by `pip install stridelens`.
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist: torch")]
    assert requires and all("extra ==" in line for line in requires)


def test_the_wheel_in_a_fresh_venv_with_torch(built: tuple[Path, Path, str], tmp_path: Path) -> None:
    wheel, _, _ = built
    bin_dir = _venv(tmp_path / "venv", "torch==2.13.0", str(wheel))
    exe = str(bin_dir / "stridelens")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, env=_clean_env())
    assert version.stdout.strip() == f"stridelens {__version__}"
    sample = tmp_path / "sample.py"
    sample.write_text(SAMPLE)
    check = subprocess.run([exe, "check", str(sample), "--no-config"], capture_output=True, text=True, timeout=300, env=_clean_env())
    assert check.returncode == 1, check.stderr
    assert check.stdout.count("SL101") == 2  # the symbolic view and the replayed one
    assert "torch is not installed" not in check.stderr
    explain = subprocess.run(
        [exe, "explain", f"{sample}:10:1", "--format", "json"], capture_output=True, text=True, timeout=300, env=_clean_env()
    )
    assert explain.returncode == 0, explain.stderr
    card = json.loads(explain.stdout)
    assert (card["shape"], card["strides"], card["contiguous"]) == ([2, 3, 4], [12, 4, 1], True)


def test_the_wheel_without_torch_gives_the_symbolic_findings(built: tuple[Path, Path, str], tmp_path: Path) -> None:
    wheel, _, _ = built
    bin_dir = _venv(tmp_path / "venv", str(wheel))
    sample = tmp_path / "sample.py"
    sample.write_text(SAMPLE)
    check = subprocess.run(
        [str(bin_dir / "stridelens"), "check", str(sample), "--no-config"], capture_output=True, text=True, timeout=300, env=_clean_env()
    )
    assert check.returncode == 1, check.stderr
    # The view over `x.shape` is found from the symbolic pass; the literal-size one needs torch.
    assert check.stdout.count("SL101") == 1 and f"{sample}:7:" in check.stdout
    assert "torch is not installed for this interpreter" in check.stderr


def test_pipx_installs_the_wheel_as_a_tool_and_torch_can_be_injected(built: tuple[Path, Path, str], tmp_path: Path) -> None:
    wheel, _, _ = built
    env = {**_clean_env(), "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    pipx = [sys.executable, "-m", "pipx"]
    install = subprocess.run([*pipx, "install", str(wheel)], capture_output=True, text=True, timeout=900, env=env)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    exe = str(tmp_path / "bin" / "stridelens")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, env=env)
    assert version.stdout.strip() == f"stridelens {__version__}"
    sample = tmp_path / "sample.py"
    sample.write_text(SAMPLE)
    symbolic = subprocess.run([exe, "check", str(sample), "--no-config"], capture_output=True, text=True, timeout=300, env=env)
    assert symbolic.stdout.count("SL101") == 1 and "torch is not installed" in symbolic.stderr
    # README: `pipx inject stridelens torch` gives the tool's venv torch for the replay.
    inject = subprocess.run([*pipx, "inject", "stridelens", "torch==2.13.0"], capture_output=True, text=True, timeout=900, env=env)
    assert inject.returncode == 0, inject.stdout[-3000:] + inject.stderr[-3000:]
    replayed = subprocess.run([exe, "check", str(sample), "--no-config"], capture_output=True, text=True, timeout=300, env=env)
    assert replayed.stdout.count("SL101") == 2 and "torch is not installed" not in replayed.stderr


def test_the_repository_works_as_a_pre_commit_hook(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    if not (clone / ".pre-commit-hooks.yaml").exists():
        pytest.fail(".pre-commit-hooks.yaml is not committed")
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(SAMPLE)
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=60)
    subprocess.run([*git, "add", "model.py"], check=True, timeout=60)
    env = {**_clean_env(), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(clone), "stridelens", "--files", "model.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stridelens check" in proc.stdout and "Failed" in proc.stdout
    assert "SL101" in proc.stdout


# --------------------------------------------------------------------------- too-old Pythons
# stridelens needs 3.10; an editor pointed at an older interpreter must hear why, not crash.


def _old_python(minor: int) -> str | None:
    import glob
    import shutil

    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", f"python3.{minor}")))
    found = candidates[-1] if candidates else shutil.which(f"python3.{minor}")
    if found is None:
        return None
    # A pyenv shim is on PATH for every version, installed or not: it must really run.
    probe = subprocess.run([found, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True, timeout=60)
    return found if probe.stdout.strip() == str(minor) else None


@pytest.mark.parametrize("minor", [6, 9])
def test_the_extension_launcher_tells_a_too_old_python_what_it_needs(minor: int) -> None:
    python = _old_python(minor)
    if python is None:
        pytest.skip(f"no Python 3.{minor} on this machine")
    launch = ROOT / "vscode-client" / "bundled" / "tool" / "launch.py"
    for args in (["--info"], ["serve"]):
        proc = subprocess.run([python, str(launch), *args], capture_output=True, text=True, timeout=60, env=_clean_env())
        assert proc.returncode == 3, proc.stderr  # TOO_OLD: the extension's status bar says it
        assert f"stridelens needs Python 3.10 or newer; {python} is Python 3.{minor}." in proc.stderr
        assert proc.stdout == ""


def test_pip_refuses_the_wheel_on_a_too_old_python(built: tuple[Path, Path, str], tmp_path: Path) -> None:
    python = _old_python(9)
    if python is None:
        pytest.skip("no Python 3.9 on this machine")
    wheel, _, _ = built
    subprocess.run([python, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    venv_python = str(tmp_path / "venv" / "bin" / "python")
    proc = subprocess.run(
        [venv_python, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=300, env=_clean_env(),
    )
    assert proc.returncode != 0
    assert "requires a different Python" in proc.stdout + proc.stderr
    assert not list((tmp_path / "venv").rglob("stridelens"))  # nothing half-installed
