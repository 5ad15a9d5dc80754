"""Rendering inspection results: rich tables for people, JSON for tools."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stridelens.server.units import human_bytes, plural


def _tuple(v: list[int] | None) -> str:
    if v is None:
        return "—"
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"


def stdout_console() -> Console:
    """The console reports are printed on (132 columns when not a terminal, never wrapped)."""
    return Console(width=None if sys.stdout.isatty() else 132, soft_wrap=False)


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)


def describe_table(expr: str, d: dict[str, Any]) -> Table:
    t = Table(title=f"{expr}  [dim]({d['type']})[/dim]", box=box.SIMPLE_HEAD, show_header=False,
              title_justify="left")
    t.add_column("fact", style="bold cyan")
    t.add_column("value")
    layout = d["layout"] + (f", {d['memory_format']}" if d.get("memory_format") else "")
    t.add_row("shape", _tuple(d["shape"]))
    t.add_row("dtype / device", f"{d['dtype']} / {d['device']}")
    t.add_row("layout", layout)
    t.add_row("strides", _tuple(d["strides"]))
    t.add_row("storage offset", str(d["storage_offset"]))
    t.add_row("contiguous", str(d["contiguous"]))
    t.add_row("size", f"{d['numel']} × {d['element_size']} B = {human_bytes(d['nbytes'])}")
    if d["storage_bytes"] is not None:
        t.add_row("storage", f"{human_bytes(d['storage_bytes'])}  [dim]{d['storage_key']}[/dim]")
    if d["is_view"]:
        b = d["base"]
        named = f"`{b['name']}`, " if b.get("name") else ""
        t.add_row("view of", f"{named}a tensor of shape {_tuple(b['shape'])} (the `_base`)")
    t.add_row("version", str(d["version"]))
    t.add_row("autograd", f"requires_grad={d['requires_grad']} is_leaf={d['is_leaf']} "
                          f"retains_grad={d['retains_grad']}")
    g = d["grad"]
    t.add_row("grad", "None" if g is None else f"{_tuple(g['shape'])} {g['dtype']}, {human_bytes(g['nbytes'])}")
    if d["grad_fn"]:
        chain = " → ".join(n["name"] for n in d["grad_fn_chain"][:8])
        t.add_row("grad_fn", chain + (" …" if len(d["grad_fn_chain"]) > 8 else ""))
        gr = d["graph"]
        t.add_row("graph holds", f"{human_bytes(gr['saved_bytes'])} in {gr['saved_storages']} saved storages "
                                 f"({plural(gr['nodes'], 'node')})")
    c = d.get("cuda")
    if c:
        share = f", this storage {100 * c['share']:.1f}%" if c.get("share") else ""
        t.add_row("CUDA", f"{c['device']}: allocated {human_bytes(c['allocated'])}, reserved "
                          f"{human_bytes(c['reserved'])}, peak {human_bytes(c['peak'])}{share}")
    s = d.get("stats")
    if s:
        t.add_row("values", ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()))
    for note in d.get("notes", []):
        t.add_row("note", Text(note, style="yellow"))
    return t


def frame_table(r: dict[str, Any]) -> Group:
    t = Table(title="Tensors in this frame, grouped by storage", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("storage", "tensor", "shape", "dtype", "strides", "offset", "contig.", "view of", "grad_fn"):
        t.add_column(col, no_wrap=col in ("storage", "shape", "strides"))
    for g in r["groups"]:
        for i, m in enumerate(g["tensors"]):
            t.add_row(
                f"{human_bytes(g['storage_bytes'])} {g['device']}" if i == 0 else "",
                Text(m["name"], style="bold"), _tuple(m["shape"]), m["dtype"], _tuple(m["strides"]),
                str(m["storage_offset"]), "yes" if m["contiguous"] else "no",
                (m["view_of"] or "(unnamed)") if m["is_view"] else "", m["grad_fn"] or "",
            )
    lines = [Text(f"• {g['summary']}") for g in r["groups"] if len(g["tensors"]) > 1 or g["tensors"][0]["is_view"]]
    lines += [Text(f"• {x['name']}: {x['layout']} tensor, {x['note']}", style="yellow") for x in r["no_storage"]]
    total = Text(f"{plural(r['tensor_count'], 'tensor')}, {plural(len(r['groups']), 'storage')}, {human_bytes(r['total_bytes'])}",
                 style="dim")
    return Group(t, *lines, total)


def memory_tables(r: dict[str, Any]) -> Group:
    dev = Table(title="Live tensors per device", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("device", "tensors", "storages", "bytes", "graph-only", "allocator"):
        dev.add_column(col, justify="left" if col == "device" else "right")
    for d in r["devices"]:
        alloc = f"{human_bytes(d['allocated'])} allocated" if "allocated" in d else ""
        dev.add_row(str(d["device"]), str(d["tensors"]), str(d["storages"]), human_bytes(d["bytes"]),
                    human_bytes(d["graph_only_bytes"]), alloc)
    top = Table(title=f"Largest storages (top {len(r['top'])})", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("bytes", "device", "used", "held by"):
        top.add_column(col, justify="right" if col in ("bytes", "used") else "left")
    for g in r["top"]:
        held = ", ".join(g["names"][:4]) + (" …" if len(g["names"]) > 4 else "")
        extra = []
        if g["unnamed"]:
            extra.append(f"{g['unnamed']} unnamed")
        if g["saved_by_graph"]:
            extra.append("saved by an autograd graph")
        held = "; ".join(x for x in [held, *extra] if x)
        top.add_row(human_bytes(g["bytes"]), str(g["device"]), human_bytes(g["used_bytes"]), held)
    parts: list[Any] = [dev, top]
    if r["findings"]:
        parts.append(Text("Findings", style="bold"))
        for f in r["findings"]:
            parts.append(Text.assemble(("  ⚠ ", "bold red"), (f["kind"], "bold"), ": ", f["message"]))
    else:
        parts.append(Text("No leak patterns found.", style="green"))
    parts.append(Text(f"{plural(r['tensor_count'], 'live tensor')}, {plural(r['storage_count'], 'storage')}, "
                      f"{plural(r['graph_roots'], 'graph root')} ({plural(r['graph_nodes'], 'node')} walked)", style="dim"))
    return Group(*parts)


def print_text(report: dict[str, Any], console: Console) -> None:
    stop = report.get("stop") or {}
    tgt = report.get("target") or {}
    where = f"{stop.get('path')}:{stop.get('line')}" if stop.get("path") else "?"
    console.print(Text.assemble(("stopped ", "dim"), (f"({stop.get('reason')}) ", "dim"), (where, "bold"),
                                (f" in {stop.get('function')}", "dim"),
                                (f"  — pid {tgt.get('pid')}, torch {tgt.get('torch')}", "dim")))
    for item in report.get("expressions", []):
        if "error" in item:
            console.print(Text(f"{item['expr']}: {item['error']}", style="red"))
        else:
            console.print(describe_table(item["expr"], item["result"]))
    if "frame" in report:
        console.print(frame_table(report["frame"]))
    if "memory" in report:
        console.print(memory_tables(report["memory"]))


def _where(loc: dict[str, Any] | None) -> Text:
    if not loc:
        return Text("(line not recorded)", style="dim")
    path = loc["path"]
    with contextlib.suppress(ValueError):  # another drive (Windows)
        rel = os.path.relpath(path)
        path = path if rel.startswith("..") else rel
    return Text.assemble((f"{path}:{loc['line']}", "bold"), (f" in {loc['function']}", "dim"),
                         (f"  {loc['code']}" if loc.get("code") else "", "cyan"))


def explain_errors_table(r: dict[str, Any]) -> Group:
    """The in-place error explained: tensor, saving op, in-place op(s), versions."""
    t = Table(title="In-place modification of a tensor autograd saved for backward", box=box.SIMPLE_HEAD,
              show_header=False, title_justify="left")
    t.add_column("fact", style="bold cyan")
    t.add_column("value")
    tensor = r.get("tensor")
    if tensor:
        names = ", ".join(f"{n['name']}" + ("" if n["same_window"] else f" (a view {_tuple(n['shape'])})")
                          + f" in {n['function']}" for n in tensor["names"]) or "no name (the frames that held it have returned)"
        t.add_row("tensor", f"{_tuple(tensor['shape'])} {tensor['dtype']} {tensor['device']}; bound to: {names}")
    saved = r.get("saved_by")
    if saved:
        what = "its output" if saved["as"].startswith("result") else f"its input `{saved['as']}`"
        op = f"{saved['op']} ({saved['node']} keeps {what})" if saved.get("op") else saved["node"]
        t.add_row("saved by", Text.assemble(op, " at ", _where(saved.get("location"))))
    for m in r.get("modified_by", []):
        t.add_row("modified by", Text.assemble(f"{m['op']} (version {m['version_before']} → {m['version_after']}) at ",
                                               _where(m.get("location"))))
    if saved and not r.get("modified_by"):
        t.add_row("modified by", Text("not recorded (an in-place op on another thread, or through .data)",
                                      style="dim"))
    t.add_row("versions", f"expected {r.get('expected_version')}, actual {r.get('actual_version')}")
    t.add_row("torch said", Text(r.get("message", ""), style="dim"))
    return Group(t)


def print_explain_errors(report: dict[str, Any], console: Console) -> None:
    r = report["explain_errors"]
    tgt = report.get("target") or {}
    if not r["occurred"]:
        if r.get("finished"):
            what = f"the script finished (exit code {r['exit_code']})"
        else:
            what = f"the script was still running after {r['waited_s']:g} s (see --timeout)"
        console.print(Text.assemble(
            ("No in-place error: ", "bold green"),
            f"{what} without raising 'one of the variables needed for gradient computation has been "
            "modified by an inplace operation'.", (f"  — pid {tgt.get('pid')}, torch {tgt.get('torch')}", "dim")))
        return
    stop = report.get("stop") or {}
    console.print(Text.assemble(("raised at ", "dim"), (f"{stop.get('path')}:{stop.get('line')}", "bold"),
                                (f" in {stop.get('function')}", "dim"),
                                (f"  — pid {tgt.get('pid')}, torch {tgt.get('torch')}", "dim")))
    console.print(explain_errors_table(r))
