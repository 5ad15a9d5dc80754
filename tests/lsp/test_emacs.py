"""A third, independent client: Emacs with eglot, in batch mode, runs a scripted session
(emacs_session.el) against `stridelens serve`, set up by the docs' own elisp block (docs/editors.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import EXAMPLES, ROOT

HERE = Path(__file__).resolve().parent
EMACS = shutil.which("emacs")
SKIPPED = 77  # emacs_session.el's exit status when eglot cannot be loaded
INSTALL = "`.ci/run` installs both: apt-get install emacs-nox elpa-eglot"

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(EMACS is None, reason=f"Emacs is not installed ({INSTALL})"),
]


def readme_elisp() -> tuple[str, str]:
    """The editor guide's ```elisp block under its heading `### Emacs (eglot ...)`, and the
    workspace-configuration form its comment shows, uncommented."""
    guide = (ROOT / "docs" / "editors.md").read_text(encoding="utf-8")
    found = re.search(r"^### Emacs \(eglot[^\n]*\n\s*```elisp\n(.*?)^```", guide, re.M | re.S)
    assert found, "docs/editors.md has no ```elisp block right under `### Emacs (eglot...)`"
    block = found.group(1)
    comment = " ".join(line.lstrip(";").strip() for line in block.splitlines() if line.lstrip().startswith(";;"))
    form = comment[comment.index("(setq-default eglot-workspace-configuration") :]
    assert form.count("(") == form.count(")"), f"unbalanced form in the README's comment: {form}"
    return block, form


def server_alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"stridelens" in cmdline


def run_session(tmp_path: Path, config_form: str, block: str) -> tuple[list[dict[str, Any]], str]:
    assert EMACS is not None
    project = tmp_path / "project"
    project.mkdir()
    target = project / "view_vs_reshape.py"
    shutil.copyfile(EXAMPLES / "view_vs_reshape.py", target)
    (tmp_path / "readme.el").write_text(block, encoding="utf-8")
    # The guide's command is plain `python -m stridelens serve`: `python` on PATH must be
    # this interpreter (the venv's), never a system one.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    pidfile = tmp_path / "server.pid"
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(home),
        STRIDELENS_README_ELISP=str(tmp_path / "readme.el"),
        STRIDELENS_CONFIG_FORM=config_form,
        STRIDELENS_FILE=str(target),
        STRIDELENS_PIDFILE=str(pidfile),
    )
    env.pop("EMACSLOADPATH", None)
    proc = subprocess.Popen(
        [EMACS, "--batch", "-l", str(HERE / "emacs_session.el")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=project,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        if pidfile.exists():
            pid = int(pidfile.read_text().strip())
            deadline = time.monotonic() + 5
            while server_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if server_alive(pid):
                os.kill(pid, signal.SIGKILL)
    if proc.returncode == SKIPPED:
        pytest.skip(f"eglot is not installed for {EMACS} ({INSTALL})")
    assert proc.returncode == 0, f"emacs exited {proc.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return events, stderr


def plain(text: str) -> str:
    """Hover text without markdown emphasis and code marks (the server sends markdown)."""
    return re.sub(r"[*`]", "", text)


def test_emacs_eglot_readme_setup(tmp_path: Path) -> None:
    block, form = readme_elisp()
    assert '"python" "-m" "stridelens" "serve"' in block
    assert form.count('"SL208"') == 1, form
    events, stderr = run_session(tmp_path, form.replace('"SL208"', '"SL101"'), block)
    by_event: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_event.setdefault(event["event"], []).append(event)

    (versions,) = by_event["versions"]
    assert versions["python"] == str(tmp_path / "bin" / "python"), versions
    (server,) = by_event["server"]
    assert server["command"] == ["python", "-m", "stridelens", "serve"]
    assert server["initializationOptions"] == {"inlayHints": "shapes"}
    assert "stridelens settings:" not in stderr, stderr  # the server took the guide's options

    # Flymake's diagnostics, as Emacs shows them: "stridelens [SL101]: ..." on line 12.
    initial, configured = by_event["diagnostics"]
    codes = {(d["line"], re.findall(r"\[(SL\d+)\]", d["text"])[0]) for d in initial["items"]}
    assert codes == {(11, "SL103"), (12, "SL101")}, initial["items"]
    (sl101,) = [d for d in initial["items"] if "[SL101]" in d["text"]]
    assert sl101["type"] == "eglot-error"
    assert sl101["column"] == 10  # `xt.view(-1)` in `fails = xt.view(-1)`
    assert sl101["text"].startswith("stridelens [SL101]: `.view()` raises here")
    assert "strides (4, 12, 1)" in sl101["text"]

    # Hovers, as eldoc renders them.
    hovers = {h["where"]: h for h in by_event["hover"]}
    assert (hovers["xt"]["line"], hovers["xt"]["column"]) == (10, 0)
    xt = plain(hovers["xt"]["text"])
    for fact in ("shape (3, 2, 4)", "strides (4, 12, 1)", "contiguous no", "view of x"):
        assert fact in xt, f"{fact!r} not in the hover:\n{hovers['xt']['text']}"
    assert hovers["view"]["line"] == 12
    view = plain(hovers["view"]["text"])
    assert "raises at run time" in view and "strides (4, 12, 1)" in view, hovers["view"]["text"]

    # The guide's eglot-workspace-configuration form (ignoring SL101 here), then
    # eglot-signal-didChangeConfiguration: SL101 goes, SL103 stays.
    assert [d["line"] for d in configured["items"]] == [11], configured["items"]
    assert "[SL103]" in configured["items"][0]["text"]

    (shutdown,) = by_event["shutdown"]
    assert shutdown["running"] is False
