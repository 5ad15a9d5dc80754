"""The recorder behind `stridelens record -- python SCRIPT ARGS`: runs inside the target.

Run as a script by the target's own interpreter (`python tensor_recorder.py --out DIR
--status FILE -- SCRIPT ARGS`, or `... -- -m MODULE ARGS`), it installs a tracer, then runs
the program as `__main__` with runpy, as `python SCRIPT` would. It imports only the standard
library; torch is read from `sys.modules` once the program has imported it, never imported here.

For every line of the user's own files (not the standard library, not site-packages, not
stridelens) that binds a tensor-valued local name, it records the tensor's metadata: shape,
dtype, device, strides, storage offset, contiguity, view-ness (`_base is not None`),
requires_grad, grad_fn's name and the storage's size in bytes. Nothing else is touched: no data
read (no `.item()`), no sync, no allocation on a device, grad mode and RNG untouched; the
tracer holds no reference to a tensor (a name's last tensor is remembered by its id).

Cost (Python 3.11, `sys.settrace`):
- a line event checks the frame's locals for names whose value changed to another tensor
  (compared by id) and charges the change to the line that ran before;
- per (file, line, name) the first `max_per_line` distinct observations are kept with a count
  each, plus the count of all and each size's min/max over them;
- a line is saturated once each of its names was seen `max_per_line` times; once every line a
  code object bound a tensor on is saturated (and it ran `max_per_line` times), its frames are
  no longer traced (the global trace returns None; a running frame turns off its line events);
  a saturated code object is traced again at its 2**k-th call (k >= 6), so a size that changes
  late (the last, shorter batch of an epoch) still shows in the range;
- once nothing new was seen for `quiet` seconds while only saturated code ran, tracing is
  switched off for the rest of the run (`sys.settrace(None)`): what 3.11's tracing costs every
  Python instruction of the process stops too.

Facts are written (temp file + os.replace) to OUT, one JSON file per source file, named by a
hash of its path and holding the sha256 of the file's bytes as they were when first traced:
at exit (atexit), when the program raises, and every `flush` seconds while it runs. Facts of an
earlier recording of the same file contents are merged in. The status file (JSON) tells the
command what happened: whether torch was imported, how many bindings were recorded, where.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import runpy
import site
import sys
import sysconfig
import time
from typing import Any

FORMAT_VERSION = 1
_HERE = os.path.dirname(os.path.abspath(__file__))


def facts_file_name(path: str) -> str:
    """The facts file of a source file: a hash of its absolute path (its contents' hash is inside)."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:24] + ".json"


def _library_roots(skip: list[str]) -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            roots.add(os.path.realpath(value))
    if hasattr(site, "getsitepackages"):  # not in every virtualenv's site module
        roots.update(os.path.realpath(p) for p in site.getsitepackages())
    user = getattr(site, "getusersitepackages", None)
    if user is not None:
        roots.add(os.path.realpath(user()))
    roots.add(_HERE)
    roots.update(os.path.realpath(p) for p in skip)
    return tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots))


class _Name:
    """What was seen of one name at one line."""

    __slots__ = ("count", "observations", "rank", "shape_max", "shape_min")

    def __init__(self) -> None:
        self.count = 0
        self.observations: dict[tuple[Any, ...], int] = {}
        self.rank: int | None = None
        self.shape_min: list[int] | None = None
        self.shape_max: list[int] | None = None


class _Code:
    __slots__ = ("calls", "done", "file", "last_seen", "lines", "saturated", "seen")

    def __init__(self, file: _File) -> None:
        self.file = file
        self.calls = 0
        self.lines: set[int] = set()  # lines of this code object that bound a tensor
        self.saturated: set[int] = set()
        self.seen = 0  # observations in this code object
        self.last_seen: dict[int, int] = {}  # line -> `seen` at its last observation
        self.done = False


class _File:
    __slots__ = ("lines", "path", "sha256")

    def __init__(self, path: str, sha256: str) -> None:
        self.path = path
        self.sha256 = sha256
        self.lines: dict[int, dict[str, _Name]] = {}


_FIELDS = ("shape", "dtype", "device", "strides", "storage_offset", "contiguous", "is_view",
           "requires_grad", "grad_fn", "storage_nbytes")


def describe(t: Any) -> tuple[Any, ...]:
    """The metadata of a tensor, read without touching its data (the order of _FIELDS)."""
    shape = tuple(int(s) for s in t.shape)
    try:
        strides: tuple[int, ...] | None = tuple(t.stride())
        offset: int | None = int(t.storage_offset())
        contiguous: bool | None = bool(t.is_contiguous())
    except (RuntimeError, NotImplementedError):  # sparse, nested: no strides
        strides, offset, contiguous = None, None, None
    try:
        nbytes: int | None = int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):
        nbytes = None
    grad_fn = t.grad_fn
    return (
        shape, str(t.dtype).replace("torch.", ""), str(t.device), strides, offset, contiguous,
        t._base is not None, bool(t.requires_grad), None if grad_fn is None else type(grad_fn).__name__, nbytes,
    )


class Recorder:
    def __init__(self, out: str, max_per_line: int = 8, flush: float = 5.0, quiet: float = 3.0,
                 skip: list[str] | None = None, suffix: str = "") -> None:
        self.out = out
        self.suffix = suffix  # ".rank1": one file per torchrun worker, merged when read
        self.k = max(1, max_per_line)
        self.flush_every = flush
        self.quiet = quiet
        self.roots = _library_roots(skip or [])
        self.codes: dict[Any, _Code | None] = {}
        self.files: dict[str, _File | None] = {}
        self.tensor_type: Any = None
        self.torch_seen = False
        self.bindings = 0
        self.last_new = time.monotonic()
        self.last_flush = self.last_new
        self.ticks = 0
        self.stopped = False
        self.written: set[str] = set()
        self.error: str | None = None
        self.bases: dict[str, dict[str, Any]] = {}  # earlier recordings of the same contents

    # --- which code is the user's -------------------------------------------------------
    def _file(self, filename: str) -> _File | None:
        found = self.files.get(filename, False)
        if found is not False:
            return found  # type: ignore[return-value]
        record: _File | None = None
        if filename and not filename.startswith("<"):
            path = os.path.realpath(filename)
            if not path.startswith(self.roots) and os.sep + "site-packages" + os.sep not in path:
                try:
                    with open(path, "rb") as handle:
                        digest = hashlib.sha256(handle.read()).hexdigest()
                except OSError:
                    digest = None
                if digest is not None:
                    record = _File(path, digest)
        self.files[filename] = record
        return record

    def _code(self, code: Any) -> _Code | None:
        file = self._file(code.co_filename)
        state = _Code(file) if file is not None else None
        self.codes[code] = state
        return state

    # --- tracing ------------------------------------------------------------------------
    def global_trace(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        try:
            state = self.codes[code]
        except KeyError:
            state = self._code(code)
        if state is None:
            return None
        if frame.f_trace is not None:  # a generator or coroutine resumed: its own tracer
            return frame.f_trace
        state.calls += 1
        if not state.done and not state.lines and state.calls >= self.k:
            state.done = True  # called often, never bound a tensor
        if state.done:
            calls = state.calls
            if calls & (calls - 1) or calls < 64:  # traced again at its 64th, 128th, ... call
                self.ticks += 1
                if not self.ticks & 1023:
                    self._tick(True)
                return None
        self.ticks += 1
        if not self.ticks & 255:
            self._tick(False)
        return _FrameTracer(self, state, frame).trace

    def _tick(self, idle: bool) -> None:
        now = time.monotonic()
        if now - self.last_flush >= self.flush_every:
            self.write()
        if idle and self.quiet >= 0 and now - self.last_new >= self.quiet and self.bindings:
            self.stop()

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            sys.settrace(None)

    def observe(self, state: _Code, line: int, name: str, value: Any) -> None:
        names = state.file.lines.get(line)
        if names is None:
            names = state.file.lines[line] = {}
        seen = names.get(name)
        if seen is None:
            seen = names[name] = _Name()
            state.lines.add(line)
            state.saturated.discard(line)
        seen.count += 1
        self.bindings += 1
        try:
            facts = describe(value)
        except Exception:  # noqa: BLE001 - a tensor subclass whose metadata raises: skip it
            return
        if facts in seen.observations:
            seen.observations[facts] += 1
        elif len(seen.observations) < self.k:
            seen.observations[facts] = 1
            self.last_new = time.monotonic()
        shape = facts[0]
        if seen.count == 1:
            seen.rank = len(shape)
            seen.shape_min, seen.shape_max = list(shape), list(shape)
        elif seen.shape_min is not None and seen.shape_max is not None:
            if len(shape) != seen.rank:
                seen.shape_min = seen.shape_max = None
            else:
                for i, size in enumerate(shape):
                    if size < seen.shape_min[i]:
                        seen.shape_min[i] = size
                        self.last_new = time.monotonic()
                    elif size > seen.shape_max[i]:
                        seen.shape_max[i] = size
                        self.last_new = time.monotonic()
        state.seen += 1
        state.last_seen[line] = state.seen
        if seen.count >= self.k and all(n.count >= self.k for n in names.values()):
            state.saturated.add(line)
            # Done when each line is saturated, or did not run again while the others ran
            # k times each (a loop's setup lines, run once per frame).
            horizon = state.seen - self.k * len(state.lines)
            if all(n in state.saturated or state.last_seen[n] < horizon for n in state.lines):
                state.done = True

    # --- writing ------------------------------------------------------------------------
    def write(self) -> None:
        self.last_flush = time.monotonic()
        for file in list(self.files.values()):
            if file is None or not file.lines:
                continue
            try:
                self._write_file(file)
            except OSError as err:
                self.error = f"{self.out}: {err}"

    def _write_file(self, file: _File) -> None:
        target = os.path.join(self.out, facts_file_name(file.path).removesuffix(".json") + self.suffix + ".json")
        doc: dict[str, Any] = {"version": FORMAT_VERSION, "path": file.path, "sha256": file.sha256,
                               "recordings": 1, "lines": {}}
        base = self._earlier(target, file) if target not in self.written else None
        lines = doc["lines"]
        for line, names in sorted(file.lines.items()):
            entry = lines[str(line)] = {}
            for name, seen in names.items():
                entry[name] = {
                    "count": seen.count,
                    "observations": [dict(zip(_FIELDS, _jsonable(facts), strict=True), count=n)
                                     for facts, n in seen.observations.items()],
                    "shape_min": seen.shape_min,
                    "shape_max": seen.shape_max,
                }
        if base is not None:
            self.bases[target] = base
        base = self.bases.get(target)
        if base is not None:
            doc = merge_recordings(base, doc, self.k)
        doc["recorded_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.makedirs(self.out, exist_ok=True)
        temporary = f"{target}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(doc, handle, separators=(",", ":"))
        os.replace(temporary, target)
        self.written.add(target)

    def _earlier(self, target: str, file: _File) -> dict[str, Any] | None:
        """The facts an earlier recording left for the same contents of the file."""
        try:
            with open(target, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("sha256") != file.sha256 or doc.get("version") != FORMAT_VERSION:
            return None
        return doc

    def status(self) -> dict[str, Any]:
        files = [f for f in self.files.values() if f is not None and f.lines]
        return {"torch": self.torch_seen or "torch" in sys.modules, "bindings": self.bindings,
                "lines": sum(len(f.lines) for f in files), "files": len(files), "out": self.out,
                "stopped_early": self.stopped, "error": self.error}


def _jsonable(facts: tuple[Any, ...]) -> list[Any]:
    return [list(v) if isinstance(v, tuple) else v for v in facts]


def merge_recordings(base: dict[str, Any], doc: dict[str, Any], k: int) -> dict[str, Any]:
    """An earlier recording's facts (same file contents) and this run's, as one."""
    merged = {**doc, "recordings": int(base.get("recordings", 1)) + 1}
    lines: dict[str, Any] = {}
    for key in {*base.get("lines", {}), *doc["lines"]}:
        old, new = base.get("lines", {}).get(key, {}), doc["lines"].get(key, {})
        entry = lines[key] = {}
        for name in {*old, *new}:
            a, b = old.get(name), new.get(name)
            if a is None or b is None:
                entry[name] = a or b
                continue
            observations = [dict(o) for o in a["observations"]]
            for o in b["observations"]:
                same = next((p for p in observations if {**p, "count": 0} == {**o, "count": 0}), None)
                if same is not None:
                    same["count"] += o["count"]
                elif len(observations) < k:
                    observations.append(dict(o))
            lo, hi = a.get("shape_min"), a.get("shape_max")
            blo, bhi = b.get("shape_min"), b.get("shape_max")
            if lo is None or blo is None or len(lo) != len(blo):
                lo = hi = None
            else:
                lo = [min(x, y) for x, y in zip(lo, blo, strict=True)]
                hi = [max(x, y) for x, y in zip(hi, bhi, strict=True)]
            entry[name] = {"count": a["count"] + b["count"], "observations": observations,
                           "shape_min": lo, "shape_max": hi}
    merged["lines"] = dict(sorted(lines.items(), key=lambda kv: int(kv[0])))
    return merged


class _FrameTracer:
    """The local trace of one frame: which tensor each name held after the last line."""

    __slots__ = ("frame_ids", "line", "off", "recorder", "sample", "state")

    def __init__(self, recorder: Recorder, state: _Code, frame: Any) -> None:
        self.recorder = recorder
        self.state = state
        self.sample = state.done  # a saturated code object's sampled call: traced to its end
        self.off = False
        self.line = frame.f_code.co_firstlineno  # a function's arguments: its `def` line
        self.frame_ids: dict[str, int] = {}

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        if self.off:
            return None
        recorder = self.recorder
        tensor = recorder.tensor_type
        if tensor is None:
            torch = sys.modules.get("torch")
            tensor = getattr(torch, "Tensor", None) if torch is not None else None
            if tensor is None:
                return self.trace
            recorder.tensor_type = tensor
            recorder.torch_seen = True
        ids = self.frame_ids
        state = self.state
        for name, value in frame.f_locals.items():
            if isinstance(value, tensor):
                if ids.get(name) != id(value):
                    ids[name] = id(value)
                    recorder.observe(state, self.line, name, value)
            elif name in ids:
                del ids[name]
        if event == "line":
            self.line = frame.f_lineno
            if state.done and not self.sample:
                # Saturated while this frame runs (the training loop's): it goes quiet.
                frame.f_trace_lines = False
                self.off = True
        return self.trace


# In a torchrun worker the recorder stands where the training script was (`torchrun OPTS
# tensor_recorder.py [-m] SCRIPT ARGS`, inspector/ranks.rewrite_torchrun): its settings come
# in this variable (JSON), and each rank writes its own files.
WORKER_SETTINGS = "STRIDELENS_RECORD_WORKER"


def main(argv: list[str]) -> None:
    out, status, max_per_line, skip = ".stridelens/facts", None, 8, []
    flush, quiet, suffix = 5.0, 3.0, ""
    worker = os.environ.pop(WORKER_SETTINGS, None)  # (not passed on to the program's children)
    if worker is not None:
        settings = json.loads(worker)
        rank = os.environ.get("RANK", "0")
        out, max_per_line, skip = settings["out"], int(settings["max_per_line"]), list(settings["skip"])
        flush, quiet, suffix = float(settings["flush"]), float(settings["quiet"]), f".rank{rank}"
        status = os.path.join(settings["status_dir"], f"status.rank{rank}.json")
        program = list(argv)
    else:
        i = 0
        while i < len(argv) and argv[i] != "--":
            flag, value = argv[i], argv[i + 1]
            if flag == "--out":
                out = value
            elif flag == "--status":
                status = value
            elif flag == "--max-per-line":
                max_per_line = int(value)
            elif flag == "--skip":
                skip.append(value)
            elif flag == "--flush":
                flush = float(value)
            elif flag == "--quiet":
                quiet = float(value)
            i += 2
        program = argv[i + 1:]
    recorder = Recorder(os.path.abspath(out), max_per_line, flush=flush, quiet=quiet, skip=skip, suffix=suffix)

    def finish() -> None:
        sys.settrace(None)
        recorder.write()
        if status is not None:
            temporary = f"{status}.tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(recorder.status(), handle)
            os.replace(temporary, status)

    atexit.register(finish)
    if program and program[0] == "-m":
        module, rest = program[1], program[2:]
        sys.argv = [module, *rest]
        sys.path[0] = os.getcwd()
        sys.settrace(recorder.global_trace)
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except BaseException:
            sys.settrace(None)
            recorder.write()  # the facts up to the crash, before the traceback is printed
            raise
    else:
        script = program[0]
        sys.argv = list(program)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        sys.settrace(recorder.global_trace)
        try:
            runpy.run_path(script, run_name="__main__")
        except BaseException:
            sys.settrace(None)
            recorder.write()
            raise
        sys.settrace(None)


if __name__ == "__main__":
    main(sys.argv[1:])
