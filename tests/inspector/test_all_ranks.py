"""`stridelens inspect --all-ranks` end to end: a real torchrun job (gloo on CPU, 2 ranks, a tiny
DDP model, tests/fixtures/all_ranks/ddp_train.py), real debugpy in every worker, loopback only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from stridelens.inspector.ranks import TORCHRUN_FLAGS, rewrite_torchrun
from stridelens.inspector.session import UsageError

from .conftest import REPO, marker_line

pytestmark = pytest.mark.timeout(300)

TRAIN = REPO / "tests" / "fixtures" / "all_ranks" / "ddp_train.py"
BREAK = f"{TRAIN}:{marker_line(TRAIN)}"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


def by_rank(report: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {r["rank"]: r for r in report["ranks"]}


# ---------------------------------------------------------------- the torchrun command


def test_flag_table_is_torchruns() -> None:
    """The CLI parses torchrun's options without importing torch: its table of options that
    take no value must be torch's own."""
    from torch.distributed.run import get_args_parser

    flags = {o for a in get_args_parser()._actions if a.nargs == 0 for o in a.option_strings}
    assert flags == TORCHRUN_FLAGS


def test_rewrite_torchrun(tmp_path: Path) -> None:
    script = str(TRAIN)
    out = rewrite_torchrun(["torchrun", "--nproc-per-node", "2", "--standalone", "--max_restarts=0", script, "--x", "1"],
                           launcher="L.py")
    assert out == ["torchrun", "--nproc-per-node", "2", "--standalone", "--max_restarts=0", "L.py", script, "--x", "1"]
    out = rewrite_torchrun([sys.executable, "-m", "torch.distributed.run", "-m", "pkg.train", "-v"], launcher="L.py")
    assert out == [sys.executable, "-m", "torch.distributed.run", "L.py", "-m", "pkg.train", "-v"]
    for bad, says in ((["torchrun", "--no-python", "sh", "x.sh"], "not Python"), (["python", script], "runs torchrun"),
                      (["torchrun", "--nnodes", "1"], "no training script"), (["torchrun", "nope.py"], "no such")):
        with pytest.raises(UsageError, match=says):
            rewrite_torchrun(bad)


# ---------------------------------------------------------------- launch


def test_launch_leak_on_one_rank_and_a_rank_killed(inspect_cli: Any) -> None:
    """Three hits of the breakpoint on both ranks; rank 1 alone keeps a graph per step; then an
    --expr ends rank 1 in the middle of the report: rank 0 is still reported."""
    kill = "__import__('os')._exit(3) if rank == 1 else model.module[0].weight"
    r = inspect_cli("--all-ranks", "--launch", "--break", BREAK, "--samples", "3", "--expr", kill,
                    "--format", "json", "--", "torchrun", "--nproc-per-node", "2", str(TRAIN),
                    "--leak-rank", "1", "--steps", "6", timeout=240)
    assert r.rc == 1, r.err  # a rank failed: the job says so, and the report is still there
    rep = r.json()
    ranks = by_rank(rep)
    assert sorted(ranks) == [0, 1] and rep["mode"] == "launch"
    for rk in (0, 1):
        assert ranks[rk]["local_rank"] == rk and ranks[rk]["info"]["process_group"] == {
            "backend": "gloo", "rank": rk, "world_size": 2}
        assert ranks[rk]["stop"]["line"] == marker_line(TRAIN) and len(ranks[rk]["samples"]) == 3
        assert {m["name"] for g in ranks[rk]["frame"]["groups"] for m in g["tensors"]} >= {"x", "loss"}
    # Rank 1 died during the report, and says so; rank 0's report is whole.
    assert ranks[1]["status"] == "failed" and "died during the report" in ranks[1]["error"]
    w = torch.nn.Linear(64, 256).weight
    (e0,) = ranks[0]["expressions"]
    assert e0["result"]["shape"] == list(w.shape) and e0["result"]["strides"] == list(w.stride())
    # The leak is named for rank 1 alone: its growth, the container, and the difference table.
    grows = [f for f in rep["findings"] if f["kind"] == "rank_memory_grows"]
    assert [f["ranks"] for f in grows] == [[1]], rep["findings"]
    assert "rank 0 stayed flat" in grows[0]["message"]
    s0, s1 = ([s["bytes"] for s in ranks[rk]["samples"]] for rk in (0, 1))
    assert s0[0] == s0[-1] and s1[0] < s1[1] < s1[2]
    kept = [f for f in rep["findings"] if f["kind"] == "graph_kept_alive"]
    assert [f["ranks"] for f in kept] == [[1]] and "metrics (list of 3)" in kept[0]["message"]
    assert kept[0]["message"].startswith("on rank 1 only")
    metrics = next(d for d in rep["differences"] if d["holder"].startswith("metrics"))
    assert metrics["only_on"] == [1] and metrics["bytes"]["0"] == 0


# ---------------------------------------------------------------- attach by PID


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A torchrun job training until killed; its ranks touch progress/rank-N every step."""
    progress = tmp_path / "progress"
    progress.mkdir()
    log = open(tmp_path / "torchrun.log", "wb")  # noqa: SIM115 -- closed with the process
    proc = subprocess.Popen([*TORCHRUN, str(TRAIN), "--forever", "--progress-dir", str(progress)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    yield proc, progress
    # torchrun puts each worker in a session of its own: a SIGKILL of the agent's group would
    # leave them training for ever, so the whole tree goes.
    for pid in [*descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc (children before their parents are killed)."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parent_of.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


def steps(progress: Path) -> dict[str, int]:
    out = {}
    for p in progress.glob("rank-*"):
        with contextlib.suppress(ValueError, OSError):
            out[p.name] = int(p.read_text() or 0)
    return out


def wait_training(progress: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> dict[str, int]:
    """Until both ranks have made a step more than `before`; their step counts."""
    before = steps(progress)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = steps(progress)
        if len(now) == 2 and all(now[k] > before.get(k, 0) for k in now):
            return now
        assert proc.poll() is None, "the torchrun job ended"
        time.sleep(0.2)
    raise AssertionError(f"the ranks did not train on: {before} -> {steps(progress)}")


def test_attach_by_pid_every_rank_keeps_running(job: Any, inspect_cli: Any) -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: PID attach needs it (apt-get install gdb)")
    proc, progress = job
    wait_training(progress, proc)
    r = inspect_cli("--all-ranks", "--pid", str(proc.pid), "--break", BREAK, "--format", "json", timeout=240)
    if r.rc != 0 and ("ptrace" in r.err.lower() or "not permitted" in r.err.lower()):
        pytest.skip(f"ptrace is not permitted here: {r.err.strip()[-200:]}")
    assert r.rc == 0, r.err + r.out[-3000:]
    rep = r.json()
    assert rep["mode"] == "attach" and rep["agent_pid"] == proc.pid
    ranks = by_rank(rep)
    assert sorted(ranks) == [0, 1] and all(x["status"] == "ok" for x in ranks.values())
    assert {x["stop"]["line"] for x in ranks.values()} == {marker_line(TRAIN)}
    assert not rep["findings"]  # the same model on both ranks: nothing to name
    wait_training(progress, proc)  # detached: every rank trains on

    # Any worker's PID finds the whole job; debugpy is already in each (no second injection).
    worker = ranks[1]["pid"]
    r = inspect_cli("--all-ranks", "--pid", str(worker), "--pause", timeout=120)
    assert r.rc == 0, r.err
    assert "torchrun job: 2 ranks (2 reported in full)" in r.out
    assert "rank 0 — pid" in r.out and "rank 1 — pid" in r.out and "Live tensors per device" in r.out
    wait_training(progress, proc)


# ---------------------------------------------------------------- CUDA


@pytest.mark.cuda
def test_two_ranks_on_one_device(inspect_cli: Any) -> None:
    """Both ranks put a buffer on cuda:0 without torch.cuda.set_device: rank 1 is named."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    r = inspect_cli("--all-ranks", "--launch", "--break", BREAK, "--format", "json", "--",
                    *TORCHRUN, str(TRAIN), "--cuda-same", "--steps", "2", timeout=240)
    assert r.rc == 0, r.err
    rep = r.json()
    named = [f for f in rep["findings"] if f["kind"] == "missing_set_device"]
    assert [f["ranks"] for f in named] == [[1]], rep["findings"]
    assert "cuda:0" in named[0]["message"] and "rank 0's device" in named[0]["message"]
    cuda = {(c["rank"], c["device"]): c for c in rep["cuda"]}
    assert set(cuda) == {(0, "cuda:0"), (1, "cuda:0")}
    assert all(c["tensor_bytes"] >= 4 << 20 and c["allocated"] >= 4 << 20 for c in cuda.values())


# ---------------------------------------------------------------- device findings, on reports


def _rank(rank: int, current: int, on: dict[str, int], names: dict[str, str]) -> dict[str, Any]:
    """A rank as the merge sees it: what rank_probe said, and one memory sample (probe format)."""
    devices = [{"device": d, "storages": 1, "tensors": 1, "bytes": b, "graph_only_bytes": 0, "allocated": b,
                "reserved": 2 * b} for d, b in on.items()]
    top = [{"storage_key": f"{d}@1", "device": d, "bytes": b, "tensors": 1, "names": [names[d]], "unnamed": 0,
            "used_bytes": b, "saved_by_graph": False} for d, b in on.items()]
    return {"rank": rank, "local_rank": rank, "reported": True,
            "info": {"cuda": {"current_device": current, "device_count": 2}, "local_world_size": 2},
            "samples": [{"devices": devices, "top": top, "findings": [], "tensor_count": len(on)}]}


def test_device_findings_name_the_rank_and_the_cause() -> None:
    """Rank 1 never called set_device (its current device is cuda:0): named, with rank 0's device.
    Both ranks set their device but hold a copy on cuda:0: the torch.load pattern, said as such."""
    from stridelens.inspector.rank_findings import merge

    same = [_rank(0, 0, {"cuda:0": 4 << 20}, {"cuda:0": "w"}), _rank(1, 0, {"cuda:0": 4 << 20}, {"cuda:0": "w"})]
    (f,) = merge(same, top_len=64, how="")["findings"]
    assert f["kind"] == "missing_set_device" and f["ranks"] == [1]
    assert f["message"].startswith("rank 1 (LOCAL_RANK 1) holds 4.0 MiB on cuda:0, rank 0's device: w")

    loaded = [_rank(0, 0, {"cuda:0": 8 << 20}, {"cuda:0": "state['w']"}),
              _rank(1, 1, {"cuda:0": 8 << 20, "cuda:1": 1 << 20}, {"cuda:0": "state['w']", "cuda:1": "model.w"})]
    m = merge(loaded, top_len=64, how="")
    (f,) = m["findings"]
    assert f["kind"] == "every_rank_on_cuda0" and f["ranks"] == [1]
    assert "rank 1: 8.0 MiB: state['w']" in f["message"] and "torch.load without map_location" in f["message"]
    assert {(c["rank"], c["device"]) for c in m["cuda"]} == {(0, "cuda:0"), (1, "cuda:0"), (1, "cuda:1")}
    assert [d["holder"] for d in m["differences"]] == ["model.w"]  # state is the same on both ranks
