"""The symbolic-size layout fixtures (tests/fixtures/rules/sl10?_symbolic.py) checked against
torch itself: every case in a fixture's `CASES` is run for real on CPU with several size
combinations (all sizes >= 2), and what each `view` / `reshape` / layer call / in-place write
did is recorded per line of the fixture:

- SL101: a marked line's `.view()` raises torch's "view size is not compatible" error every
  time; every other `.view()` of the fixture runs and succeeds every time.
- SL103: a marked `reshape` returns a copy (`_base is None`) of a non-contiguous input; every
  other `reshape` of the fixture returns a view.
- SL102: a marked line hands a non-contiguous tensor to a conv-like layer (`nn.Conv*d`,
  `nn.Linear`, `F.conv*d`, `F.linear`); every other such call gets a contiguous one.
- SL104: a write line whose comment says `changes: NAME` really changes the tensor `NAME`
  held before the line (marked lines must say so); `keeps: NAME` means it does not.

The SL101 / SL103 fixtures promise more: their marked lines do not depend on the caller's
strides. Those are run a second time with every tensor argument non-contiguous (same shapes
and values, dims stored in reverse order): the marked lines must still raise / copy.

So a positive case of these fixtures is a real bug (or a real copy), whatever the engine says.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rules"
# `missed:` marks a real bug the engine does not find yet (the fixture's docstring says why).
EXPECT = re.compile(r"#\s*(?:expect|missed):\s*((?:SL\d{3}\s*)+)")
WRITE_NOTE = re.compile(r"\b(changes|keeps):\s*([A-Za-z_]\w*)")
VIEW_ERROR = "view size is not compatible with input tensor's size and stride"
CONV_LIKE = frozenset(
    {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Linear"}
)
CONV_FUNCTIONS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def _sizes(B: int, T: int, heads: int, hd: int, H: int, W: int, win: int, patch: int) -> SimpleNamespace:
    return SimpleNamespace(B=B, T=T, heads=heads, hd=hd, C=heads * hd, H=H, W=W, win=win, patch=patch)


# Smallest sizes, distinct primes, a coincidence (T == C == 6), and a few larger ones.
SIZES = [
    _sizes(B=2, T=2, heads=2, hd=2, H=2, W=2, win=2, patch=2),
    _sizes(B=3, T=5, heads=3, hd=7, H=2, W=3, win=3, patch=4),
    _sizes(B=2, T=6, heads=2, hd=3, H=3, W=2, win=2, patch=3),
    _sizes(B=5, T=3, heads=4, hd=2, H=4, W=5, win=2, patch=2),
]
SIZE_IDS = ["all-2", "primes", "T-equals-C", "larger"]


# ------------------------------------------------------------------------------ helpers
def load(name: str) -> ModuleType:
    path = FIXTURES / name
    mod_name = f"_stridelens_fixture_{path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(mod_name, None)
    return module


def marked(name: str, code: str) -> set[int]:
    lines = set()
    for number, line in enumerate((FIXTURES / name).read_text(encoding="utf-8").splitlines(), start=1):
        match = EXPECT.search(line)
        if match and code in match.group(1).split():
            lines.add(number)
    return lines


def method_call_lines(name: str, methods: tuple[str, ...], functions: tuple[str, ...] = ()) -> set[int]:
    """Lines of `<expr>.<method>(...)` calls and `torch.<function>(...)` calls in the fixture."""
    tree = ast.parse((FIXTURES / name).read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func
            is_fn = isinstance(attr.value, ast.Name) and attr.value.id == "torch" and attr.attr in functions
            is_method = attr.attr in methods and not (isinstance(attr.value, ast.Name) and attr.value.id == "torch")
            if is_fn or is_method:
                out.add(attr.end_lineno if is_method else node.lineno)  # type: ignore[arg-type]
    return out


def _same_file(filename: str, path: Path) -> bool:
    try:
        return os.path.samefile(filename, path)
    except OSError:
        return False


class Recorder:
    """Calls made from one fixture file, by line of that file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filename = str(path)
        self.calls: dict[int, list[Any]] = defaultdict(list)

    def mine(self, frame: Any) -> bool:
        name = frame.f_code.co_filename
        return name == self._filename or _same_file(name, self.path)

    def caller(self, depth: int = 2) -> Any:
        frame = sys._getframe(depth)
        return frame if self.mine(frame) else None

    def nearest(self) -> Any:
        frame = sys._getframe(1)
        while frame is not None and not self.mine(frame):
            frame = frame.f_back
        return frame


@contextmanager
def patched(owner: Any, attr: str, make: Callable[[Any], Any]) -> Iterator[None]:
    had_own = attr in vars(owner)
    original = getattr(owner, attr)
    setattr(owner, attr, make(original))
    try:
        yield
    finally:
        if had_own:
            setattr(owner, attr, original)
        else:
            delattr(owner, attr)


def restride(value: Any) -> Any:
    """The same values in another memory layout: tensors of rank >= 2 come out
    non-contiguous (their dims stored in reverse order)."""
    if isinstance(value, torch.Tensor) and value.dim() >= 2:
        order = list(range(value.dim()))[::-1]
        return value.permute(order).contiguous().permute(order)
    if isinstance(value, tuple):
        return tuple(restride(v) for v in value)
    return value


def run_cases(
    module: ModuleType, n: SimpleNamespace, allowed: Callable[[BaseException], bool], *, strided: bool = False
) -> dict[str, str]:
    """Run every case once; what each ended with ("ok" or the error). An error that
    `allowed` does not accept fails the test: the fixture itself is broken. With `strided`,
    the tensors handed to the case are non-contiguous (same shapes and values)."""
    outcome = {}
    for name, build in module.CASES.items():
        target = getattr(module, name)
        try:
            if isinstance(target, type):
                init, args = build(n)
                target(*init)(*(restride(args) if strided else args))
            else:
                args = build(n)
                target(*(restride(args) if strided else args))
        except Exception as err:  # judged by `allowed`
            if not allowed(err):
                raise AssertionError(f"case {name} with sizes {vars(n)} failed unexpectedly: {err!r}") from err
            outcome[name] = f"{type(err).__name__}: {err}"
        else:
            outcome[name] = "ok"
    return outcome


def assert_all_cases_listed(module: ModuleType) -> None:
    def is_case(value: Any) -> bool:
        if getattr(value, "__module__", None) != module.__name__:
            return False
        if isinstance(value, type):
            return issubclass(value, torch.nn.Module)
        return callable(value)

    defined = {name for name, value in vars(module).items() if is_case(value) and not name.startswith("_")}
    missing = defined - set(module.CASES)
    assert not missing, f"functions/modules without a CASES entry (never run): {sorted(missing)}"


# ------------------------------------------------------------------------------ SL101
def is_view_error(err: BaseException) -> bool:
    return isinstance(err, RuntimeError) and VIEW_ERROR in str(err)


def record_views(module: ModuleType, n: SimpleNamespace, *, strided: bool) -> tuple[Recorder, dict[str, str]]:
    rec = Recorder(Path(module.__file__ or ""))

    def make(original: Any) -> Any:
        def view(self: Any, *args: Any, **kwargs: Any) -> Any:
            frame = rec.caller()
            if frame is None:
                return original(self, *args, **kwargs)
            try:
                out = original(self, *args, **kwargs)
            except RuntimeError as err:
                rec.calls[frame.f_lineno].append(("raised", str(err)))
                raise
            rec.calls[frame.f_lineno].append(("ok", None))
            return out

        return view

    with patched(torch.Tensor, "view", make):
        outcome = run_cases(module, n, is_view_error, strided=strided)
    return rec, outcome


@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
def test_sl101_symbolic_marks_exactly_the_views_that_raise(n: SimpleNamespace) -> None:
    name = "sl101_symbolic.py"
    module = load(name)
    assert_all_cases_listed(module)
    rec, outcome = record_views(module, n, strided=False)
    expect = marked(name, "SL101")
    assert expect, "the fixture marks no line"
    raised = {line for line, calls in rec.calls.items() if any(kind == "raised" for kind, _ in calls)}
    succeeded = {line for line, calls in rec.calls.items() if any(kind == "ok" for kind, _ in calls)}
    for line in raised:
        for kind, message in rec.calls[line]:
            assert kind != "raised" or VIEW_ERROR in message, (line, message)
    assert raised == expect, (
        f"marked but did not raise: {sorted(expect - raised)}; raised but unmarked: {sorted(raised - expect)}"
    )
    assert not (succeeded & expect), f"marked lines whose view succeeded at least once: {sorted(succeeded & expect)}"
    views = method_call_lines(name, ("view",))
    never_run = views - set(rec.calls)
    assert not never_run, f"`.view(` lines no case reached (untested negatives): {sorted(never_run)}"
    assert any(end != "ok" for end in outcome.values()), "no case raised"


@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
def test_sl101_symbolic_marked_views_raise_whatever_the_input_layout(n: SimpleNamespace) -> None:
    """The marked views do not depend on the caller's strides (the fixture's promise); the
    unmarked ones may (a view of a raw parameter is legal only for some layouts)."""
    name = "sl101_symbolic.py"
    rec, _ = record_views(load(name), n, strided=True)
    expect = marked(name, "SL101")
    assert expect <= set(rec.calls), f"marked lines not reached: {sorted(expect - set(rec.calls))}"
    for line in sorted(expect):
        assert all(kind == "raised" for kind, _ in rec.calls[line]), f"line {line}: a view succeeded"


# ------------------------------------------------------------------------------ SL103
def record_reshapes(module: ModuleType, n: SimpleNamespace, *, strided: bool) -> Recorder:
    rec = Recorder(Path(module.__file__ or ""))

    def note(frame: Any, source: Any, out: Any) -> None:
        rec.calls[frame.f_lineno].append({"input_contiguous": source.is_contiguous(), "copy": out._base is None})

    def make_method(original: Any) -> Any:
        def reshape(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, *args, **kwargs)
            frame = rec.caller()
            if frame is not None:
                note(frame, self, out)
            return out

        return reshape

    def make_function(original: Any) -> Any:
        def reshape(source: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(source, *args, **kwargs)
            frame = rec.caller()
            if frame is not None:
                note(frame, source, out)
            return out

        return reshape

    with (
        patched(torch.Tensor, "reshape", make_method),
        patched(torch.Tensor, "reshape_as", make_method),
        patched(torch, "reshape", make_function),
    ):
        run_cases(module, n, lambda err: False, strided=strided)
    return rec


@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
def test_sl103_symbolic_marks_exactly_the_reshapes_that_copy(n: SimpleNamespace) -> None:
    name = "sl103_symbolic.py"
    module = load(name)
    assert_all_cases_listed(module)
    rec = record_reshapes(module, n, strided=False)
    expect = marked(name, "SL103")
    assert expect, "the fixture marks no line"
    reshapes = method_call_lines(name, ("reshape", "reshape_as"), ("reshape",))
    assert not (reshapes - set(rec.calls)), f"reshape lines no case reached: {sorted(reshapes - set(rec.calls))}"
    assert expect <= reshapes, f"marked lines without a reshape: {sorted(expect - reshapes)}"
    for line in sorted(reshapes):
        for call in rec.calls[line]:
            if line in expect:
                assert call["copy"] and not call["input_contiguous"], f"line {line}: marked, but {call}"
            else:
                assert not call["copy"], f"line {line}: unmarked, but reshape copied ({call})"


@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
def test_sl103_symbolic_marked_reshapes_copy_whatever_the_input_layout(n: SimpleNamespace) -> None:
    name = "sl103_symbolic.py"
    rec = record_reshapes(load(name), n, strided=True)
    expect = marked(name, "SL103")
    assert expect <= set(rec.calls), f"marked lines not reached: {sorted(expect - set(rec.calls))}"
    for line in sorted(expect):
        for call in rec.calls[line]:
            assert call["copy"] and not call["input_contiguous"], f"line {line}: {call}"


# ------------------------------------------------------------------------------ SL102
@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
def test_sl102_symbolic_marks_exactly_the_noncontiguous_layer_inputs(n: SimpleNamespace) -> None:
    name = "sl102_symbolic.py"
    module = load(name)
    assert_all_cases_listed(module)
    rec = Recorder(FIXTURES / name)

    def hook(mod: Any, args: Any) -> None:
        if type(mod).__name__ not in CONV_LIKE or not args or not isinstance(args[0], torch.Tensor):
            return
        frame = rec.nearest()
        if frame is not None:
            rec.calls[frame.f_lineno].append((type(mod).__name__, args[0].is_contiguous()))

    def make(fn_name: str) -> Callable[[Any], Any]:
        def wrap(original: Any) -> Any:
            def call(inp: Any, *args: Any, **kwargs: Any) -> Any:
                frame = rec.caller()  # only direct calls from the fixture: nn.Linear calls F.linear too
                if frame is not None:
                    rec.calls[frame.f_lineno].append((fn_name, inp.is_contiguous()))
                return original(inp, *args, **kwargs)

            return call

        return wrap

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        with _patched_all(torch.nn.functional, CONV_FUNCTIONS, make):
            run_cases(module, n, lambda err: False)
    finally:
        handle.remove()

    expect = marked(name, "SL102")
    assert expect, "the fixture marks no line"
    assert expect <= set(rec.calls), f"marked lines no case reached: {sorted(expect - set(rec.calls))}"
    for line, calls in sorted(rec.calls.items()):
        for layer, contiguous in calls:
            if line in expect:
                assert not contiguous, f"line {line}: marked, but {layer} got a contiguous input"
            else:
                assert contiguous, f"line {line}: unmarked, but {layer} got a non-contiguous input"


@contextmanager
def _patched_all(owner: Any, names: tuple[str, ...], make: Callable[[str], Callable[[Any], Any]]) -> Iterator[None]:
    if not names:
        yield
        return
    with patched(owner, names[0], make(names[0])), _patched_all(owner, names[1:], make):
        yield


# ------------------------------------------------------------------------------ SL104
def write_notes(name: str) -> dict[int, tuple[str, str]]:
    notes = {}
    for number, line in enumerate((FIXTURES / name).read_text(encoding="utf-8").splitlines(), start=1):
        if "#" not in line:
            continue
        match = WRITE_NOTE.search(line.split("#", 1)[1])
        if match:
            notes[number] = (match.group(1), match.group(2))
    return notes


@pytest.mark.parametrize("n", SIZES, ids=SIZE_IDS)
def test_sl104_symbolic_marked_writes_really_change_the_base(n: SimpleNamespace) -> None:
    name = "sl104_symbolic.py"
    module = load(name)
    assert_all_cases_listed(module)
    rec = Recorder(FIXTURES / name)
    notes = write_notes(name)
    expect = marked(name, "SL104")
    assert expect, "the fixture marks no line"
    unexplained = {line for line in expect if notes.get(line, ("", ""))[0] != "changes"}
    assert not unexplained, f"marked writes without `changes: NAME`: {sorted(unexplained)}"
    pending: dict[int, tuple[int, str, Any, Any]] = {}  # id(frame) -> (line, what, tensor, copy)
    results: dict[int, list[bool]] = defaultdict(list)

    def settle(frame: Any) -> None:
        item = pending.pop(id(frame), None)
        if item is not None:
            line, _, tensor, before = item
            results[line].append(not torch.equal(tensor, before))

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event in ("line", "return"):
            settle(frame)
        if event == "line" and frame.f_lineno in notes:
            what, var = notes[frame.f_lineno]
            tensor = frame.f_locals.get(var)
            assert isinstance(tensor, torch.Tensor), f"line {frame.f_lineno}: `{var}` is not a tensor here"
            pending[id(frame)] = (frame.f_lineno, what, tensor, tensor.detach().clone())
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if rec.mine(frame) else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        run_cases(module, n, lambda err: False)
    finally:
        sys.settrace(previous)

    assert not (set(notes) - set(results)), f"annotated writes no case reached: {sorted(set(notes) - set(results))}"
    for line, (what, var) in sorted(notes.items()):
        changed = results[line]
        if what == "changes":
            assert all(changed), f"line {line}: the write should change `{var}` but did not"
        else:
            assert not any(changed), f"line {line}: the write should leave `{var}` alone but changed it"
