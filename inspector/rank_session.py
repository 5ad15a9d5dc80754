"""One debug session per rank, driven in parallel: attach, stop, snapshot, resume, detach.

Each phase runs on every live rank at once (one thread per rank: every step is a blocking
DAP round trip or a wait, so threads overlap them well). A rank that fails a phase (died, did
not stop in time, refused the attach) is marked with the reason and left out of later phases;
the others go on. Phases are barriers on purpose: every rank's memory is read before any user
`--expr` runs, so the snapshot is taken at one moment and no expression disturbs it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from stridelens.i18n import tr
from stridelens.inspector import rank_probe
from stridelens.inspector.dap_client import DapClosed, DapError, DapTimeout
from stridelens.inspector.ranks import Worker
from stridelens.inspector.session import Breakpoint, InspectError, NoStop, Session
from stridelens.inspector.target_text import from_target

DIFF_TOP = 64  # storages read per rank for the difference table (more than --top shows)


@dataclass
class Rank:
    worker: Worker
    session: Session | None = None
    failed: str | None = None  # why this rank is not (fully) reported
    failed_phase: str | None = None
    target: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    stops: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)  # one memory report per stop
    frame: dict[str, Any] | None = None
    expressions: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.failed is None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (exited, not yet reaped by torchrun) is gone too.
    with contextlib.suppress(OSError):
        return open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0] == "Z"
    return False


class Ranks:
    """The ranks of one job and the phases run on them."""

    def __init__(self, timeout: float, progress: Callable[[str], None] | None = None) -> None:
        self.ranks: dict[int, Rank] = {}
        self.timeout = timeout
        self.progress = progress or (lambda _m: None)
        self.walls: dict[str, float] = {}  # wall time per phase, all ranks together
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="stridelens-rank")

    def __enter__(self) -> Ranks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, worker: Worker) -> Rank:
        with self._lock:
            r = self.ranks[worker.rank] = Rank(worker)
            if worker.error:
                r.failed, r.failed_phase = from_target(worker.error), "start"
            return r

    def live(self) -> list[Rank]:
        return [r for r in sorted(self.ranks.values(), key=lambda r: r.worker.rank) if r.live]

    # ---------------------------------------------------------------- running a phase

    def _fail(self, r: Rank, phase: str, e: BaseException) -> None:
        msg = str(e) or type(e).__name__
        if _gone(r.worker.pid):
            msg = (tr("the process (PID {pid}) died during the report") if phase != "attach" else
                   tr("the process (PID {pid}) died before the attach")).format(pid=r.worker.pid)
        elif isinstance(e, DapClosed):
            msg = tr("its debug connection closed ({error})").format(error=msg)
        r.failed, r.failed_phase = msg, phase

    def run_phase(self, phase: str, fn: Callable[[Rank], None], ranks: list[Rank] | None = None) -> None:
        """fn(rank) on every live rank (or on the ranks given) at once; failures are recorded
        (the first one per rank), never raised."""
        todo = self.live() if ranks is None else ranks

        def one(r: Rank) -> None:
            t0 = time.perf_counter()
            try:
                fn(r)
            except (InspectError, DapError, DapTimeout, DapClosed, OSError, ValueError) as e:
                if r.failed is None:
                    self._fail(r, phase, e)
            finally:
                r.seconds[phase] = round(r.seconds.get(phase, 0.0) + time.perf_counter() - t0, 3)

        t0 = time.perf_counter()
        for f in [self._pool.submit(one, r) for r in todo]:
            f.result()
        self.walls[phase] = round(self.walls.get(phase, 0.0) + time.perf_counter() - t0, 3)

    # ---------------------------------------------------------------- getting sessions

    def connect(self, r: Rank, breaks: list[Breakpoint]) -> None:
        """A launched rank: connect to the port it wrote, then configure it (it waits for us)."""
        def go(r: Rank) -> None:
            s = r.session = Session(timeout=self.timeout)
            assert r.worker.port is not None
            s.connect("127.0.0.1", int(r.worker.port))
            s.handshake(breaks)
        self.run_phase("attach", go, [r] if r.failed is None else [])

    def attach_pids(self, breaks: list[Breakpoint], python: str | None = None) -> None:
        """Inject debugpy into every rank, then arm them all at once: a rank armed (and stopped)
        while another is still being injected would hold that one in its next collective."""
        def go(r: Rank) -> None:
            s = r.session = Session(timeout=self.timeout)
            s.attach_pid(r.worker.pid, python=python)
            s.handshake([])
        self.progress(tr("injecting debugpy into {n} ranks with gdb (seconds)").format(n=len(self.live())))
        self.run_phase("attach", go)
        if breaks:
            self.run_phase("attach", lambda r: r.session.set_breakpoints_now(breaks) if r.session else None)

    # ---------------------------------------------------------------- stopping

    def wait_stops(self, settle: float | None = None) -> None:
        """Every rank at the breakpoint, each within the timeout.

        With `settle` (attach: ranks armed while running), ranks that stopped while others have
        not within `settle` s are resumed once per round: the others may be blocked in a
        collective that needs them (they passed the line just before being armed). Resumed
        ranks stop at the next hit, as do the others once the collective completes.
        """
        self.progress(tr("waiting for every rank's breakpoint"))
        deadline = time.monotonic() + self.timeout
        waiting = self.live()
        while waiting:
            left = deadline - time.monotonic()
            wait = left if settle is None else min(settle, left)
            stopped: list[Rank] = []

            def go(r: Rank, wait: float = max(wait, 0.0), stopped: list[Rank] = stopped) -> None:
                assert r.session is not None
                try:
                    r.session.wait_stop(timeout=wait)
                except NoStop as e:
                    if time.monotonic() >= deadline - 0.05:
                        # Which collective it waits in is what torch's Flight Recorder records.
                        raise InspectError(tr("did not reach the breakpoint within {seconds} s (still running, "
                                              "or blocked in a collective)").format(seconds=f"{self.timeout:g}")) from e
                    return
                with self._lock:
                    stopped.append(r)
            self.run_phase("stop", go, waiting)
            waiting = [r for r in waiting if r.failed is None and r not in stopped]
            if waiting and stopped and settle is not None and time.monotonic() < deadline:
                self.progress(tr("{waiting} ranks not stopped: letting the {stopped} stopped ones through one "
                                 "more collective").format(waiting=len(waiting), stopped=len(stopped)))
                self.run_phase("stop", lambda r: r.session.resume() if r.session else None, stopped)
                waiting += stopped

    def pause_all(self, settle: float = 5.0) -> None:
        """Pause every rank. pydevd stops a thread only between Python bytecodes, so a rank
        blocked in a collective (waiting for a rank already paused) stays running: after
        `settle` s the paused ranks are resumed and paused again at once (the collective then
        completes, the blocked rank stops at its pending pause, the others a few lines later)."""
        self.progress(tr("pausing every rank"))
        deadline = time.monotonic() + self.timeout
        to_pause, pending = self.live(), list[Rank]()
        while to_pause or pending:
            stopped: list[Rank] = []
            wait = max(0.0, min(settle, deadline - time.monotonic()))

            def one(r: Rank, fresh: bool, wait: float = wait, stopped: list[Rank] = stopped) -> None:
                s = r.session
                assert s is not None
                saved, s.timeout = s.timeout, max(wait, 0.5)
                try:
                    s.pause() if fresh else s.wait_stop()
                except NoStop as e:
                    if time.monotonic() >= deadline - 0.05:
                        raise InspectError(
                            tr("did not pause within {seconds} s: its main thread is in C code, often a "
                               "collective waiting for a rank that is already stopped").format(
                                seconds=f"{self.timeout:g}")) from e
                    return
                finally:
                    s.timeout = saved
                with self._lock:
                    stopped.append(r)
            self.run_phase("stop", lambda r: one(r, True), to_pause)
            self.run_phase("stop", lambda r: one(r, False), pending)
            waiting = [r for r in to_pause + pending if r.failed is None and r not in stopped]
            to_pause, pending = [], waiting
            if waiting and stopped:
                self.progress(tr("{n} ranks did not pause: resuming and pausing the others again").format(n=len(waiting)))
                self.run_phase("stop", lambda r: r.session.resume() if r.session else None, stopped)
                to_pause = stopped

    def resume_all(self) -> None:
        self.run_phase("resume", lambda r: r.session.resume() if r.session else None)

    # ---------------------------------------------------------------- reading

    def snapshot(self, top: int, min_pin_bytes: int, frame: bool) -> None:
        """Memory on every rank (and the frame report when asked), one sample per call."""
        self.progress(tr("reading every rank's tensors"))

        def go(r: Rank) -> None:
            s = r.session
            assert s is not None
            if not r.target:
                r.target = s.ensure_probe()
                s.inject(rank_probe.__file__, rank_probe.PRIVATE_NAME, "<stridelens-rank-probe>")
            r.info = dict(s.call_probe("rank_info_json()", module=rank_probe.PRIVATE_NAME))
            r.stops.append({"reason": s.stop_reason, "path": (s.frame.get("source") or {}).get("path"),
                            "line": s.frame.get("line"), "function": s.frame.get("name")})
            r.samples.append(s.process_report(max(top, DIFF_TOP), min_pin_bytes))
            if frame:
                r.frame = s.frame_report()
        self.run_phase("report", go)

    def expressions(self, exprs: list[str], stats: bool) -> bool:
        """--expr on every rank; False when one raised (a rank that died is marked failed)."""
        ok = threading.Event()
        ok.set()

        def go(r: Rank) -> None:
            assert r.session is not None
            for expr in exprs:
                try:
                    r.expressions.append({"expr": expr, "result": r.session.describe(expr, stats)})
                except InspectError as e:
                    if _gone(r.worker.pid) or type(e).__name__ == "TargetGone":
                        raise
                    ok.clear()
                    r.expressions.append({"expr": expr, "error": str(e)})
        self.run_phase("expressions", go)
        return ok.is_set()

    # ---------------------------------------------------------------- leaving

    def finish(self, kill: bool) -> None:
        """Detach from every rank (breakpoints cleared, threads resumed), or end them."""
        sessions = [r for r in self.ranks.values() if r.session is not None]

        def go(r: Rank) -> None:
            assert r.session is not None
            r.session.finish(kill=kill)
        self.run_phase("detach", go, sessions)

    def close(self) -> None:
        for r in self.ranks.values():
            if r.session is not None:
                r.session.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
