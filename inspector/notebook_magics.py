"""`%load_ext stridelens`: the runtime inspector inside an IPython / Jupyter kernel, no debugger.

    %stridelens EXPR                 the tensor card (--stats adds value statistics)
    %stridelens memory [--top N] [--min-bytes N]
                                     every live tensor by storage, leaks named by notebook
                                     variable (`Out[12]`, `_`, a `losses` list holding graphs)
    %stridelens display on|off       a one-line layout summary under tensor outputs (off at start)
    %stridelens grads [MODEL]        gradient health after a backward (the `inspect --grads`
                                     report) of MODEL, an expression giving an nn.Module, or
                                     of every module in the notebook

The facts come from `stridelens.inspector.probe`, called in process, under the same rules as
at a breakpoint: no device allocation, no CUDA synchronisation, no data reads unless asked,
no `_version` bumps, no names left in the user's namespace (the magic returns nothing, so its
report never lands in `Out`). The one finding added to the probe's is the output cache's
(`notebook_cache`): IPython keeps every cell result in `Out[N]`, `_N` and `_`/`__`/`___`, so a
big tensor that no variable names any more is still alive.

IPython is imported only here, and only when the extension is loaded: it is no dependency of
stridelens. Torch is never imported by this module: it reads the kernel's own, when loaded.
"""

from __future__ import annotations

import html
import importlib.util
import io
import shlex
import sys
import tokenize
from collections.abc import Callable
from typing import Any

from stridelens import i18n
from stridelens.i18n import N_, tr
from stridelens.inspector import grads_probe, probe, probe_describe, probe_report
from stridelens.inspector.notebook_cache import is_cache_name, output_cache_findings
from stridelens.inspector.target_text import from_target

MAGIC_NAME = "stridelens"
HISTORY_NAMES = ("In", "Out", "_ih", "_oh", "_dh")
RENDER_WIDTH = 100
PICTURE_WIDTH = 78
_DTYPE_SHORT = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
    "complex64": "c64", "complex128": "c128", "bool": "bool",
}
USAGE = N_("usage: %stridelens EXPR | %stridelens --stats EXPR | %stridelens memory [--top N] "
         "[--min-bytes N] | %stridelens grads [MODEL] | %stridelens display on|off   (a variable "
         "named like a sub-command: %stridelens (memory))")


class _Names(dict):  # type: ignore[type-arg]
    """The user's names, in naming order. A dict subclass: the probe's container scan looks at
    plain dicts only, so this copy is never reported as a dict keeping graphs alive."""


class MagicError(Exception):
    """A one-line message for the user (printed to stderr, no traceback)."""


# ---------------------------------------------------------------- namespaces


def naming_namespace(user_ns: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of the user's namespace with their own names first, then the output
    cache (`Out`, `_12`, `_`): the probe gives a tensor the first name it meets, and `x` says
    more than `Out[3]` for the same tensor. Expressions evaluate in this copy, so a walrus in
    one binds nothing in the notebook."""
    ns = _Names((k, v) for k, v in user_ns.items() if not is_cache_name(k) and k not in HISTORY_NAMES)
    if "Out" in user_ns:  # `Out[12]` reads better than its alias `_oh[12]`
        ns.setdefault("Out", user_ns["Out"])
    for k, v in user_ns.items():
        ns.setdefault(k, v)
    return ns


def torch_problem() -> str | None:
    """Why there can be no tensors in this kernel, or None when torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "Tensor"):
        return None
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return tr("no torch in this kernel: its Python ({python}) cannot import torch").format(python=sys.executable)
    return tr("torch is not imported in this kernel yet: there are no tensors to inspect (run `import torch` first)")


# ---------------------------------------------------------------- rendering


def _console(width: int = RENDER_WIDTH) -> Any:
    from rich.console import Console

    return Console(record=True, file=io.StringIO(), width=width, color_system="truecolor",
                   force_jupyter=False, force_terminal=False)


def _export(console: Any) -> tuple[str, str]:
    text = "\n".join(line.rstrip() for line in console.export_text(clear=False).splitlines()).strip("\n")
    body = console.export_html(clear=True, inline_styles=True, code_format="{code}")
    body = "\n".join(line.rstrip() for line in body.splitlines()).strip("\n")
    page = ("<pre class=\"stridelens\" style=\"font-family: ui-monospace, Menlo, Consolas, monospace; "
            f"font-size: 12px; line-height: 1.3; white-space: pre; overflow-x: auto\">{body}</pre>")
    return text, page


def storage_picture(d: dict[str, Any], width: int = PICTURE_WIDTH) -> list[str]:
    """The storage strip of `stridelens explain` and the hover, from the probe's facts."""
    from stridelens.server.analysis.facts import TensorFact
    from stridelens.server.analysis.storage_picture import render_storage_picture

    if not d.get("shape") or d.get("strides") is None or not d.get("storage_bytes") or not d.get("element_size"):
        return []
    fact = TensorFact(shape=tuple(d["shape"]), dtype=d["dtype"], device=d["device"],
                      strides=tuple(d["strides"]), storage_offset=d["storage_offset"],
                      contiguous=d["contiguous"], storage_numel=d["storage_bytes"] // d["element_size"],
                      element_size=d["element_size"])
    return render_storage_picture(fact, width)


def render_card(expr: str, d: dict[str, Any]) -> tuple[str, str]:
    """(text/plain, text/html) of the tensor card: the probe's facts and the storage strip."""
    from rich.text import Text

    from stridelens.inspector.reports import describe_table

    console = _console()
    console.print(describe_table(expr, d))
    picture = storage_picture(d)
    if picture:
        for line in picture:
            strip = Text("  ")
            for ch in line:
                strip.append(ch, style="bold green" if ch == "█" else ("yellow" if ch == "▒" else ""))
            console.print(strip, overflow="ignore", crop=False)
    return _export(console)


def render_memory(report: dict[str, Any]) -> tuple[str, str]:
    from stridelens.inspector.reports import memory_tables

    console = _console()
    console.print(memory_tables(report))
    return _export(console)


def summary_line(t: Any, user_ns: dict[str, Any] | None = None) -> str:
    """`tensor[2, 3] f32 strides (1, 2) non-contiguous view of a` -- layout only, no data."""
    torch = sys.modules["torch"]
    dtype = str(t.dtype).replace("torch.", "")
    parts = [f"tensor[{', '.join(map(str, t.shape))}]", _DTYPE_SHORT.get(dtype, dtype)]
    if t.device.type != "cpu":
        parts.append(str(t.device))
    if t.layout != torch.strided or t.is_nested:
        parts.append(str(t.layout).replace("torch.", ""))
        return " ".join(parts)
    strides = tuple(t.stride())
    parts.append(tr("strides {strides}").format(strides=strides))
    if t.storage_offset():
        parts.append(tr("offset {offset}").format(offset=t.storage_offset()))
    if not t.is_contiguous():
        parts.append(tr("non-contiguous"))
    if t._base is not None:
        name, sharer = probe_describe._base_names(t, naming_namespace(user_ns)) if user_ns is not None else (None, None)
        if name:
            parts.append(tr("view of {name}").format(name=name))
        elif sharer:
            parts.append(tr("view of an unnamed tensor, shares the storage of {name}").format(name=sharer))
        else:
            parts.append(tr("view of an unnamed tensor"))
    if t.grad_fn is not None:
        parts.append(f"grad_fn={type(t.grad_fn).__name__}")
    elif t.requires_grad:
        parts.append("requires_grad")
    return " ".join(parts)


def grads_report(shell: Any, model_expr: str | None) -> dict[str, Any]:
    """The gradient probe's rows for one module (MODEL, named by its expression) or for every
    module the notebook's names reach, analysed as `inspect --grads` does."""
    from stridelens.inspector import grad_reports

    torch = sys.modules["torch"]
    # The gradient probe finds the probe the way it does in a debuggee: by its private name.
    sys.modules.setdefault(grads_probe.PROBE_NAME, probe)
    ns = naming_namespace(shell.user_ns)
    try:
        if model_expr is not None:
            try:
                model = eval(compile(model_expr, "<stridelens-expr>", "eval"), ns, {})
            except SyntaxError as e:
                raise MagicError(tr("not a Python expression: {expr} ({error})").format(
                    expr=repr(model_expr), error=e.msg)) from None
            except Exception as e:  # noqa: BLE001 -- any error of the user's expression is reported
                raise MagicError(tr("the expression raised {error}").format(error=f"{type(e).__name__}: {e}")) from None
            if not isinstance(model, torch.nn.Module):
                raise MagicError(tr("{expr} is a {type}, not a torch.nn.Module").format(
                    expr=model_expr, type=f"{type(model).__module__}.{type(model).__qualname__}"))
            # Only that module; the notebook's tensors stay, to tell which graphs reach a parameter.
            only = _Names((k, v) for k, v in ns.items() if not isinstance(v, torch.nn.Module))
            only[model_expr] = model
            del model
            ns.clear()
            ns = only
        try:
            rows = grads_probe.grads(ns, {})
        except grads_probe.GradsError as e:
            raise MagicError(from_target(str(e))) from None
    finally:
        ns.clear()
    if not rows["params"]:
        raise MagicError(tr("no nn.Module with parameters in this notebook") if model_expr is None
                         else tr("{expr} has no parameters").format(expr=model_expr))
    return grad_reports.analyze(rows)


def render_grads(report: dict[str, Any]) -> tuple[str, str]:
    from stridelens.inspector.grad_reports import grads_group

    console = _console(width=120)
    console.print(grads_group(report))
    return _export(console)


def memory_report(shell: Any, top: int = 20, min_bytes: int = probe_report.PIN_MIN_BYTES) -> dict[str, Any]:
    ns = naming_namespace(shell.user_ns)
    try:
        report = probe_report.process_report(top, min_bytes, ns)
    finally:
        ns.clear()
    cache = output_cache_findings(shell, min_bytes)
    if cache:
        keys = {f["storage_key"] for f in cache}
        rest = [f for f in report["findings"]
                if not (f["kind"] == "view_pins_storage" and f.get("storage_key") in keys)]
        report["findings"] = sorted(rest + cache, key=lambda f: -f["bytes"])
    return report


# ---------------------------------------------------------------- the display hook


def _plain_printer(shell: Any) -> Callable[[Any, Any, bool], None]:
    def printer(obj: Any, p: Any, cycle: bool) -> None:
        p.text(repr(obj))
        if len(getattr(p, "stack", ())) <= 1:  # under the cell's result, not inside a list
            line = _safe_summary(obj, shell)
            if line:
                p.text("\n" + line)

    return printer


def _html_printer(shell: Any) -> Callable[[Any], str | None]:
    def printer(obj: Any) -> str | None:
        line = _safe_summary(obj, shell)
        if line is None:
            return None
        return (f"<pre style=\"margin: 0\">{html.escape(repr(obj))}</pre>"
                "<div class=\"stridelens-summary\" style=\"font-family: ui-monospace, Menlo, Consolas, "
                f"monospace; font-size: 12px; color: #6a737d\">{html.escape(line)}</div>")

    return printer


def _safe_summary(obj: Any, shell: Any) -> str | None:
    try:
        return summary_line(obj, shell.user_ns)
    except Exception:  # noqa: BLE001 -- a summary must never break the display of a result
        return None


class _DisplayHook:
    """Formatters for torch.Tensor (by name: torch need not be imported) in IPython's
    display formatter; whatever was registered before comes back when switched off."""

    def __init__(self) -> None:
        self.saved: dict[str, Any] | None = None

    @property
    def on(self) -> bool:
        return self.saved is not None

    def enable(self, shell: Any) -> None:
        if self.saved is not None:
            return
        formatters = shell.display_formatter.formatters
        self.saved = {}
        for mime, fn in (("text/plain", _plain_printer(shell)), ("text/html", _html_printer(shell))):
            self.saved[mime] = formatters[mime].pop("torch.Tensor", None)
            formatters[mime].for_type_by_name("torch", "Tensor", fn)

    def disable(self, shell: Any) -> None:
        if self.saved is None:
            return
        formatters = shell.display_formatter.formatters
        for mime, old in self.saved.items():
            formatters[mime].pop("torch.Tensor", None)
            if old is not None:
                formatters[mime].for_type_by_name("torch", "Tensor", old)
        self.saved = None


_HOOK = _DisplayHook()


# ---------------------------------------------------------------- the magic


def _int_option(value: str, flag: str) -> int:
    try:
        n = int(value.replace("_", ""))
    except ValueError:
        raise MagicError(tr("{flag} needs a whole number, not {value}").format(flag=flag, value=repr(value))) from None
    if n < 0:
        raise MagicError(tr("{flag} needs a number >= 0, not {n}").format(flag=flag, n=n))
    return n


def _memory_options(args: list[str]) -> tuple[int, int]:
    top, min_bytes = 20, probe_report.PIN_MIN_BYTES
    i = 0
    while i < len(args):
        flag = args[i]
        if flag not in ("--top", "--min-bytes") or i + 1 >= len(args):
            raise MagicError(tr("memory takes --top N and --min-bytes N, not {words}").format(
                words=repr(" ".join(args[i:]))))
        if flag == "--top":
            top = _int_option(args[i + 1], flag)
        else:
            min_bytes = _int_option(args[i + 1], flag)
        i += 2
    return top, min_bytes


def _without_comment(line: str) -> str:
    """`memory --top 3  # the biggest` -> `memory --top 3` (IPython passes comments on)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return line[: tok.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):  # unbalanced brackets & co: the probe says so
        pass
    return line


def run_magic(shell: Any, line: str) -> tuple[str, str] | None:
    """What `%stridelens LINE` shows: (text/plain, text/html), or None when it only switches
    something; raises MagicError with the one-line message otherwise."""
    line = _without_comment(line.strip())
    if not line:
        raise MagicError(tr(USAGE))
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    head = words[0] if words else ""
    if head == "display" and len(words) <= 2:
        state = words[1] if len(words) == 2 else None
        if state not in ("on", "off"):
            raise MagicError(tr("display takes on or off: %stridelens display on"))
        if state == "on":
            _HOOK.enable(shell)
        else:
            _HOOK.disable(shell)
        return None
    if head == "grads":
        problem = torch_problem()
        if problem:
            raise MagicError(problem)
        model_expr = line[len("grads"):].strip() or None
        return render_grads(grads_report(shell, model_expr))
    if head == "memory" and (len(words) == 1 or words[1].startswith("--")):
        problem = torch_problem()
        if problem:
            raise MagicError(problem)
        top, min_bytes = _memory_options(words[1:])
        return render_memory(memory_report(shell, top, min_bytes))
    stats = False
    expr = line
    if head == "--stats":
        stats = True
        expr = line[len("--stats"):].strip()
        if not expr:
            raise MagicError(tr("--stats needs an expression: %stridelens --stats x"))
    problem = torch_problem()
    if problem:
        raise MagicError(problem)
    ns = naming_namespace(shell.user_ns)
    try:
        d = probe_describe.describe_expr(expr, ns, {}, stats)
    except probe.ProbeError as e:
        raise MagicError(from_target(str(e))) from None
    finally:
        ns.clear()
    return render_card(expr, d)


def stridelens_magic(line: str) -> None:
    """%stridelens EXPR | memory [--top N] [--min-bytes N] | grads [MODEL] | display on|off (see the README)."""
    from IPython import get_ipython
    from IPython.display import display

    shell = get_ipython()
    try:
        shown = run_magic(shell, line)
    except MagicError as e:
        print(f"stridelens: {e}", file=sys.stderr)
        return
    if shown is not None:
        text, page = shown
        display({"text/plain": text, "text/html": page}, raw=True)


def load(shell: Any) -> None:
    # The kernel's own locale decides (LC_ALL / LC_MESSAGES / LANG), as for the CLI without --lang;
    # a language stridelens was already given in this process (an embedding tool's) stays.
    if i18n.language() == i18n.ENGLISH:
        i18n.set_language(i18n.from_environment())
    shell.register_magic_function(stridelens_magic, magic_kind="line", magic_name=MAGIC_NAME)


def unload(shell: Any) -> None:
    _HOOK.disable(shell)
    shell.magics_manager.magics["line"].pop(MAGIC_NAME, None)
