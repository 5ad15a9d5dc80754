"""The VS Code extension's launcher (vscode-client/bundled/tool/launch.py) and the language of
what it writes for the memory panel: STRIDELENS_LANG (the extension's language) is the language
of `--from-target` (the probe's English texts, as `inspect` shows them) and `--analyze`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LAUNCH = Path(__file__).resolve().parents[1] / "vscode-client" / "bundled" / "tool" / "launch.py"
# A text the probe writes (probe.py marks its template with N_()).
FINDING = "losses (list of 20) keeps 20 autograd graphs alive holding 7.5 MiB of saved tensors; store .item() or .detach() instead"


def _run(args: list[str], stdin: str, lang: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STRIDELENS_LANG", "LANG", "LC_ALL", "LC_MESSAGES")}
    if lang is not None:
        env["STRIDELENS_LANG"] = lang
    return subprocess.run([sys.executable, str(LAUNCH), *args], input=stdin, capture_output=True, text=True, timeout=60, env=env)


def test_from_target_writes_the_probes_texts_in_the_extensions_language() -> None:
    texts = [FINDING, "no such template: as it came", 3]
    zh = _run(["--from-target"], json.dumps(texts), "zh-cn")
    assert zh.returncode == 0, zh.stderr
    out = json.loads(zh.stdout)
    assert out[1:] == texts[1:]
    assert out[0] != FINDING and "计算图" in out[0] and "losses" in out[0]
    en = _run(["--from-target"], json.dumps(texts), None)
    assert en.returncode == 0, en.stderr
    assert json.loads(en.stdout) == texts


def test_the_language_stays_out_of_what_the_launcher_runs() -> None:
    # `python launch.py ARGS` is `python -m stridelens ARGS`: STRIDELENS_LANG is not passed on
    # (the server's language comes from its settings and initialize, the CLI's from --lang / LANG).
    proc = _run(["rule", "SL101"], "", "zh-cn")
    assert proc.returncode == 0, proc.stderr
    assert "view-noncontiguous" in proc.stdout
    assert not any("\u4e00" <= ch <= "\u9fff" for ch in proc.stdout)
