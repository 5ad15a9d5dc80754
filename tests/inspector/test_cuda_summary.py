"""`inspect --cuda-summary`: on this CPU-only torch, end to end through real debugpy (says so,
RSS next to the tensor totals); the allocator explanation on memory_stats()-shaped numbers; and
on a GPU (marked `cuda`), the real allocator."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from rich.console import Console

from stridelens.inspector import allocator_probe, cuda_report

from .conftest import REPO, marker_line

pytestmark = pytest.mark.timeout(180)

FIXTURE = REPO / "tests" / "fixtures" / "steps" / "grow_vs_cache.py"


def text(report: dict[str, Any]) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    cuda_report.print_text(report, console)
    return console.export_text()


def run(inspect_cli: Any, *flags: str) -> Any:
    return inspect_cli("--launch", str(FIXTURE), "--break", f"{FIXTURE}:{marker_line(FIXTURE)}:step >= 2",
                       "--cuda-summary", *flags)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only branch")
def test_cpu_only_target_says_so_and_reports_rss(inspect_cli: Any) -> None:
    res = run(inspect_cli, "--format", "json")
    assert res.rc == 0, res.err
    r = res.json()["cuda_summary"]
    assert r["cuda"] in ("not_built", "unavailable") and r["devices"] == []
    assert "CPU-only" in r["cuda_message"] or "no CUDA device" in r["cuda_message"]
    # The fixture at step 2: model (2,568 params) + Adam state (2x) + 3 grads... all on the CPU.
    cpu = r["tensors"]["cpu"]["bytes"]
    assert cpu == r["cpu_tensor_bytes"] > 32768 + 2 * 8192  # at least the cache and the history
    assert r["process"]["rss"] > cpu and r["process"]["source"] == "/proc/self/status"
    assert 0 < r["cpu_tensor_share_of_rss"] < 1
    out = text(res.json())
    assert "No CUDA numbers" in out and "process RSS" in out and "live CPU tensors hold" in out
    # Alone, --cuda-summary is the only report (no frame report by default).
    assert "frame" not in res.json()


def stats(**over: int) -> dict[str, Any]:
    keys = dict.fromkeys(allocator_probe.STAT_KEYS, 0)
    keys.update(over)
    return {"device": "cuda:0", **keys, "missing_keys": []}


def test_each_number_has_its_sentence_and_the_tensor_share() -> None:
    mib = 1 << 20
    d = stats(allocated=100 * mib, reserved=512 * mib, peak=300 * mib, inactive_split=12 * mib,
              inactive_split_blocks=3, alloc_retries=2, ooms=0)
    r = cuda_report.analyze({"cuda": "ok", "cuda_message": None, "allocator_backend": "native",
                             "devices": [d], "process": {"rss": 4000 * mib, "peak_rss": 4100 * mib,
                                                         "source": "/proc/self/status"},
                             "tensors": {"cuda:0": {"bytes": 80 * mib, "storages": 4}}})
    dev = r["devices"][0]
    assert dev["tensor_share"] == pytest.approx(0.8)
    meaning = {e["name"]: e["meaning"] for e in dev["explained"]}
    assert "412.0 MiB of it is cached and reusable: not a leak; torch.cuda.empty_cache()" in meaning["reserved"]
    assert meaning["inactive_split"].startswith("12.0 MiB in 3 blocks is free")
    assert "2 cudaMalloc calls failed" in meaning["alloc_retries"]
    assert meaning["ooms"] == "no out-of-memory error has been raised in this process"
    assert "80.0% of allocated" in meaning["tensor_share"]
    out = text({"cuda_summary": r})
    assert "cuda:0" in out and "104,857,600 B" in out


@pytest.mark.cuda
def test_cuda_target_reads_the_allocator(inspect_cli: Any, script: Any) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    path = script("gpu.py", """
        import torch
        x = torch.randn(1024, 1024, device="cuda")
        y = x[:10]
        del x
        z = torch.empty(3 << 20, device="cuda")
        print("stop")  # inspect here
    """)
    res = inspect_cli("--launch", str(path), "--break", f"{path}:{marker_line(path)}", "--cuda-summary",
                      "--format", "json")
    assert res.rc == 0, res.err
    r = res.json()["cuda_summary"]
    (dev,) = r["devices"]
    assert r["cuda"] == "ok" and dev["allocated"] >= 16 << 20 and dev["reserved"] >= dev["allocated"]
    assert dev["tensor_bytes"] == (4 << 20) + (12 << 20) and 0.5 < dev["tensor_share"] <= 1
