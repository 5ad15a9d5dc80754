"""The text of `inspect --explain-errors`: what raised, on which tensors, which earlier line
caused it, and the fix; then the script's own frames.

One layout for every kind (the `kind` the recorder gave, see inplace_recorder.KINDS): a title
naming the kind and its static rule, a two-column table (the line that raised, the operands
as they were at that moment, the cause's line, the module, the fix, torch's own words), and a
traceback of the user's frames only.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stridelens.i18n import N_, tr
from stridelens.inspector import fit
from stridelens.inspector.reports import pid_torch, stop_line

TITLES = {
    "inplace_saved": N_("In-place modification of a tensor autograd saved for backward"),
    "view_noncontiguous": N_("view() of a non-contiguous tensor"),
    "backward_twice": N_("Backward through a graph an earlier backward freed"),
    "device_mismatch": N_("Tensors on different devices in one op"),
    "shape_mismatch": N_("Shapes that do not fit"),
}
RULE_NAMES = {"SL213": "inplace-on-saved", "SL101": "view-noncontiguous", "SL203": "backward-twice",
              "SL214": "device-mismatch"}
KINDS_TEXT = N_("an in-place change of a tensor saved for backward, a view of a non-contiguous tensor, "
                "backward through a freed graph, tensors on different devices, shapes that do not fit "
                "in matmul / linear / conv")


def _tuple(v: list[int] | None) -> str:
    if v is None:
        return "—"
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"


def _path(path: str) -> str:
    with contextlib.suppress(ValueError):  # another drive (Windows)
        rel = os.path.relpath(path)
        return path if rel.startswith("..") else rel
    return path


def where(loc: dict[str, Any] | None) -> Text:
    """`train.py:42 in step  x = x.view(-1)`, or that the line was not recorded."""
    if not loc:
        return Text(tr("(line not recorded)"), style="dim")
    return Text.assemble((f"{_path(loc['path'])}:{loc['line']}", "bold"),
                         (tr(" in {function}").format(function=loc["function"]), "dim"),
                         (f"  {loc['code']}" if loc.get("code") else "", "cyan"))


def _names(names: list[dict[str, Any]], operand: bool = False) -> str:
    """The names bound to a tensor; those that are that very tensor first, then the others of its
    storage (an operand: `batch (same storage, shape (2, 8, 4))`, its base)."""
    out = []
    for n in sorted(names, key=lambda n: not n.get("same_window", True)):
        if n.get("same_window", True):
            out.append(tr("{name} in {function}").format(name=n["name"], function=n.get("function")))
        elif operand:
            out.append(tr("{name} (same storage, shape {shape}) in {function}").format(
                name=n["name"], shape=_tuple(n["shape"]), function=n.get("function")))
        else:
            out.append(tr("{name} (a view {shape}) in {function}").format(
                name=n["name"], shape=_tuple(n["shape"]), function=n.get("function")))
    return tr(", ").join(out)


def operand_text(o: dict[str, Any]) -> str:
    """`(2, 4, 8) float32 cpu, strides (32, 1, 4), non-contiguous; x in forward`."""
    facts = f"{_tuple(o['shape'])} {o['dtype']} {o['device']}"
    if o.get("strides") is not None:
        facts += tr(", strides {strides}").format(strides=_tuple(o["strides"]))
        if o.get("storage_offset"):
            facts += tr(", offset {offset}").format(offset=o["storage_offset"])
        facts += tr(", contiguous") if o.get("contiguous") else tr(", non-contiguous")
    names = _names(o.get("names") or [], operand=True)
    return facts + (tr("; bound to: {names}").format(names=names) if names else "")


def _label(o: dict[str, Any]) -> str:
    """An operand's short name: its variable where it has one, else torch's argument name."""
    exact = [n["name"] for n in o.get("names") or [] if n.get("same_window", True)]
    any_name = [n["name"] for n in o.get("names") or []]
    if exact:
        return f"`{exact[0]}`"
    if any_name:
        return tr("`{name}` (its storage)").format(name=any_name[0])
    return tr("the operand `{arg}`").format(arg=o["arg"])


def _cause_rows(r: dict[str, Any]) -> list[tuple[str, Text]]:
    kind = r["kind"]
    rows: list[tuple[str, Text]] = []
    operands = r.get("operands") or []
    if kind == "view_noncontiguous":
        for o in operands[:1]:
            c = o.get("made_noncontiguous_by")
            if c:
                rows.append((tr("made non-contiguous by"),
                             Text.assemble(c["op"], tr(" at "), where(c.get("location")))))
            else:
                rows.append((tr("made non-contiguous by"),
                             Text(tr("not recorded (made before the recording started, or on another thread)"),
                                  style="dim")))
    elif kind in ("device_mismatch", "shape_mismatch"):
        # One row per origin: the weight and the bias of one layer were made by the same line.
        by_origin: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for o in operands:
            origin = o.get("origin")
            if origin:
                loc = origin.get("location") or {}
                key = (origin["how"], origin["op"], origin.get("to") or origin.get("device"), loc.get("path"),
                       loc.get("line"))
                by_origin.setdefault(key, []).append(o)
        for (how, op_name, device, _p, _l), group in by_origin.items():
            origin = group[0]["origin"]
            who = tr(", ").join(_label(o) for o in group)
            lead = (tr("{operands} to {device}, by {op} at ") if how == "moved" else
                    tr("{operands} on {device}, by {op} at ")).format(operands=who, device=device, op=op_name)
            rows.append((tr("moved") if how == "moved" else tr("made"),
                         Text.assemble(lead, where(origin.get("location")))))
    elif kind == "backward_twice":
        saved = r.get("saved_by")
        if saved:
            rows.append((tr("saved by"), Text.assemble(_saver(saved), tr(" at "), where(saved.get("location")))))
        freed = r.get("freed_by")
        rows.append((tr("freed by"), Text.assemble(tr("the backward at "), where(freed["location"])) if freed else
                     Text(tr("an earlier backward (its line was not recorded)"), style="dim")))
    return rows


def _saver(saved: dict[str, Any]) -> str:
    if not saved.get("op"):
        return str(saved["node"])
    if saved["as"].startswith("result"):
        return tr("{op} ({node} keeps its output)").format(op=saved["op"], node=saved["node"])
    return tr("{op} ({node} keeps its input `{name}`)").format(op=saved["op"], node=saved["node"], name=saved["as"])


def _line(loc: dict[str, Any] | None) -> str:
    return str(loc["line"]) if loc else "?"


def fix_text(r: dict[str, Any]) -> str:
    """What to change, for the kind and what was found."""
    kind = r["kind"]
    raised = r.get("raised_at")
    operands = r.get("operands") or []
    if kind == "view_noncontiguous":
        c = operands[0].get("made_noncontiguous_by") if operands else None
        text = tr("use .reshape(...) at line {line} (it copies only when it must) or .contiguous().view(...)").format(
            line=_line(raised))
        if c and c.get("location"):
            text += tr("; or call .contiguous() once where the layout changes (line {line})").format(
                line=c["location"]["line"])
        return text
    if kind == "backward_twice":
        freed = r.get("freed_by")
        saved = r.get("saved_by") or {}
        if freed and freed.get("after_saving") and saved.get("location"):
            code = saved["location"].get("code") or ""
            m = re.match(r"\s*([A-Za-z_]\w*)\s*=", code)
            detach = f"`{m.group(1)} = {m.group(1)}.detach()`" if m else "`.detach()`"
            return tr("this backward reaches what line {saved} made before the backward at line {freed} freed it "
                      "(a tensor carried over from an earlier step, such as a recurrent state): detach it at the "
                      "start of each step ({detach}), or recompute it; retain_graph=True on the first backward only "
                      "if the same graph must be run twice").format(
                saved=saved["location"]["line"], freed=freed["location"]["line"] if freed.get("location") else "?",
                detach=detach)
        return tr("recompute the forward before each backward, or pass retain_graph=True to the first backward if "
                  "the same graph must be run twice")
    if kind == "device_mismatch":
        made = [o for o in operands if (o.get("origin") or {}).get("how") == "made"]
        devices = sorted({o["device"] for o in operands})
        if made and len(devices) > 1:
            odd = made[-1]
            other = next((o["device"] for o in operands if o["device"] != odd["device"]), devices[0])
            return tr("make {operand} where the other operand is: device={device} (device=x.device) at line {line}, "
                      "or .to({device}) before line {raised}").format(
                operand=_label(odd), device=other, line=_line(odd["origin"].get("location")), raised=_line(raised))
        return tr("move every operand to one device (.to(device)) before line {line}").format(line=_line(raised))
    if kind == "shape_mismatch":
        return _shape_fix(r)
    if kind == "inplace_saved":
        bumps = [m["location"]["line"] for m in r.get("modified_by") or [] if m.get("location")]
        return tr("compute line {line} out of place (`y = y + z`, not `y += z`; `y.mul(2)`, not `y.mul_(2)`), "
                  "or .clone() the tensor before it").format(line=bumps[0] if bumps else "?")
    return ""


def _shape_fix(r: dict[str, Any]) -> str:
    module = r.get("module") or {}
    message = r.get("message", "")
    raised = r.get("raised_at")
    name = module.get("name") or module.get("type")
    m = re.search(r"shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", message)
    if m and module.get("type") == "Linear":
        got, expected, out = m.group(2), m.group(3), m.group(4)
        return tr("`{module}` expects {expected} input features and was given {got}: build it as "
                  "nn.Linear({got}, {out}) (or nn.LazyLinear({out})), or give it an input whose last "
                  "dimension is {expected}").format(module=name, expected=expected, got=got, out=out)
    if m:
        return tr("the inner sizes must be equal ({a}x{k} and {k2}x{b}): transpose or reshape one operand "
                  "at line {line}").format(a=m.group(1), k=m.group(2), k2=m.group(3), b=m.group(4), line=_line(raised))
    c = re.search(r"expected input\[([\d, ]+)\] to have (\d+) channels, but got (\d+) channels", message)
    if c:
        return tr("`{module}` expects {expected} input channels and was given {got} (input {shape}): build it "
                  "with in_channels={got}, or give it input with {expected} channels (dim 1; channels-last data "
                  "needs .permute(0, 3, 1, 2))").format(
            module=name or "conv", expected=c.group(2), got=c.group(3), shape=f"[{c.group(1)}]")
    return tr("make the operands' sizes agree at line {line} (the shapes above)").format(line=_line(raised))


def _title(r: dict[str, Any]) -> Text:
    title = Text(tr(TITLES.get(r.get("kind", "inplace_saved"), TITLES["inplace_saved"])), style="bold")
    rule = r.get("rule")
    if rule:
        title.append(f"  ({rule} {RULE_NAMES[rule]})" if rule in RULE_NAMES else f"  ({rule})", style="dim")
    return title


def explain_errors_table(r: dict[str, Any]) -> Group:
    """The error explained: where it was raised, the operands, the cause, the fix."""
    t = Table(box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    t.add_column("fact", style="bold cyan", no_wrap=True)
    t.add_column("value")
    kind = r.get("kind", "inplace_saved")
    raised = r.get("raised_at")
    op = r.get("op")
    if raised or op:
        lead = Text.assemble(op["op"], tr(" at ")) if op else Text()
        t.add_row(tr("raised at"), Text.assemble(lead, where(raised or (op or {}).get("location"))))
    if kind == "inplace_saved":
        _inplace_rows(t, r)
    else:
        module = r.get("module")
        if module:
            t.add_row(tr("module"), Text.assemble((module.get("name") or tr("(unnamed)"), "bold"), f"  {module['repr']}"))
        for o in r.get("operands") or []:
            t.add_row(tr("operand {arg}").format(arg=o["arg"]), operand_text(o))
        for label, value in _cause_rows(r):
            t.add_row(label, value)
    fix = fix_text(r)
    if fix:
        t.add_row(tr("fix"), Text(fix, style="green"))
    t.add_row(tr("torch said"), Text(r.get("message", ""), style="dim"))
    parts: list[Any] = [_title(r), t]
    tb = r.get("traceback") or []
    if tb:
        parts.append(Text(tr("Traceback, the script's own frames (most recent call last):"), style="bold"))
        parts.extend(fit.bullet("  ", where(f)) for f in tb)
    return Group(*parts)


def _inplace_rows(t: Table, r: dict[str, Any]) -> None:
    tensor = r.get("tensor")
    if tensor:
        names = _names(tensor["names"]) or tr("no name (the frames that held it have returned)")
        t.add_row(tr("tensor"), tr("{shape} {dtype} {device}; bound to: {names}").format(
            shape=_tuple(tensor["shape"]), dtype=tensor["dtype"], device=tensor["device"], names=names))
    saved = r.get("saved_by")
    if saved:
        t.add_row(tr("saved by"), Text.assemble(_saver(saved), tr(" at "), where(saved.get("location"))))
    for m in r.get("modified_by", []):
        t.add_row(tr("modified by"), Text.assemble(
            tr("{op} (version {before} → {after})").format(op=m["op"], before=m["version_before"], after=m["version_after"]),
            tr(" at "), where(m.get("location"))))
    if saved and not r.get("modified_by"):
        t.add_row(tr("modified by"), Text(tr("not recorded (an in-place op on another thread, or through .data)"),
                                          style="dim"))
    t.add_row(tr("versions"), tr("expected {expected}, actual {actual}").format(
        expected=r.get("expected_version"), actual=r.get("actual_version")))


def print_explain_errors(report: dict[str, Any], console: Console) -> None:
    r = report["explain_errors"]
    tgt = report.get("target") or {}
    if not r["occurred"]:
        if r.get("finished"):
            what = tr("the script finished (exit code {code}) without raising one of the errors explained "
                      "({kinds}).").format(code=r["exit_code"], kinds=tr(KINDS_TEXT))
        else:
            what = tr("the script was still running after {seconds} s (see --timeout) without raising one of "
                      "the errors explained ({kinds}).").format(seconds=f"{r['waited_s']:g}", kinds=tr(KINDS_TEXT))
        console.print(Text.assemble((tr("No error explained: "), "bold green"), what, (pid_torch(tgt), "dim")))
        other = r.get("last_other_error")
        if other:
            console.print(Text(tr("The last other RuntimeError it raised: {message}").format(
                message=other.get("message") or ""), style="dim"))
        return
    console.print(stop_line(report.get("stop") or {}, tgt, raised=True))
    console.print(explain_errors_table(r))
