"""Rendering inspection results: rich tables for people, JSON for tools."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stridelens.i18n import ntr, tr
from stridelens.inspector import fit, probe_report
from stridelens.inspector.target_text import from_target
from stridelens.server.units import human_bytes


def _tuple(v: list[int] | None) -> str:
    if v is None:
        return "—"
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"


def stdout_console(wide: bool = False) -> Console:
    """The console reports are printed on: COLUMNS, the terminal's width or 80; --wide: no limit."""
    return fit.stdout_console(wide)


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)


def describe_table(expr: str, d: dict[str, Any]) -> Table:
    t = Table(title=f"{expr}  [dim]({d['type']})[/dim]", box=box.SIMPLE_HEAD, show_header=False,
              title_justify="left")
    t.add_column("fact", style="bold cyan")
    t.add_column("value")
    layout = d["layout"] + (f", {d['memory_format']}" if d.get("memory_format") else "")
    t.add_row(tr("shape"), _tuple(d["shape"]))
    t.add_row(tr("dtype / device"), f"{d['dtype']} / {d['device']}")
    t.add_row(tr("layout"), layout)
    t.add_row(tr("strides"), _tuple(d["strides"]))
    t.add_row(tr("storage offset"), str(d["storage_offset"]))
    t.add_row(tr("contiguous"), str(d["contiguous"]))
    t.add_row(tr("size"), f"{d['numel']} × {d['element_size']} B = {human_bytes(d['nbytes'])}")
    if d["storage_bytes"] is not None:
        t.add_row(tr("storage"), f"{human_bytes(d['storage_bytes'])}  [dim]{d['storage_key']}[/dim]")
    if d["is_view"]:
        b = d["base"]
        if b.get("name"):
            base = tr("`{name}`, a tensor of shape {shape} (the `_base`)").format(name=b["name"], shape=_tuple(b["shape"]))
        elif b.get("shares_with"):
            # `t = a.t()` of `a = arange(12).reshape(3, 4)`: `t._base` is the arange result, not `a`.
            base = tr("an unnamed tensor of shape {shape} (the `_base`); shares the storage of `{name}`").format(
                name=b["shares_with"], shape=_tuple(b["shape"]))
        else:
            base = tr("a tensor of shape {shape} (the `_base`)").format(shape=_tuple(b["shape"]))
        t.add_row(tr("view of"), base)
    t.add_row(tr("version"), str(d["version"]))
    t.add_row("autograd", f"requires_grad={d['requires_grad']} is_leaf={d['is_leaf']} "
                          f"retains_grad={d['retains_grad']}")
    g = d["grad"]
    t.add_row("grad", "None" if g is None else f"{_tuple(g['shape'])} {g['dtype']}, {human_bytes(g['nbytes'])}")
    if d["grad_fn"]:
        chain = " → ".join(n["name"] for n in d["grad_fn_chain"][:8])
        t.add_row("grad_fn", chain + (" …" if len(d["grad_fn_chain"]) > 8 else ""))
        gr = d["graph"]
        t.add_row(tr("graph holds"), ntr("{bytes} in {n} saved storage ({nodes})", "{bytes} in {n} saved storages ({nodes})",
                                         gr["saved_storages"]).format(
            bytes=human_bytes(gr["saved_bytes"]), n=gr["saved_storages"],
            nodes=ntr("{n} node", "{n} nodes", gr["nodes"]).format(n=f"{gr['nodes']:,}")))
    c = d.get("cuda")
    if c:
        numbers = tr("{device}: allocated {allocated}, reserved {reserved}, peak {peak}").format(
            device=c["device"], allocated=human_bytes(c["allocated"]), reserved=human_bytes(c["reserved"]),
            peak=human_bytes(c["peak"]))
        if c.get("share"):
            numbers += tr(", this storage {percent}%").format(percent=f"{100 * c['share']:.1f}")
        t.add_row("CUDA", numbers)
    s = d.get("stats")
    if s:
        t.add_row(tr("values"), ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items()))
    for note in d.get("notes", []):
        t.add_row(tr("note"), Text(from_target(note), style="yellow"))
    return t


def group_summary(g: dict[str, Any]) -> str:
    """The probe's summary of a storage group (`_group_summary`), in the current language."""
    names = [m["name"] for m in g["tensors"]]
    nbytes = g["storage_bytes"]
    if len(names) == 1:
        head = (tr("{name} uses one {n}-byte storage") if nbytes < 10240 else tr("{name} uses one {size} storage"))
    else:
        head = (tr("{names} share one {n}-byte storage") if nbytes < 10240 else tr("{names} share one {size} storage"))
    parts = [head.format(name=names[0], names=", ".join(names), n=nbytes, size=human_bytes(nbytes))]
    for m in g["tensors"]:
        if m["is_view"] and m["view_of"]:
            parts.append(tr("{name} is a view of {base} at offset {offset}").format(
                name=m["name"], base=m["view_of"], offset=m["storage_offset"]))
        elif m["is_view"] and m.get("shares_storage_of"):
            parts.append(tr("{name} is a view of an unnamed base at offset {offset} (it shares the storage of "
                            "{other}, not a view of it)").format(
                name=m["name"], other=m["shares_storage_of"], offset=m["storage_offset"]))
        elif m["is_view"]:
            parts.append(tr("{name} is a view of {base} at offset {offset}").format(
                name=m["name"], base=tr("an unnamed base"), offset=m["storage_offset"]))
    written = max((m["version"] or 0) for m in g["tensors"])
    if written and len(names) > 1:
        parts.append(ntr("written in place {n} time (every tensor sharing it sees the change)",
                         "written in place {n} times (every tensor sharing it sees the change)", written).format(n=written))
    return tr("; ").join(parts)


def _frame_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    groups = r["groups"]
    rows: list[dict[str, Any]] | None = r.get("rows")
    if rows is None or sum(row["count"] for row in rows) != len(groups) or any(row["at"] >= len(groups) for row in rows):
        rows = [{"at": i, "count": 1, "name": None, "aliases": []} for i in range(len(groups))]
    return rows


def item_runs(r: dict[str, Any]) -> list[tuple[int, dict[str, Any], str | None]]:
    """(count, first group, name) per frame-table row, as the probe grouped them (its `rows`:
    `losses[0]` … `losses[19]` alike are one row `losses[0..19]`; the VS Code panel shows the same)."""
    return [(row["count"], r["groups"][row["at"]], row["name"]) for row in _frame_rows(r)]


def frame_table(r: dict[str, Any]) -> Group:
    t = Table(title=tr("Tensors in this frame, grouped by storage"), box=box.SIMPLE_HEAD, title_justify="left")
    for col, wrap in ((tr("storage"), False), (tr("tensor"), True), (tr("shape"), False), ("dtype", True),
                      (tr("strides"), False), (tr("offset"), True), (tr("contig."), True), (tr("view of"), True),
                      ("grad_fn", True)):
        t.add_column(col, no_wrap=not wrap)
    for n, g, name in item_runs(r):
        # A run is one row: its items are alike (another name of one of them: a line below).
        for i, m in enumerate(g["tensors"] if name is None else g["tensors"][:1]):
            size = f"{human_bytes(g['storage_bytes'])} {g['device']}"
            t.add_row(
                (size if n == 1 else f"{n} × {size}") if i == 0 else "",
                Text(name or m["name"], style="bold"), _tuple(m["shape"]), m["dtype"], _tuple(m["strides"]),
                str(m["storage_offset"]), tr("yes") if m["contiguous"] else tr("no"),
                (m["view_of"] or tr("(unnamed)")) if m["is_view"] else "", m["grad_fn"] or "",
            )
    # An item of a run with other names (`loss` is `losses[19]`: one tensor) says so, in place
    # of its group's summary.
    aliases = [a for row in _frame_rows(r) for a in row.get("aliases", ())]
    in_runs = {item for _, item in aliases}
    lines: list[Any] = [fit.bullet("• ", group_summary(g)) for g in r["groups"]
                        if (len(g["tensors"]) > 1 or g["tensors"][0]["is_view"])
                        and not in_runs.intersection(m["name"] for m in g["tensors"])]
    lines += [fit.bullet("• ", tr("{name} is {item}").format(name=name, item=item)) for name, item in aliases]
    lines += [fit.bullet("• ", (tr("{name}: {layout} tensor, {note}").format(
        name=x["name"], layout=x["layout"], note=from_target(x["note"])), "yellow")) for x in r["no_storage"]]
    total = Text(tr("{tensors}, {storages}, {bytes}").format(
        tensors=ntr("{n} tensor", "{n} tensors", r["tensor_count"]).format(n=f"{r['tensor_count']:,}"),
        storages=ntr("{n} storage", "{n} storages", len(r["groups"])).format(n=f"{len(r['groups']):,}"),
        bytes=human_bytes(r["total_bytes"])), style="dim")
    drop = [tr("offset"), tr("contig."), "grad_fn", "dtype", tr("view of")]
    return Group(fit.Fit(t, drop), *lines, total)


def held_by(g: dict[str, Any], row: dict[str, Any] | None = None) -> str:
    """The top table's "held by" of top entry `g`, shown for the probe's row `row` (several alike
    entries: the graphs of `losses[0..7]`)."""
    names = [f"`{n}`" for n in g["names"][:4]]
    held = ", ".join(names) + (" …" if len(g["names"]) > 4 else "")
    extra = []
    root = (row or {}).get("graph_root") or g.get("graph_root")
    if g["saved_by_graph"] and root:
        graphs = (row or {}).get("graphs", 1)
        line = g.get("graph_line")
        if graphs <= 1:
            text = tr("saved by `{root}`'s graph, from line {line}") if line else tr("saved by `{root}`'s graph")
        else:
            text = (tr("saved by `{root}`'s {n} graphs, from line {line}") if line else
                    tr("saved by `{root}`'s {n} graphs"))
        extra.append(text.format(root=root, n=graphs, line=line))
    else:
        if g["unnamed"]:
            extra.append(tr("{n} unnamed").format(n=g["unnamed"]))
        if g["saved_by_graph"]:
            extra.append(tr("saved by an autograd graph"))
    return tr("; ").join(x for x in [held, *extra] if x)


def top_rows(r: dict[str, Any]) -> list[tuple[int, dict[str, Any], str]]:
    """(count, first entry, held by) per top-table row, as the probe grouped them (its `top_rows`):
    eight storages of 256 KiB that one graph saved read `8 × 256.0 KiB … saved by `loss`'s graph,
    from line 21`; the VS Code panel reads the same rows."""
    top = r["top"]
    rows = r.get("top_rows")
    if rows is None or sum(row["count"] for row in rows) != len(top) or any(row["at"] >= len(top) for row in rows):
        rows = probe_report.group_top_rows(top)  # `top` cut after the probe grouped it (snapshots, ranks)
    return [(row["count"], top[row["at"]], held_by(top[row["at"]], row)) for row in rows]


def memory_tables(r: dict[str, Any]) -> Group:
    with_alloc = any("allocated" in d for d in r["devices"])
    dev = Table(title=tr("Live tensors per device"), box=box.SIMPLE_HEAD, title_justify="left")
    cols = [tr("device"), tr("tensors"), tr("storages"), tr("bytes"), tr("graph-saved")]
    for i, col in enumerate([*cols, tr("allocator")] if with_alloc else cols):
        dev.add_column(col, justify="left" if i == 0 else "right")
    for d in r["devices"]:
        row = [str(d["device"]), str(d["tensors"]), str(d["storages"]), human_bytes(d["bytes"]),
               human_bytes(d.get("graph_saved_bytes", d["graph_only_bytes"]))]
        if with_alloc:
            row.append(tr("{bytes} allocated").format(bytes=human_bytes(d["allocated"])) if "allocated" in d else "")
        dev.add_row(*row)
    graph_only = sum(d["graph_only_bytes"] for d in r["devices"])
    saved = sum(d.get("graph_saved_bytes", d["graph_only_bytes"]) for d in r["devices"])
    notes: list[Any] = [] if not saved else [Text(tr(
        "graph-saved: storages that live autograd graphs keep for backward ({bytes} of them held by nothing else: "
        "no tensor object has them)").format(bytes=human_bytes(graph_only)), style="dim")]
    if not with_alloc:
        notes.append(Text(tr("No allocator column: CUDA is not initialised in the target (CPU tensors have no "
                             "caching-allocator count; --cuda-summary shows the process RSS)"), style="dim"))
    top = Table(title=tr("Largest storages (top {n})").format(n=len(r["top"])), box=box.SIMPLE_HEAD,
                title_justify="left")
    for i, col in enumerate((tr("bytes"), tr("device"), tr("used"), tr("held by"))):
        top.add_column(col, justify="right" if i in (0, 2) else "left")
    for n, g, held in top_rows(r):
        size = human_bytes(g["bytes"]) if n == 1 else f"{n} × {human_bytes(g['bytes'])}"
        # Text, not markup: `opt.state[model.fc.weight]['exp_avg']` is no style tag.
        top.add_row(size, str(g["device"]), human_bytes(g["used_bytes"]), Text(held))
    parts: list[Any] = [fit.Fit(dev, [tr("tensors"), tr("storages")]), *notes,
                        fit.Fit(top, [tr("device"), tr("used")])]
    if r["findings"]:
        parts.append(Text(tr("Findings"), style="bold"))
        for f in r["findings"]:
            parts.append(fit.bullet(("  ⚠ ", "bold red"), (f["kind"], "bold"), tr(": "), from_target(f["message"])))
    else:
        parts.append(Text(tr("No leak patterns found."), style="green"))
    parts.append(Text(tr("{tensors}, {storages}, {roots} ({nodes} walked)").format(
        tensors=ntr("{n} live tensor", "{n} live tensors", r["tensor_count"]).format(n=f"{r['tensor_count']:,}"),
        storages=ntr("{n} storage", "{n} storages", r["storage_count"]).format(n=f"{r['storage_count']:,}"),
        roots=ntr("{n} graph root", "{n} graph roots", r["graph_roots"]).format(n=f"{r['graph_roots']:,}"),
        nodes=ntr("{n} node", "{n} nodes", r["graph_nodes"]).format(n=f"{r['graph_nodes']:,}")), style="dim"))
    return Group(*parts)


def stop_line(stop: dict[str, Any], target: dict[str, Any], raised: bool = False) -> Text:
    """`stopped (breakpoint) train.py:42 in step  — pid 4242, torch 2.5.1`."""
    where = f"{stop.get('path')}:{stop.get('line')}" if stop.get("path") else "?"
    lead = tr("raised at ") if raised else tr("stopped ({reason}) ").format(reason=stop.get("reason"))
    return Text.assemble((lead, "dim"), (where, "bold"),
                         (tr(" in {function}").format(function=stop.get("function")), "dim"),
                         (pid_torch(target), "dim"))


def pid_torch(target: dict[str, Any]) -> str:
    return tr("  — pid {pid}, torch {torch}").format(pid=target.get("pid"), torch=target.get("torch"))


def print_text(report: dict[str, Any], console: Console) -> None:
    console.print(stop_line(report.get("stop") or {}, report.get("target") or {}))
    for item in report.get("expressions", []):
        if "error" in item:
            console.print(Text(f"{item['expr']}: {item['error']}", style="red"))
        else:
            console.print(describe_table(item["expr"], item["result"]))
    if "frame" in report:
        console.print(frame_table(report["frame"]))
    if "memory" in report:
        console.print(memory_tables(report["memory"]))
