"""The language server never runs workspace code (the CLI's version: tests/analysis/test_never_runs_code.py).

The server runs under an audit hook installed before stridelens is imported
(tests/hardening/audited_server.py), started in the workspace like an editor starts it, and is
fed hostile files (top levels that write marker files, call os.system / subprocess / exec /
pickle / ctypes, torch.load / from_file / hub, side-effecting __init__ / forward / __index__,
10**10**10 sizes, endless loops, global torch setters) and mutated examples, with hovers,
inlay hints, code actions and fix-all on each. The hook records commands, `open` of any
workspace path but the documents and pyproject.toml, and `exec`/`compile` of workspace text;
the test asserts it recorded nothing and no marker file exists.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .lsp_wire import LspProcess

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("audited_server.py")
TOKEN = "SLMARK7f3a"  # occurs only in workspace code (and marker file names)

pytestmark = pytest.mark.timeout(240)

HOSTILE = '''
import os, subprocess, sys, importlib, pathlib, pickle, ctypes, shutil
import torch
import evil_module
from evil_module import payload
M = {marker!r}
open(M + "open", "w").write("ran")
with open(M + "with_open") as fh:
    data = fh.read()
pathlib.Path(M + "pathlib").write_text("ran")
shutil.rmtree(M + "dir")
os.system("touch " + M + "system")
os.popen("touch " + M + "popen")
subprocess.run(["touch", M + "subprocess"])
subprocess.Popen("touch " + M + "popen2", shell=True)
os.execv("/bin/sh", ["sh", "-c", "touch " + M + "execv"])
os.posix_spawn("/bin/sh", ["sh", "-c", "touch " + M + "spawn"], {{}})
exec("open(M + 'exec', 'w')")
eval("open(M + 'eval', 'w')")
exec(compile("open(M + 'compile', 'w')", "<x>", "exec"))
__import__("os").system("touch " + M + "dunder_import")
importlib.import_module("evil_module")
getattr(os, "sys" + "tem")("touch " + M + "getattr")
pickle.loads(b"cos\\nsystem\\n(S'touch " + M.encode() + b"pickle'\\ntR.")
ctypes.CDLL(None).system(("touch " + M + "ctypes").encode())
state = torch.load(M + "load.pt")
torch.save(torch.zeros(2), M + "save.pt")
mapped = torch.from_file(M + "from_file", size=10)
torch.ops.load_library(M + "lib.so")
hub = torch.hub.load("evil/repo", "model")
torch.set_default_dtype(torch.float64)
torch.set_default_device("meta")
torch.set_grad_enabled(False)
torch.autograd.set_grad_enabled(False)
torch.manual_seed(0)
torch.set_num_threads(1)
torch.autograd.set_detect_anomaly(True)


class Evil:
    def __init__(self):
        open(M + "init", "w")

    def __call__(self, x):
        open(M + "call", "w")
        return x

    def __index__(self):
        open(M + "index", "w")
        return 3

    def __len__(self):
        os.system("touch " + M + "len")
        return 2


class Net(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        open(M + "net_init", "w")
        self.fc = torch.nn.Linear(n, 4)

    def forward(self, x):
        os.system("touch " + M + "forward")
        return self.fc(x)


class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        open(M + "fn_forward", "w")
        return x * 2


evil = Evil()
net = Net(8)
y = net(torch.randn(2, 8))
z = evil(torch.zeros(3))
f2 = Fn.apply(torch.ones(2))
big = torch.randn(10**10**10)
huge = torch.zeros(2**40, 2**40, 2**40)
w = torch.zeros(2, 3).view(6)
idx = torch.zeros(Evil(), 2)
sized = torch.zeros(len(Evil()))
t = torch.zeros(3, requires_grad=True)
t.register_hook(lambda g: open(M + "hook", "w"))
t.detach().apply_(lambda v: open(M + "apply", "w"))
torch.zeros(2).map_(torch.zeros(2), lambda a, b: open(M + "map", "w"))
compiled = torch.compile(lambda x: open(M + "compile_fn", "w"))
scripted = torch.jit.script(Net)
s = "x" * 10**10
n = 2 ** 10 ** 10
q = torch.randn(3, 4)[Evil()]
lst = [torch.zeros(1)] * 10**9
for i in range(10**12):
    t = t + 1
while True:
    t = t.add(1)
'''

EVIL_MODULE = "open({marker!r} + 'module', 'w').write('imported')\npayload = 1\n"
# Modules stridelens, pygls or torch import (some lazily, mid-analysis): a workspace file with
# such a name must never be picked up, even though the server runs in the workspace.
SHADOWS = ["attrs", "cattrs", "typing_extensions", "sympy", "mpmath", "numpy", "filelock", "jinja2",
           "networkx", "fsspec", "lsprotocol", "pygls", "rich", "debugpy", "tomllib", "tomli"]  # fmt: skip
SHADOW = "open({marker!r} + 'shadow_{name}', 'w').write('imported')\nraise ImportError('shadowed')\n"

PYPROJECT = '[tool.stridelens]\nignore = ["SL208"]\n'


def mutate(text: str, rng: random.Random) -> str:
    """Delete / duplicate / truncate lines and tokens: still mostly valid Python."""
    lines = text.splitlines()
    for _ in range(rng.randint(1, 6)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        kind = rng.choice(["del", "dup", "cut", "swap", "indent"])
        if kind == "del":
            del lines[i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "cut":
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        elif kind == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = "    " + lines[i]
    return "\n".join(lines) + "\n"


def make_workspace(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = str(ws / f"{TOKEN}_")
    docs: dict[str, str] = {"hostile.py": textwrap.dedent(HOSTILE.format(marker=marker))}
    rng = random.Random(7)
    examples = sorted((ROOT / "examples").rglob("*.py"))
    for k in range(6):
        src = examples[k % len(examples)].read_text(encoding="utf-8")
        # Workspace code in every document: the hook recognises it by TOKEN.
        src = f"open({marker!r} + 'example{k}', 'w')\n" + src
        docs[f"mutated{k}.py"] = mutate(src, rng)
    for name, text in docs.items():
        (ws / name).write_text(text, encoding="utf-8")
    (ws / "evil_module.py").write_text(EVIL_MODULE.format(marker=marker))
    for name in SHADOWS:
        (ws / f"{name}.py").write_text(SHADOW.format(marker=marker, name=name))
    (ws / "pyproject.toml").write_text(PYPROJECT)
    log = tmp_path / "audit.log"
    log.write_text("")
    return ws, docs, log


def audit_env(ws: Path, docs: dict[str, str], log: Path) -> dict[str, str]:
    allowed = [str(ws / n) for n in docs] + [str(ws / "pyproject.toml")]
    return {
        "STRIDELENS_AUDIT_LOG": str(log),
        "STRIDELENS_AUDIT_WATCH": str(ws),
        "STRIDELENS_AUDIT_ALLOWED": json.dumps(allowed),
        "STRIDELENS_AUDIT_MARKERS": json.dumps([TOKEN]),
    }


def violations(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def markers(ws: Path) -> list[str]:
    return sorted(p.name for p in ws.iterdir() if p.name.startswith(TOKEN))


def test_server_never_runs_workspace_code(tmp_path: Path) -> None:
    ws, docs, log = make_workspace(tmp_path)
    with LspProcess([sys.executable, str(RUNNER), "serve"], cwd=ws, env=audit_env(ws, docs, log)) as lsp:
        lsp.initialize(ws)
        since = lsp.mark()
        for name, text in docs.items():
            lsp.open((ws / name).as_uri(), text)
        for name, text in docs.items():
            uri = (ws / name).as_uri()
            lsp.wait_analyzed(uri, exact=True, since=since, timeout=90)
            lines = text.splitlines()
            for line in range(0, len(lines), max(1, len(lines) // 25)):
                for col in (0, 4, len(lines[line]) // 2):
                    assert "result" in lsp.hover(uri, line, col)
            full = {"start": {"line": 0, "character": 0}, "end": {"line": len(lines) + 1, "character": 0}}
            assert "result" in lsp.request("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": full})
            diags = next(
                (m["params"]["diagnostics"] for m in reversed(lsp.messages)
                 if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri),
                [],
            )  # fmt: skip
            actions = lsp.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": full,
                                                              "context": {"diagnostics": diags}})  # fmt: skip
            for action in actions.get("result") or []:
                if action.get("data"):
                    assert "result" in lsp.request("codeAction/resolve", action, timeout=60)
        assert lsp.shutdown_and_exit() == 0
    assert violations(log) == []
    assert markers(ws) == []


def test_server_keeps_torch_global_state(tmp_path: Path) -> None:
    """Workspace calls to torch's global setters are not replayed: another file's facts stay."""
    ws, docs, log = make_workspace(tmp_path)
    plain = ws / "plain.py"
    plain.write_text("import torch\nx = torch.zeros(2, 3)\ny = torch.ones(2, requires_grad=True) * 2\n")
    docs = {"hostile.py": docs["hostile.py"], "plain.py": plain.read_text()}
    with LspProcess([sys.executable, str(RUNNER), "serve"], cwd=ws, env=audit_env(ws, docs, log)) as lsp:
        lsp.initialize(ws)
        since = lsp.mark()
        lsp.open((ws / "hostile.py").as_uri(), docs["hostile.py"])
        lsp.wait_analyzed((ws / "hostile.py").as_uri(), exact=True, since=since, timeout=90)
        lsp.open(plain.as_uri(), docs["plain.py"])
        lsp.wait_analyzed(plain.as_uri(), exact=True, since=since, timeout=60)
        x = json.dumps(lsp.hover(plain.as_uri(), 1, 0)["result"])
        y = json.dumps(lsp.hover(plain.as_uri(), 2, 0)["result"])
        assert "float32" in x and "cpu" in x and "float64" not in x and "meta" not in x, x
        assert "requires_grad" in y or "grad" in y, y
        lsp.shutdown_and_exit()
    assert violations(log) == []


def test_check_never_runs_workspace_code(tmp_path: Path) -> None:
    """`python -m stridelens check .` from the workspace (how CI runs it), under the hook."""
    ws, _docs, log = make_workspace(tmp_path)
    # Every .py file of the workspace is linted, so read as text: those reads are allowed.
    linted = {p.name: "" for p in ws.glob("*.py")}
    out = subprocess.run([sys.executable, str(RUNNER), "check", "--format", "json", "-j", "1", "."],
                         cwd=ws, env={**os.environ, **audit_env(ws, linted, log)},
                         capture_output=True, text=True, timeout=180)  # fmt: skip
    assert out.returncode == 1, out.stderr  # findings; and no file failed
    assert "Traceback" not in out.stderr
    assert violations(log) == []
    assert markers(ws) == []


def test_workspace_modules_never_shadow_imports(tmp_path: Path) -> None:
    """Regression: `python -m stridelens` put the working directory (the workspace, where
    editors start the server) first on sys.path, so a workspace `attrs.py` ran at server start
    and a `typing_extensions.py` when check/explain imported torch."""
    ws, _docs, _log = make_workspace(tmp_path)
    (ws / "b.py").write_text((ROOT / "tests" / "fixtures" / "rules" / "sl101_views.py").read_text())
    check = subprocess.run([sys.executable, "-m", "stridelens", "check", "b.py"], cwd=ws,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert check.returncode == 1 and "SL101" in check.stdout, check.stdout + check.stderr
    with LspProcess(cwd=ws) as lsp:
        lsp.initialize(ws)
        lsp.open((ws / "b.py").as_uri(), (ws / "b.py").read_text())
        lsp.wait_analyzed((ws / "b.py").as_uri(), exact=True, timeout=90)
        assert lsp.shutdown_and_exit() == 0
    assert markers(ws) == []


BROKEN_PARSE = """
import os, sys
here = os.path.realpath(os.getcwd()) + os.sep
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and os.path.realpath(args[0]).startswith(here):
        opened.append(args[0])
sys.addaudithook(hook)
from stridelens.server.analysis import analyze_source
from stridelens.server.rules.fixes import parses
analysis = analyze_source("import torch\\nx = (\\ny = torch.zeros(2)\\n", replay=False)
assert analysis.broken and not parses("x = (")
print(opened)
"""


def test_broken_code_opens_no_file(tmp_path: Path) -> None:
    """Regression: on a syntax error CPython opened `<unknown>` (ast.parse's default file name)
    relative to the working directory, i.e. in the workspace, to quote the bad line."""
    out = subprocess.run([sys.executable, "-c", BROKEN_PARSE], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
