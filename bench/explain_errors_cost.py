"""What `inspect --explain-errors` costs per op, against a baseline measured in the same run.

    .venv/bin/python bench/explain_errors_cost.py [--quick]

1. In this process, a small training step (MLP forward + backward + SGD step), per aten op:
   - baseline: no recording;
   - a bare TorchDispatchMode that only passes ops on (the floor of any dispatch mode);
   - candidate A, the shipped recorder (stridelens/inspector/inplace_recorder.py): one
     TorchDispatchMode, node-to-line by autograd sequence numbers, in-place writes by schema;
   - candidate B, saved-tensor hooks: `saved_tensors_hooks` whose pack records each saved
     tensor (line, storage, version) and whose unpack redoes the version check (torch skips
     its own check for hooked tensors, shown below), plus the in-place-only dispatch mode B
     still needs, since hooks never see the in-place op;
   - for reference, torch's own suggestion `set_detect_anomaly(True)`.
   Ratios are step time over the baseline step; "µs/op" is the extra time per aten op. Times
   are CPU time of the stepping thread, so other load on the machine does not inflate them.
2. The same loop as a script, timed by itself: plain python, under debugpy (no recorder), and
   under `inspect --explain-errors` (recorder + the exception breakpoint on RuntimeError).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from stridelens.inspector import explain_errors, inplace_recorder
from stridelens.inspector.session import Session

QUICK = "--quick" in sys.argv
STEPS = 30 if QUICK else 200


def make_step() -> Callable[[], None]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.GELU(),
        torch.nn.LayerNorm(128), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))

    def step() -> None:
        opt.zero_grad()
        h = model(x)
        h = h + torch.sigmoid(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        loss.backward()
        opt.step()

    return step


def per_step(step: Callable[[], None], steps: int) -> float:
    """CPU seconds of this thread per step: unlike wall time, not inflated when other
    processes share the cores."""
    step()
    t0 = time.thread_time()
    for _ in range(steps):
        step()
    return (time.thread_time() - t0) / steps


class Count(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        Count.n += 1
        return func(*args, **(kwargs or {}))


class Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


# ---------------------------------------------------------------- candidate B


def _user_line() -> tuple[str, int] | None:
    f: Any = sys._getframe(2)
    torch_dir = os.path.dirname(torch.__file__)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith((torch_dir, "<")) and fn != __file__:
            return fn, f.f_lineno
        f = f.f_back
    return None


class InplaceOnly(TorchDispatchMode):
    """What candidate B still needs: hooks never see the in-place op."""

    log: ClassVar[list[Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
            self.log.append((args[0].untyped_storage()._cdata, args[0]._version, func, _user_line()))
            del self.log[:-4096]
        return func(*args, **(kwargs or {}))


def _pack(t: torch.Tensor) -> Any:
    return (t, t._version, _user_line())


def _unpack(packed: Any) -> torch.Tensor:
    t, version, _where = packed
    if t._version != version:  # torch does not check hooked tensors: the recorder would have to
        raise RuntimeError(f"modified by an inplace operation: is at version {t._version}; "
                           f"expected version {version}")
    return t


@contextlib.contextmanager
def hooks_only() -> Iterator[None]:
    with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack):
        yield


@contextlib.contextmanager
def candidate_b() -> Iterator[None]:
    with torch.autograd.graph.saved_tensors_hooks(_pack, _unpack), InplaceOnly():
        yield


@contextlib.contextmanager
def candidate_a() -> Iterator[None]:
    inplace_recorder.install()
    try:
        yield
    finally:
        inplace_recorder.uninstall()


@contextlib.contextmanager
def anomaly() -> Iterator[None]:
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        yield


def hooks_skip_torch_check() -> bool:
    x = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        y = torch.sigmoid(x)
        y.mul_(2)
    try:
        y.sum().backward()
    except RuntimeError:
        return False
    return True


def bench_in_process() -> None:
    step = make_step()
    with Count():
        step()
    ops = Count.n
    print(f"1. one training step = {ops} aten ops (forward, backward, optimizer), {STEPS} steps each")
    runs: list[tuple[str, Callable[[], Any]]] = [
        ("bare TorchDispatchMode (passes ops on)", Passthrough),
        ("A: the recorder (one TorchDispatchMode)", candidate_a),
        ("saved_tensors_hooks alone (no in-place ops)", hooks_only),
        ("B: saved_tensors_hooks + in-place-only mode", candidate_b),
        ("set_detect_anomaly(True) (reference)", anomaly),
    ]
    bases: list[float] = []
    chunk = max(5, STEPS // 10)
    for name, ctx in runs:
        # Baseline and candidate in turns, chunk by chunk: the machine drifts between them.
        pairs = []
        for _ in range(STEPS // chunk):
            base = per_step(step, chunk)
            with ctx():
                pairs.append((base, per_step(step, chunk)))
        base = statistics.median(b for b, _ in pairs)
        ratio = statistics.median(t / b for b, t in pairs)
        extra = statistics.median(t - b for b, t in pairs)
        bases.append(base)
        print(f"   {name:<44} {base * ratio * 1e3:8.3f} ms/step  {ratio:5.2f}x  "
              f"{extra / ops * 1e6:+6.2f} µs/op")
    turns = []
    for _ in range(STEPS // chunk):
        with candidate_a():
            a = per_step(step, chunk)
        with candidate_b():
            turns.append(per_step(step, chunk) / a)
    print(f"   B over A, measured in turns: {statistics.median(turns):.2f}x  (above 1: A costs less)")
    print(f"   saved_tensors_hooks turn torch's own version check off: {hooks_skip_torch_check()}")


# ---------------------------------------------------------------- under the debugger

SCRIPT = """
    import time, torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for _ in range(10):
        step()
    t0 = time.thread_time()  # CPU time of the main thread: not inflated by a busy machine
    for _ in range({steps}):
        step()
    print("STEP_US", (time.thread_time() - t0) / {steps} * 1e6)
"""


def _step_us(text: str) -> float:
    m = re.search(r"STEP_US ([\d.]+)", text)
    if not m:
        raise RuntimeError(f"the script did not report its step time: {text[-500:]}")
    return float(m.group(1))


def bench_under_debugpy() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "loop.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(SCRIPT.format(steps=STEPS)))
        plain = _step_us(subprocess.run([sys.executable, path], capture_output=True, text=True,
                                        timeout=600).stdout)
        out = io.StringIO()
        with Session(timeout=120) as s:
            s.launch(path, [], output=out)
            s.handshake([])
            s.wait_target(timeout=600)
        time.sleep(0.2)  # the forwarding thread drains the pipe
        debug = _step_us(out.getvalue())
        out = io.StringIO()
        with Session(timeout=120) as s:
            s.launch(path, [], output=out)
            rep = explain_errors.explain(s, path, timeout=600)
            assert rep["explain_errors"]["occurred"] is False
            s.wait_target(timeout=60)
        time.sleep(0.2)
        explained = _step_us(out.getvalue())
    print("2. the same kind of step as a script, timed by itself")
    print(f"   {'plain python':<44} {plain:10.1f} µs/step")
    print(f"   {'under debugpy, no recorder':<44} {debug:10.1f} µs/step  {debug / plain:5.2f}x")
    print(f"   {'under inspect --explain-errors':<44} {explained:10.1f} µs/step  {explained / plain:5.2f}x")


if __name__ == "__main__":
    torch.set_num_threads(1)
    bench_in_process()
    bench_under_debugpy()
