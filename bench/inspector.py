"""Benchmarks of the runtime inspector, each against a baseline measured in the same run.

    .venv/bin/python bench/inspector.py [--quick]

1. `describe` cost per tensor, in-process: p50 / p95, wall and CPU, per card kind, with the
   ratio to a card by hand (7 facts, json.dumps) measured in the same run  target p95 <= 50 µs
2. one DAP evaluate of `describe` vs of the literal `1`   target: within 2 ms of the floor
3. `process_report` over 100k / 1M live tensors vs pytorch_memlab.MemReporter on the same
   process (`pip install -e '.[bench]'`; skipped with a note if missing)
                             target: 100k <= 0.35 s and >= 5x MemReporter, 1M < 5 s
4. a small training loop's step time: attached (no breakpoints) vs plain python
5. `--grads` (the gradient probe, in-process) on a 20M-parameter MLP vs the same numbers by
   hand: a hook on every parameter computing its grad norm during backward
6. `--diff-steps` (the diff probe's walk and naming, per stop, in-process) over 100k live
   tensors vs a hand-written gc.get_objects() walk collecting storages and diffing the sets

7. a training loop's per-step time before, during and after `inspect --pid --snapshot`
   (1, 3 and 7 are in bench/snapshot_bench.py, which also runs them alone)

    .venv/bin/python bench/inspector.py --reports   # only 5 and 6
"""

from __future__ import annotations

import gc
import io
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

from stridelens.inspector import probe
from stridelens.inspector.session import Breakpoint, Session, free_port

sys.path.insert(0, str(Path(__file__).parent))
import snapshot_bench  # a sibling script, found through the path set above

QUICK = "--quick" in sys.argv


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """Median seconds per call."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench_describe() -> None:
    snapshot_bench.bench_describe(QUICK)


TARGET = """
    import torch
    x = torch.randn(64, 128).t()
    print("ready")  # stop
"""


def bench_evaluate() -> None:
    print("2. DAP evaluate through debugpy (TCP_NODELAY set by the probe)")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.py"
        p.write_text(textwrap.dedent(TARGET))
        with Session(timeout=60) as s:
            s.launch(str(p), [], output=io.StringIO())
            s.handshake([Breakpoint.parse(f"{p}:4")])
            s.wait_stop()
            s.ensure_probe()
            n = 200 if not QUICK else 50
            floor = timed(lambda: s.evaluate("1"), n)
            desc = timed(lambda: s.describe("x"), n)
            print(f"   evaluate `1`        {floor * 1e3:7.2f} ms  (the floor)")
            print(f"   evaluate describe   {desc * 1e3:7.2f} ms  (+{(desc - floor) * 1e3:.2f} ms; target < 2 ms)")
            s.finish(kill=True)


def bench_process_report() -> None:
    snapshot_bench.bench_process_report(QUICK)


LOOP = """
    import sys, time, torch
    torch.set_num_threads(1)  # steadier on small machines; both runs alike
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    def step():
        x = torch.randn(32, 64)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for _ in range(50):
        step()
    t0 = time.perf_counter()
    for _ in range({steps}):
        step()
    print("STEP", (time.perf_counter() - t0) / {steps})  # mark
"""


def bench_attached_loop() -> None:
    print("4. small training loop, per step: attached without breakpoints vs plain python")
    steps = 2000 if not QUICK else 300
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "loop.py"
        p.write_text(textwrap.dedent(LOOP.format(steps=steps)))
        plains, attached = [], []
        for _ in range(2):  # interleaved, best of two: other load on the machine hits both
            plain = subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=300)
            plains.append(float(plain.stdout.split("STEP")[1]))
            out = io.StringIO()
            with Session(timeout=60) as s:
                s.launch(str(p), [], output=out)
                s.handshake([])
                s.wait_target(timeout=300)
            attached.append(float(out.getvalue().split("STEP")[1].split()[0]))
        t_plain, t_att = min(plains), min(attached)
        print(f"   plain {t_plain * 1e6:8.1f} µs/step | attached {t_att * 1e6:8.1f} µs/step | "
              f"slowdown {t_att / t_plain:4.2f}x")


def _load_injected(module: object, name: str) -> None:
    # The client injects these modules under private names; in-process, register them the same way.
    sys.modules[name] = module  # type: ignore[assignment]


def bench_grads() -> None:
    from stridelens.inspector import grads_probe

    print("5. --grads on a 20M-parameter MLP vs a hook-based grad norm loop, in-process")
    _load_injected(probe, probe.PRIVATE_NAME)
    torch.manual_seed(0)
    width = 2000
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(5)])
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    x = torch.randn(8, width)

    in_hooks: list[float] = []

    def hook(g: torch.Tensor) -> None:
        # The usual hand-written probe: a norm per parameter as backward reaches it, timed inside
        # the hook (a backward with and without hooks differs by less than its own noise here).
        t0 = time.perf_counter()
        norms.append(float(g.norm()))
        in_hooks.append(time.perf_counter() - t0)

    norms: list[float] = []

    def backward(hooks: bool) -> None:
        handles = [p.register_hook(hook) for p in params] if hooks else []
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        for h in handles:
            h.remove()

    repeat = 3 if QUICK else 7
    plain = timed(lambda: backward(False), repeat)
    per_backward = []
    for _ in range(repeat):
        in_hooks.clear()
        backward(True)
        per_backward.append(sum(in_hooks))
    hand = statistics.median(per_backward)
    loop = timed(lambda: [float(p.grad.norm()) for p in params], repeat)
    ns = {"model": model}
    ours = timed(lambda: grads_probe.grads(ns, {}), repeat)
    rows = grads_probe.grads(ns, {})["params"]
    assert len(rows) == len(params) and all(r["grad_norm"] is not None for r in rows)
    print(f"   {n_params / 1e6:.1f}M parameters in {len(params)} tensors; backward {plain * 1e3:7.1f} ms")
    print(f"   by hand: the norm hooks take {hand * 1e3:7.1f} ms per backward; a [p.grad.norm()] loop "
          f"{loop * 1e3:7.1f} ms")
    print(f"   --grads probe {ours * 1e3:7.1f} ms (norms, grad/weight, zeros, NaN/Inf check) | "
          f"ratio {ours / hand:5.2f}x the hooks, {ours / loop:5.2f}x the loop; "
          f"scaled to 100M: {ours * 1e8 / n_params:5.2f} s")


def bench_diff_steps() -> None:
    from stridelens.inspector import diff_probe

    print("6. --diff-steps over 100k live tensors vs a hand-written gc.get_objects() walk, per stop")
    _load_injected(probe, probe.PRIVATE_NAME)
    n = 100_000
    keep = [torch.empty(4) for _ in range(n)]
    grow: list[torch.Tensor] = []
    gc.collect()

    def by_hand() -> dict[int, int]:
        out = {}
        for o in gc.get_objects():
            if issubclass(type(o), torch.Tensor):
                s = o.untyped_storage()
                out[s.data_ptr()] = s.nbytes()
        return out

    repeat = 2 if QUICK else 3
    first = by_hand()
    grow.append(torch.empty(1000))
    hand = timed(lambda: set(by_hand()) - set(first), repeat)
    ns = {"keep": keep, "grow": grow}

    def ours() -> dict[str, object]:
        diff_probe.begin(ns)
        grow.append(torch.empty(1000))
        diff_probe.sample(ns)
        grow.append(torch.empty(1000))
        return diff_probe.end(ns)

    t_ours = timed(ours, repeat) / 3  # three stops: begin, one sample, end
    d = ours()
    assert d["new_storages"] == 2 and len(keep) == n
    print(f"   {n:,} tensors: by hand {hand:6.3f} s | --diff-steps {t_ours:6.3f} s per stop "
          f"(walk, graphs, keeper names) | ratio {t_ours / hand:5.2f}x")
    keep.clear()
    grow.clear()


def main() -> int:
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
          f"{' (quick)' if QUICK else ''}; free loopback port e.g. {free_port()}")
    if "--reports" in sys.argv:
        bench_grads()
        bench_diff_steps()
        return 0
    bench_describe()
    bench_evaluate()
    bench_process_report()
    bench_attached_loop()
    bench_grads()
    bench_diff_steps()
    snapshot_bench.bench_snapshot_steps(QUICK)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
