"""Soak: keep editing and hovering a 3,000-line file against `stridelens serve`; print the RSS curve.

    .venv/bin/python bench/lsp_soak.py              # 10 minutes (issue 7's soak)
    .venv/bin/python bench/lsp_soak.py --minutes 2  # shorter
    .venv/bin/python bench/lsp_soak.py --garbage 1  # 1% of frames are garbage (issue 20)

One server over stdio, one generated model file (bench/generate_model.py). Each round types a
line somewhere (character by character, a didChange per key), hovers identifiers around it,
asks for inlay hints and code actions now and then, and deletes the line again, so the text
stays the same size: memory should stay flat. Every 30 s one line: elapsed time, the server's
RSS (VmRSS of its process), edits and hovers so far, hover p50/p95 over the last 30 s. At the
end: RSS after warm-up, peak, last, growth from warm-up to the last sample, and the verdict:
memory is bounded when RSS grew at most BOUND_MB from the 1/3 point of the run to its end
(warm-up, caches and allocator pools are filled by then; a leak keeps going).
STRIDELENS_LSP_MEMTRACE=<file> (server/lsp/memtrace.py) makes the server log what grows.
With `--garbage PCT`, before each message a garbage frame is sent with that probability (a
wrong length, no header, a bad or huge length, bytes that are not UTF-8, random bytes; see
GARBAGE), and the end line says how many of the requests sent after a garbage frame were
answered: all of them, or the server lost its framing.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from generate_model import generate_model_source  # noqa: E402

from tests.hardening.lsp_wire import LspProcess, frame  # noqa: E402

IDENT = re.compile(r"\b[a-z_][a-z_0-9]*\b")
# Steady state wanders ~1-2 MB (the fixed server: +0.1 MB from 210 s to 600 s); the pygls
# future leak added 3-8 MB/min, so even a 3-minute run crosses this.
BOUND_MB = 5.0
TYPED = ["probe = tokens.transpose(0, 1).contiguous()", "flat2 = video.reshape(2, -1).t()",
         "extra = result.detach().clone()", "losses.append(loss.item())"]  # fmt: skip


_G = json.dumps({"jsonrpc": "2.0", "id": "soak-garbage", "method": "textDocument/hover",
                 "params": {"textDocument": {"uri": "file:///nowhere.py"},
                            "position": {"line": 0, "character": 0}}}).encode()  # fmt: skip
GARBAGE: list[bytes] = [
    b"Content-Length: %d\r\n\r\n" % (len(_G) - 20) + _G,  # shorter than the body
    b"Content-Length: %d\r\n\r\n" % (len(_G) + 20) + _G,  # longer
    _G,  # no header
    b"Content-Length: -5\r\n\r\n" + _G,
    b"Content-Length: 99999999999\r\n\r\n" + _G,
    b"Content-Length: 0\r\n\r\n",
    frame(_G.replace(b"nowhere", b"\xff\xfe")),  # not UTF-8
    b"\x00\x01 random bytes \xc3\x28 \r\n\r\n}{",
]


class Garbler:
    """Sends a garbage frame before a message now and then; counts the requests after one."""

    def __init__(self, lsp: LspProcess, percent: float, rng: random.Random) -> None:
        self.lsp, self.p, self.rng = lsp, percent / 100, rng
        self.frames = self.after = self.answered = 0
        self._armed = False
        send = lsp.send

        def send_with_garbage(payload: dict[str, object] | bytes) -> None:
            if self.rng.random() < self.p:
                self.lsp.send_bytes(self.rng.choice(GARBAGE))
                self.frames += 1
                self._armed = True
            send(payload)

        lsp.send = send_with_garbage  # type: ignore[method-assign]

    def request(self, method: str, params: object, timeout: float = 60.0) -> None:
        armed, self._armed = self._armed, False
        self.after += armed
        try:
            self.lsp.request(method, params, timeout)
        except TimeoutError:
            if not armed:
                raise
            print(f"  request {method} after a garbage frame: no answer in {timeout:g} s", flush=True)
            return
        self.answered += armed

    def summary(self) -> str:
        ratio = self.answered / self.after * 100 if self.after else float("nan")
        return (f"garbage frames {self.frames}; requests after one {self.after}, answered {self.answered} "
                f"({ratio:.1f}%)")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def verdict(samples: list[tuple[float, float]]) -> str:
    """Growth from the 1/3 point of the run to its end, and whether that is bounded."""
    end_t, last = samples[-1]
    third_t, third = next((t, r) for t, r in samples if t >= end_t / 3)
    late = last - third
    per_min = late / ((end_t - third_t) / 60) if end_t > third_t else 0.0
    word = "BOUNDED" if late <= BOUND_MB else "GROWING"
    return (f"{word}: RSS {third:.1f} MB at {third_t:.0f} s (1/3 point) -> {last:.1f} MB at {end_t:.0f} s, "
            f"{late:+.1f} MB ({per_min:+.2f} MB/min; bound {BOUND_MB:g} MB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between RSS lines")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--garbage", type=float, default=0.0, metavar="PCT",
                        help="percent of frames preceded by a garbage frame (e.g. 1)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    text = generate_model_source(args.lines)
    lines = text.splitlines()
    body_lines = [i for i, ln in enumerate(lines) if ln.startswith("        ") and "=" in ln]

    with tempfile.TemporaryDirectory() as tmp, LspProcess(cwd=tmp) as lsp:
        ws = Path(tmp)
        uri = (ws / "model.py").as_uri()
        lsp.initialize(ws)
        lsp.open(uri, text)
        lsp.wait_analyzed(uri, exact=True, timeout=120)
        pid = lsp.proc.pid
        garbler = Garbler(lsp, args.garbage, random.Random(args.seed + 1))
        version, edits, hovers = 1, 0, 0
        window: list[float] = []
        samples: list[tuple[float, float]] = []
        start = time.monotonic()
        samples.append((0.0, rss_mb(pid)))
        print(f"server pid {pid}; {len(lines)} lines; {args.minutes:g} min; RSS every {args.interval:g} s")
        print(f"{'t':>6}  {'RSS MB':>7}  {'edits':>6}  {'hovers':>6}  {'hover p50/p95 ms':>16}")
        print(f"{0:>5.0f}s  {samples[0][1]:>7.1f}  {0:>6}  {0:>6}")
        next_sample = args.interval
        end = args.minutes * 60
        while time.monotonic() - start < end:
            at = rng.choice(body_lines)
            typed = "        " + rng.choice(TYPED)
            # Open a new line, then type it key by key (one didChange per key, as editors do).
            version += 1
            lsp.change(uri, version, [{"range": {"start": {"line": at, "character": 0},
                                                 "end": {"line": at, "character": 0}}, "text": "\n"}])  # fmt: skip
            for col, ch in enumerate(typed):
                version += 1
                lsp.change(uri, version, [{"range": {"start": {"line": at, "character": col},
                                                     "end": {"line": at, "character": col}}, "text": ch}])  # fmt: skip
                edits += 1
                if col % 8 == 0:
                    time.sleep(0.01)
            # Hover around the edit, like a mouse resting on the code.
            for ln in (at, at - 1, at + 1, rng.choice(body_lines)):
                words = list(IDENT.finditer(typed if ln == at else lines[max(0, min(ln, len(lines) - 1))]))
                if not words:
                    continue
                w = rng.choice(words)
                t0 = time.perf_counter()
                garbler.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                       "position": {"line": ln, "character": w.start()}})  # fmt: skip
                window.append((time.perf_counter() - t0) * 1000)
                hovers += 1
            if rng.random() < 0.2:
                garbler.request("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": {
                    "start": {"line": max(0, at - 50), "character": 0}, "end": {"line": at + 50, "character": 0}}},
                    timeout=60)  # fmt: skip
            if rng.random() < 0.2:
                garbler.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": {
                    "start": {"line": at, "character": 0}, "end": {"line": at, "character": 1}},
                    "context": {"diagnostics": []}}, timeout=60)  # fmt: skip
            # Delete the line again: the text returns to its original size.
            version += 1
            lsp.change(uri, version, [{"range": {"start": {"line": at, "character": 0},
                                                 "end": {"line": at + 1, "character": 0}}, "text": ""}])  # fmt: skip
            edits += 1
            with lsp.cond:  # the log of messages would grow in *this* process: keep it short
                del lsp.messages[:-200]
            elapsed = time.monotonic() - start
            if elapsed >= next_sample:
                rss = rss_mb(pid)
                samples.append((elapsed, rss))
                q = statistics.quantiles(window, n=20) if len(window) >= 2 else [float("nan")] * 19
                print(f"{elapsed:>5.0f}s  {rss:>7.1f}  {edits:>6}  {hovers:>6}  "
                      f"{statistics.median(window) if window else float('nan'):>7.1f}/{q[18]:<7.1f}", flush=True)  # fmt: skip
                window.clear()
                next_sample += args.interval
        code = lsp.shutdown_and_exit()
    warm = samples[1][1] if len(samples) > 1 else samples[0][1]
    peak = max(r for _, r in samples)
    last = samples[-1][1]
    print(f"RSS after warm-up {warm:.1f} MB, peak {peak:.1f} MB, last {last:.1f} MB, "
          f"growth {last - warm:+.1f} MB ({(last - warm) / warm * 100:+.1f}%); exit code {code}")
    print(verdict(samples))
    if args.garbage:
        print(garbler.summary())
        return 0 if garbler.answered == garbler.after else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
