"""`stridelens record -- python SCRIPT`: real programs, real torch, in real subprocesses.

The recorded facts are checked against the values the script prints of its own tensors; the
program's results (losses, RNG draws, exit status) must be those of a run without recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stridelens.inspector.tensor_recorder import facts_file_name

pytestmark = pytest.mark.timeout(240)

TRAIN = textwrap.dedent('''\
    import json
    import random
    import sys

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    SEEN = {}


    def meta(t):
        return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                "device": str(t.device), "strides": list(t.stride()),
                "storage_offset": t.storage_offset(), "contiguous": t.is_contiguous(),
                "is_view": t._base is not None, "requires_grad": t.requires_grad,
                "grad_fn": None if t.grad_fn is None else type(t.grad_fn).__name__,
                "storage_nbytes": t.untyped_storage().nbytes()}


    class Attention(nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            heads = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
            SEEN.setdefault("heads", meta(heads))
            att = (heads @ heads.transpose(-2, -1)).softmax(dim=-1)
            y = (att @ heads).transpose(1, 2).reshape(B, T, C)
            SEEN.setdefault("y", meta(y))
            return self.proj(y)


    def main(steps):
        torch.manual_seed(0)
        random.seed(0)
        data = torch.randn(steps * 4, 6, 16)
        target = torch.randn(steps * 4, 6, 16)
        loader = DataLoader(TensorDataset(data, target), batch_size=4, shuffle=True)
        model = Attention(16, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for xb, yb in loader:
            out = model(xb)
            loss = nn.functional.mse_loss(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        SEEN["loss"] = meta(loss)
        print(json.dumps({"seen": SEEN, "losses": losses, "rng": torch.rand(3).tolist(),
                          "random": random.random(), "grad": torch.is_grad_enabled()}))


    main(int(sys.argv[1]))
    ''')


def _project(tmp_path: Path, name: str, source: str) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)  # the project root the facts go under
    script = tmp_path / name
    script.write_text(source, encoding="utf-8")
    return script


def _record(cwd: Path, *program: str, env: dict[str, str] | None = None, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--out", str(out)] if out is not None else []
    return subprocess.run(
        [sys.executable, "-m", "stridelens", "record", *extra, "--", sys.executable, *program],
        cwd=cwd, capture_output=True, text=True, timeout=200, env=env,
    )


def _facts(folder: Path, script: Path) -> dict[str, Any]:
    return json.loads((folder / facts_file_name(str(script.resolve()))).read_text(encoding="utf-8"))


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _only(entry: dict[str, Any]) -> dict[str, Any]:
    assert len(entry["observations"]) == 1, entry
    observation = dict(entry["observations"][0])
    del observation["count"]
    return observation


def test_record_a_training_script(tmp_path: Path) -> None:
    script = _project(tmp_path, "train.py", TRAIN)
    plain = subprocess.run([sys.executable, str(script), "12"], cwd=tmp_path, capture_output=True, text=True, timeout=200)
    assert plain.returncode == 0, plain.stderr
    done = _record(tmp_path, str(script), "12")
    assert done.returncode == 0, done.stderr
    assert "recorded in" in done.stderr and str(tmp_path / ".stridelens" / "facts") in done.stderr
    # Recording changes nothing the program computes: losses, RNG draws, grad mode.
    assert json.loads(done.stdout) == json.loads(plain.stdout)
    printed = json.loads(done.stdout)["seen"]
    facts = _facts(tmp_path / ".stridelens" / "facts", script)
    lines = facts["lines"]
    heads = lines[str(_line(TRAIN, "heads = q.view"))]["heads"]
    assert _only(heads) == printed["heads"]
    assert heads["count"] >= 8 and heads["shape_min"] == heads["shape_max"] == printed["heads"]["shape"]
    assert _only(lines[str(_line(TRAIN, "y = (att @ heads)"))]["y"]) == printed["y"]
    loss = lines[str(_line(TRAIN, "loss = nn.functional"))]["loss"]
    assert _only(loss) == printed["loss"]
    # The loop's batches (a tuple target of the for line) and forward's argument (its def line).
    xb = _only(lines[str(_line(TRAIN, "for xb, yb in loader"))]["xb"])
    assert xb["shape"] == [4, 6, 16] and xb["is_view"] is False and xb["grad_fn"] is None
    assert _only(lines[str(_line(TRAIN, "def forward(self, x)"))]["x"])["shape"] == [4, 6, 16]
    # The split's q is a view at an offset 0, k at C: both were lines' bindings.
    split = lines[str(_line(TRAIN, "q, k, v = "))]
    assert _only(split["k"])["storage_offset"] == 16 and _only(split["q"])["storage_offset"] == 0
    # Only the user's file: nothing of torch, the standard library or stridelens.
    assert [p.name for p in (tmp_path / ".stridelens" / "facts").iterdir()] == [facts_file_name(str(script.resolve()))]
    assert facts["sha256"] and facts["recorded_at"]


def test_explain_shows_observed_and_marks_edits_stale(tmp_path: Path) -> None:
    script = _project(tmp_path, "train.py", TRAIN)
    assert _record(tmp_path, str(script), "3").returncode == 0
    line = _line(TRAIN, "heads = q.view")
    col = TRAIN.splitlines()[line - 1].index("heads") + 1

    def explain(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "stridelens", "explain", f"{script}:{line}:{col}", *extra],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    answer = json.loads(explain("--format", "json").stdout)
    observed = answer["observed"]
    assert observed["shape"] == [4, 2, 6, 8] and observed["strides"] == [288, 8, 48, 1]
    assert observed["contiguous"] is False and observed["is_view"] is True and observed["stale"] is False
    assert observed["grad_fn"] == "TransposeBackward0" and observed["runs"] >= 3
    # The static fields stay the analysis's own (symbolic sizes: names, not the run's numbers).
    assert answer["shape"] == ["B", "self.heads", "T", "C // self.heads"]
    assert "seen at run time (" in explain().stdout
    script.write_text(TRAIN.replace("lr=0.1", "lr=0.2"), encoding="utf-8")
    assert json.loads(explain("--format", "json").stdout)["observed"]["stale"] is True
    assert "stale: the file changed since" in explain().stdout


def test_a_crash_keeps_the_facts_up_to_it_and_its_exit_status(tmp_path: Path) -> None:
    source = textwrap.dedent('''\
        import torch
        a = torch.zeros(2, 3)
        b = a.t()
        raise RuntimeError("boom")
        c = torch.ones(5)
        ''')
    script = _project(tmp_path, "crash.py", source)
    done = _record(tmp_path, str(script))
    assert done.returncode == 1 and "RuntimeError: boom" in done.stderr
    lines = _facts(tmp_path / ".stridelens" / "facts", script)["lines"]
    assert _only(lines["2"]["a"])["shape"] == [2, 3]
    assert _only(lines["3"]["b"])["strides"] == [1, 3]
    assert "5" not in lines
    exits = _project(tmp_path, "exits.py", "import sys\nimport torch\nx = torch.ones(1)\nsys.exit(7)\n")
    assert _record(tmp_path, str(exits)).returncode == 7
    assert "x" in _facts(tmp_path / ".stridelens" / "facts", exits)["lines"]["3"]


def test_a_program_without_torch_records_nothing_and_says_so(tmp_path: Path) -> None:
    script = _project(tmp_path, "plain.py", "import sys\nx = [1, 2]\nprint(sum(x))\nsys.exit(3)\n")
    done = _record(tmp_path, str(script))
    assert done.returncode == 3 and done.stdout == "3\n"
    assert "never imported torch: nothing recorded" in done.stderr
    assert not any((tmp_path / ".stridelens" / "facts").glob("*.json"))


def test_module_form_and_an_unwritable_project(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    source = "import torch\nw = torch.ones(3, requires_grad=True)\nv = (w * 2).view(3, 1)\n"
    (package / "run.py").write_text(source, encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".stridelens").write_text("a file where the facts folder would be", encoding="utf-8")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = _record(tmp_path, "-m", "pkg.run", env=env)
    assert done.returncode == 0, done.stderr
    cache = tmp_path / "cache" / "stridelens" / "facts"
    assert "is not writable; the facts go to" in done.stderr and str(cache) in done.stderr
    lines = _facts(cache, package / "run.py")["lines"]
    assert _only(lines["2"]["w"])["requires_grad"] is True
    v = _only(lines["3"]["v"])
    assert v["grad_fn"] == "ViewBackward0" and v["is_view"] is True and v["shape"] == [3, 1]


def test_sizes_that_change_are_a_range_and_a_second_recording_merges(tmp_path: Path) -> None:
    source = textwrap.dedent('''\
        import sys
        import torch


        def step(n):
            x = torch.zeros(n, 4)
            return x


        for n in range(1, 6):
            step(n)
        ''')
    script = _project(tmp_path, "sizes.py", source)
    out = tmp_path / "facts"
    assert _record(tmp_path, str(script), out=out).returncode == 0
    entry = _facts(out, script)["lines"]["6"]["x"]
    assert entry["count"] == 5 and entry["shape_min"] == [1, 4] and entry["shape_max"] == [5, 4]
    assert len(entry["observations"]) == 5
    assert _record(tmp_path, str(script), out=out).returncode == 0
    merged = _facts(out, script)
    assert merged["recordings"] == 2 and merged["lines"]["6"]["x"]["count"] == 10
    assert len(merged["lines"]["6"]["x"]["observations"]) == 5


def test_torchrun_every_rank_records_and_the_ranks_are_merged(tmp_path: Path) -> None:
    """`stridelens record -- torchrun --standalone --nproc-per-node 2 ddp_train.py` (gloo on CPU):
    each rank writes its own facts file, explain reads them as one recording with both ranks'
    runs; the job's exit status is kept. Errors in the torchrun command name `stridelens record`."""
    train = Path(__file__).resolve().parents[1] / "fixtures" / "all_ranks" / "ddp_train.py"
    script = _project(tmp_path, "ddp_train.py", train.read_text(encoding="utf-8"))
    done = subprocess.run(
        [sys.executable, "-m", "stridelens", "record", "--", sys.executable, "-m", "torch.distributed.run",
         "--standalone", "--nproc-per-node", "2", str(script), "--steps", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "2 ranks reported" in done.stderr, done.stderr
    facts = sorted(p.name for p in (tmp_path / ".stridelens" / "facts").glob("*.json"))
    assert len(facts) == 2 and all(".rank" in name for name in facts), facts
    line = _line(script.read_text(encoding="utf-8"), "loss = model(x)")
    shown = subprocess.run([sys.executable, "-m", "stridelens", "explain", f"{script}:{line}:5", "--format", "json"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    observed = json.loads(shown.stdout)["observed"]
    assert observed["shape"] == [] and observed["dtype"] == "float32" and observed["runs"] == 4, observed  # 2 steps x 2 ranks
    bad = subprocess.run([sys.executable, "-m", "stridelens", "record", "--", "torchrun", "--nproc-per-node", "2", "nope.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "stridelens record: no such training script nope.py" in bad.stderr, bad.stderr
