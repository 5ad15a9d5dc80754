"""`inspect --grads` and `inspect --graph EXPR`: the flags, the calls into the gradient probe
(`grads_probe.py`, run in the debuggee) and the reports built from its answers.

Gradient health (`--grads`): one row per named parameter of the frame's modules. Layers (the
module that owns a parameter) are compared with their neighbour in module order, layer by
layer, with one rule (`COLLAPSE`, `EXPLODE`):

    for each pair of adjacent layers (a, b) of one model whose gradients are finite and not
    all zero, r = |grad a| / |grad b| (|grad| of a layer: the L2 norm over its parameters);
    r < 1e-3: gradients collapse at a; r > 1e3: they explode at a.

Module order is taken as forward order, so b is the layer backward reaches a from: the layer
named is the first one (walking back from the loss) whose gradient is a thousandth (or a
thousand times) of what flows into it. Parameters without a gradient, NaN/Inf gradients and
all-zero gradients are findings of their own and left out of the comparison.

The graph tree (`--graph EXPR`): the grad_fn DAG behind the tensor, one node per line. A node
with one child continues on the next line at the same indent (a chain); chains longer than
`FOLD_OVER` fold into one "… N more" line; a node reached twice is printed once with a label
(`[3]`) and referenced (`→ [3]`) where it is reached again; AccumulateGrad leaves (and the
`TBackward0` in front of a weight) are written after their consumer as `← name`.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections import Counter
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stridelens.i18n import N_, ntr, tr
from stridelens.inspector import fit, grads_probe
from stridelens.inspector.target_text import from_target
from stridelens.server.units import human_bytes

COLLAPSE = 1e-3  # |grad layer| / |grad next layer| below this: gradients collapse there
EXPLODE = 1e3  # ... above this: they explode there
STACK_STEP = 0.5  # a stack vanishes where each layer's norm is below this times the next one's ...
STACK_LAYERS = 4  # ... over this many layers or more ...
STACK_SPAN = 1e-2  # ... and by a hundredth or less over the whole stack
OUTLIER_DECADES = 2.0  # a layer's grad/weight ratio this many decades off both neighbours'
DEAD_UNITS = 0.25  # this fraction of a layer's units without any gradient is worth a finding
RELUS = ("ReLU", "ReLU6")  # activations whose zero slope below 0 kills units
FOLD_OVER = 10  # chains longer than this fold
FOLD_KEEP = (4, 3)  # nodes shown before and after the fold
SAVED_SHOWN = 4  # saved tensors listed per node


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grads", action="store_true",
                   help=tr("gradient health of the frame's nn.Modules: per parameter grad norm, grad/weight "
                        "ratio, NaN/Inf, zeros, missing grads; names the layer where norms collapse or "
                        "explode (reads gradient values)"))
    p.add_argument("--graph", action="append", default=[], metavar="EXPR",
                   help=tr("the autograd graph behind the tensor EXPR as a tree: ops, saved tensors and "
                        "their bytes, leaf parameters by name (repeatable)"))


def requested(args: argparse.Namespace) -> bool:
    return bool(args.grads or args.graph)


def _call(s: Any, call: str) -> Any:
    return s.call_probe(call, module=grads_probe.PRIVATE_NAME)


def collect(s: Any, args: argparse.Namespace, report: dict[str, Any]) -> bool:
    """Add `grads` / `graphs` to the report (the probe is already injected); True if one failed."""
    from stridelens.inspector.session import InspectError, TargetGone

    if not requested(args):
        return False
    s.inject(grads_probe.__file__, grads_probe.PRIVATE_NAME, grads_probe.FILENAME)
    failed = False
    if args.grads:
        s.progress(tr("reading gradients"))
        report["grads"] = analyze(_call(s, "grads_json(globals(), locals())"))
    if args.graph:
        report["graphs"] = []
        for expr in args.graph:
            try:
                report["graphs"].append(tree_summary(_call(s, f"graph_tree_json({expr!r}, globals(), locals())")))
            except TargetGone:
                raise
            except InspectError as e:
                failed = True
                report["graphs"].append({"expr": expr, "error": str(e)})
    return failed


# ---------------------------------------------------------------- --grads: analysis


def _layer_status(params: list[dict[str, Any]]) -> str:
    if any((r["nan"] or 0) + (r["inf"] or 0) for r in params):
        return "nonfinite"
    with_grad = [r for r in params if r["grad"]]
    if not with_grad:
        return "frozen" if all(not r["requires_grad"] for r in params) else "no_grad"
    if all(r["zeros"] == r["numel"] for r in with_grad if r["zeros"] is not None) and \
            all(r["zeros"] is not None for r in with_grad):
        return "zero"
    return "ok"


def analyze(g: dict[str, Any]) -> dict[str, Any]:
    """Ranks, layers and findings from the probe's rows (kept in module order)."""
    rows: list[dict[str, Any]] = g["params"]
    ranked = sorted((r for r in rows if r["grad_norm"] is not None), key=lambda r: -r["grad_norm"])
    for r in rows:
        r["rank"] = None
    for k, r in enumerate(ranked, 1):
        r["rank"] = k
    by_layer: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_layer.setdefault(r["layer"], []).append(r)
    layers = []
    kinds = g.get("layer_kinds") or {}
    for name, ps in by_layer.items():
        norms = [r["grad_norm"] for r in ps if r["grad_norm"] is not None]
        weights = [r["weight_norm"] for r in ps if r["grad_norm"] is not None and r["weight_norm"] is not None]
        gn = math.sqrt(sum(n * n for n in norms)) if norms else None
        wn = math.sqrt(sum(n * n for n in weights)) if weights else None
        units = [(r["dead_units"], r["units"]) for r in ps if r.get("dead_units") is not None]
        kind = kinds.get(name) or {}
        layers.append({"layer": name, "model": ps[0]["model"], "params": [r["name"] for r in ps],
                       "grad_norm": gn, "weight_norm": wn, "ratio": gn / wn if gn is not None and wn else None,
                       "type": kind.get("type"), "activation": kind.get("activation"),
                       "activation_name": kind.get("activation_name"),
                       "dead_units": units[0][0] if units else None, "units": units[0][1] if units else None,
                       "status": _layer_status(ps), "ratio_to_next": None, "finding": None})
    findings: list[dict[str, Any]] = []
    for model in g["models"]:
        chain = [L for L in layers if L["model"] == model and L["status"] in ("ok", "zero")
                 and L["grad_norm"] is not None]
        for a, b in itertools.pairwise(chain):
            if not b["grad_norm"]:
                continue  # nothing flows in to compare with
            r = a["grad_norm"] / b["grad_norm"]
            a["ratio_to_next"] = r
            kind = "collapse" if r < COLLAPSE else "explode" if r > EXPLODE else None
            if kind:
                a["finding"] = kind
                text = (tr("gradients collapse at {layer}: grad norm {norm} is {ratio} × that of the next "
                           "layer {next} ({next_norm}); rule: ratio < {limit}") if kind == "collapse" else
                        tr("gradients explode at {layer}: grad norm {norm} is {ratio} × that of the next "
                           "layer {next} ({next_norm}); rule: ratio > {limit}"))
                findings.append({
                    "kind": kind, "layer": a["layer"], "next_layer": b["layer"], "ratio": r,
                    "message": text.format(layer=a["layer"], norm=f"{a['grad_norm']:.3g}", ratio=f"{r:.3g}",
                                           next=b["layer"], next_norm=f"{b['grad_norm']:.3g}",
                                           limit=f"{COLLAPSE if kind == 'collapse' else EXPLODE:g}")})
        findings += _outlier_findings([L for L in layers if L["model"] == model and L["status"] == "ok"
                                       and L["ratio"]])
        findings += _stack_findings([L for L in chain if L["grad_norm"]])
        bad = [r for r in rows if r["model"] == model and (r["nan"] or 0) + (r["inf"] or 0)]
        if bad:
            nearest = bad[-1]
            listed = ", ".join(f"{r['name']} ({r['nan']} NaN, {r['inf']} Inf)" for r in bad[:6]) + (
                " …" if len(bad) > 6 else "")
            findings.append({
                "kind": "nonfinite", "layer": nearest["layer"], "params": [r["name"] for r in bad],
                "message": ntr("NaN/Inf gradients in {n} parameter: {params}; nearest the loss (last in module "
                               "order): {nearest}",
                               "NaN/Inf gradients in {n} parameters: {params}; nearest the loss (last in module "
                               "order): {nearest}", len(bad)).format(
                    n=f"{len(bad):,}", params=listed, nearest=nearest["name"])})
    dead, explained = _dead_relu_findings(layers, g["models"])
    for L in layers:  # an all-zero layer behind a dead ReLU: that finding, not a collapse
        if L["layer"] in explained and L["finding"] == "collapse":
            L["finding"] = None
    findings = [f for f in findings if not (f["kind"] == "collapse" and f["layer"] in explained)] + dead
    zero = [L["layer"] for L in layers if L["status"] == "zero" and L["layer"] not in explained]
    if zero:
        findings.append({"kind": "zero", "layer": zero[0], "layers": zero,
                         "message": tr("every gradient entry is exactly 0 in {layers} (saturated or dead "
                                       "activations, a masked branch, or zero_grad() after backward)").format(
                             layers=", ".join(zero[:6]) + (" …" if len(zero) > 6 else ""))})
    missing = [r for r in rows if not r["grad"] and r["requires_grad"]]
    for reason, text in (("not_in_graph", N_("not in the graph of {graphs}: its output was detached, or it was "
                                             "not used in the forward")),
                         ("in_graph", N_("in the graph of {graphs} but has no grad: backward has not run "
                                         "through it yet, or zero_grad() set it to None")),
                         ("no_graph", N_("never reached by backward: a broken graph (detach, .data, no_grad), "
                                         "unused in the forward, or backward not run yet"))):
        mine = [r for r in missing if r["none_reason"] == reason]
        if mine:
            graphs = ", ".join(f"`{n}`" for n in (mine[0]["graphs"] or g["graph_roots"])[:3]) or tr("the frame")
            findings.append({"kind": "no_grad", "reason": reason, "params": [r["name"] for r in mine],
                             "layer": mine[0]["layer"],
                             "message": ntr("grad is None for {n} parameter ({params}): {why}",
                                            "grad is None for {n} parameters ({params}): {why}", len(mine)).format(
                                 n=f"{len(mine):,}",
                                 params=", ".join(r["name"] for r in mine[:6]) + (" …" if len(mine) > 6 else ""),
                                 why=tr(text).format(graphs=graphs))})
    frozen = [r for r in rows if not r["requires_grad"]]
    finite = [L for L in layers if L["status"] == "ok" and L["grad_norm"]]
    span = None
    if len(finite) >= 2:
        lo = min(finite, key=lambda L: L["grad_norm"])
        hi = max(finite, key=lambda L: L["grad_norm"])
        span = {"smallest": lo["layer"], "smallest_norm": lo["grad_norm"], "largest": hi["layer"],
                "largest_norm": hi["grad_norm"], "decades": math.log10(hi["grad_norm"] / lo["grad_norm"])}
    return {**g, "layers": layers, "findings": findings, "frozen": len(frozen), "span": span,
            "rule": {"collapse_below": COLLAPSE, "explode_above": EXPLODE,
                     "compared_with": "the next layer in module order", "stack_step": STACK_STEP,
                     "stack_span": STACK_SPAN, "outlier_decades": OUTLIER_DECADES, "dead_units": DEAD_UNITS}}


def compact_names(names: list[str]) -> str:
    """Layers as ranges: `model.squash.0.0` ... `model.squash.5.0` -> `model.squash.0–5`,
    `model.0`, `model.2`, `model.4` -> `model.0–4`; other names as they are, comma-separated."""
    out: list[str] = []
    group: list[tuple[str, int]] = []

    def flush() -> None:
        if len(group) >= 2:
            out.append(f"{group[0][0]}.{group[0][1]}–{group[-1][1]}")
        else:
            out.extend(f"{p}.{i}" for p, i in group)
        group.clear()

    for name in names:
        parts = name.split(".")
        at = next((k for k, part in enumerate(parts) if part.isdigit() and k > 0), None)
        if at is None:
            flush()
            out.append(name)
            continue
        prefix, index = ".".join(parts[:at]), int(parts[at])
        if group and (group[-1][0] != prefix or index <= group[-1][1]):
            flush()
        group.append((prefix, index))
    flush()
    return ", ".join(out)


def _group_key(name: str) -> str:
    parts = name.split(".")
    at = next((k for k, part in enumerate(parts) if part.isdigit() and k > 0), None)
    return ".".join(parts[:at]) if at is not None else name


def _stack_findings(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Vanishing / exploding gradients through a stack: within one group of numbered layers
    (`model.squash.0` ... `.5`, or `model.0`, `.2`, ... of one Sequential), consecutive layers whose
    norms shrink (grow) by more than STACK_STEP each step going back from the loss, over
    STACK_LAYERS layers or more and by STACK_SPAN or more in all. A single drop of COLLAPSE is the
    collapse finding; a run that holds a layer already flagged (a ratio outlier) is its finding."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    kind: str | None = None

    def close() -> None:
        if kind is not None and len(run) >= STACK_LAYERS and not any(L["finding"] for L in run[:-1]):
            total = run[0]["grad_norm"] / run[-1]["grad_norm"]
            if (total <= STACK_SPAN) if kind == "vanishing" else (total >= 1 / STACK_SPAN):
                out.append(_stack_finding(kind, list(run), total ** (1 / (len(run) - 1))))

    for a, b in itertools.pairwise(chain):
        r = a["grad_norm"] / b["grad_norm"]
        step = ("vanishing" if COLLAPSE <= r < STACK_STEP else "exploding" if 1 / STACK_STEP < r <= EXPLODE
                else None)
        if step is not None and _group_key(a["layer"]) != _group_key(b["layer"]):
            step = None
        if step is not None and step == kind and run and run[-1] is a:
            run.append(b)
            continue
        close()
        run, kind = ([a, b], step) if step is not None else ([], None)
    close()
    return out


def _stack_finding(kind: str, run: list[dict[str, Any]], per: float) -> dict[str, Any]:
    names = compact_names([L["layer"] for L in run])
    acts = {L["activation"] for L in run if L["activation"]}
    act = f" ({acts.pop()})" if len(acts) == 1 else ""
    first, last = run[0], run[-1]
    decades = abs(math.log10(first["grad_norm"] / last["grad_norm"]))
    if kind == "vanishing":
        text = tr("vanishing gradients through `{layers}`{activation}, ×{per} per block: grad norm {first_norm} at "
                  "{first} against {last_norm} at {last} ({decades} decades over {n} layers); a saturating "
                  "activation (sigmoid's slope is at most 1/4), an init too small, or no normalization or "
                  "residual path between blocks")
    else:
        text = tr("exploding gradients through `{layers}`{activation}, ×{per} per block: grad norm {first_norm} at "
                  "{first} against {last_norm} at {last} ({decades} decades over {n} layers); an init too large "
                  "for the depth, no normalization between blocks: scale the init down, normalize, or clip "
                  "(clip_grad_norm_)")
    return {"kind": kind, "layer": first["layer"], "layers": [L["layer"] for L in run], "per_block": per,
            "activation": act.strip(" ()") or None,
            "message": text.format(layers=names, activation=act, per=f"{per:.2g}", first_norm=f"{first['grad_norm']:.2g}",
                                   first=first["layer"], last_norm=f"{last['grad_norm']:.2g}", last=last["layer"],
                                   decades=f"{decades:.1f}", n=len(run))}


def _outlier_findings(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A layer whose grad/weight ratio is OUTLIER_DECADES or more above, or below, both its
    neighbours' (in module order, layers with finite, nonzero gradients): its effective step
    size is that much larger or smaller than theirs."""
    out: list[dict[str, Any]] = []
    for prev, mid, nxt in zip(chain, chain[1:], chain[2:], strict=False):
        if mid["finding"]:  # a collapse or an explosion there says more
            continue
        d_prev = math.log10(mid["ratio"] / prev["ratio"])
        d_next = math.log10(mid["ratio"] / nxt["ratio"])
        if min(abs(d_prev), abs(d_next)) >= OUTLIER_DECADES and (d_prev > 0) == (d_next > 0):
            mid["finding"] = "ratio_outlier"
            times = 10 ** min(abs(d_prev), abs(d_next))  # at least this much off each neighbour
            text = (tr("the grad/weight ratio of {layer} ({ratio}) is {times}× below its neighbours' ({prev} "
                       "{prev_ratio}, {next} {next_ratio}): with one learning rate it barely moves; check its init "
                       "and scale (weights of norm {weight_norm})") if d_prev < 0 else
                    tr("the grad/weight ratio of {layer} ({ratio}) is {times}× above its neighbours' ({prev} "
                       "{prev_ratio}, {next} {next_ratio}): with one learning rate it moves far more than they do; "
                       "check its init and scale (weights of norm {weight_norm})"))
            out.append({"kind": "ratio_outlier", "layer": mid["layer"], "ratio": mid["ratio"],
                        "neighbours": [prev["layer"], nxt["layer"]],
                        "message": text.format(
                            layer=mid["layer"], ratio=f"{mid['ratio']:.2g}", times=f"{times:,.0f}",
                            prev=prev["layer"], prev_ratio=f"{prev['ratio']:.2g}", next=nxt["layer"],
                            next_ratio=f"{nxt['ratio']:.2g}", weight_norm=f"{mid['weight_norm']:.3g}")})
    return out


def _dead_relu_findings(layers: list[dict[str, Any]], models: list[str]) -> tuple[list[dict[str, Any]], set[str]]:
    """Dead ReLUs: a layer whose every gradient entry is 0 and whose output goes through a ReLU
    (the ReLU passes nothing back: its inputs were all below 0), with the all-zero layers before
    it that it starves; and layers with DEAD_UNITS or more of their units dead behind a ReLU
    (their weight-gradient rows all 0)."""
    out: list[dict[str, Any]] = []
    explained: set[str] = set()
    for model in models:
        mine = [L for L in layers if L["model"] == model]
        for i in reversed(range(len(mine))):  # from the loss back: the first all-zero layer met is the dead one
            L = mine[i]
            if L["status"] == "zero" and L["activation"] in RELUS and L["layer"] not in explained:
                before: list[str] = []
                for P in reversed(mine[:i]):
                    if P["status"] != "zero":
                        break
                    before.insert(0, P["layer"])
                explained.update([L["layer"], *before])
                text = tr("dead ReLU: every gradient of {layer} is 0: the {activation} after it ({relu}) outputs 0 for "
                          "every input of this batch (its inputs are all below 0), so nothing flows back through it"
                          "{starved}; a large negative bias, a learning rate too high, or inputs not normalized")
                starved = (tr(", nor to the layers before it ({layers})").format(layers=compact_names(before))
                           if before else "")
                out.append({"kind": "dead_relu", "layer": L["layer"], "relu": L["activation_name"],
                            "layers": [*before, L["layer"]],
                            "message": text.format(layer=L["layer"], activation=L["activation"],
                                                   relu=L["activation_name"], starved=starved)})
            elif (L["status"] == "ok" and L["activation"] in RELUS and L["dead_units"] and L["units"]
                  and L["dead_units"] / L["units"] >= DEAD_UNITS):
                out.append({"kind": "dead_units", "layer": L["layer"], "relu": L["activation_name"],
                            "dead_units": L["dead_units"], "units": L["units"],
                            "message": tr("{dead} of {units} units of {layer} get no gradient (their weight-gradient "
                                          "rows are all 0): the {activation} after it ({relu}) never fired for them "
                                          "on this batch (dead units)").format(
                                dead=L["dead_units"], units=L["units"], layer=L["layer"], activation=L["activation"],
                                relu=L["activation_name"])})
    return out, explained


# ---------------------------------------------------------------- --graph: summary


def tree_summary(t: dict[str, Any]) -> dict[str, Any]:
    nodes = t["nodes"]
    saved = [s for n in nodes for s in n["saved"]]
    t["saved_tensors"] = len(saved)
    t["saved_storages"] = sum(1 for s in saved if s["counted"])
    t["saved_bytes"] = sum(s["storage_bytes"] for s in saved if s["counted"])
    t["leaves"] = sum(1 for n in nodes if n["leaf"] is not None)
    return t


# ---------------------------------------------------------------- text


def _shape(v: list[int] | None) -> str:
    if v is None:
        return "?"
    return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.3g}"


STATE_TEXT = {"collapse": N_("collapses here"), "explode": N_("explodes here"), "vanishing": N_("vanishing"),
              "exploding": N_("exploding"), "ratio_outlier": N_("ratio far off"), "dead_relu": N_("dead ReLU"),
              "dead_units": N_("dead units")}
_NONE_TEXT = {"frozen": N_("frozen"), "in_graph": N_("None (in graph, not reached yet)"),
              "not_in_graph": N_("None (not in the graph)"), "no_graph": N_("None (never reached)")}


def grads_group(r: dict[str, Any]) -> Group:
    t = Table(title=tr("Gradient health (module order; # ranks the grad norms, 1 = largest)"),
              box=box.SIMPLE_HEAD, title_justify="left")
    for col, right, no_wrap in (("#", True, False), (tr("parameter"), False, True), (tr("shape"), False, True),
                                (tr("grad norm"), True, False), ("grad/weight", True, False), ("NaN", True, False),
                                ("Inf", True, False), (tr("zeros"), True, False), ("grad", False, False)):
        t.add_column(col, justify="right" if right else "left", no_wrap=no_wrap)
    flagged: dict[str, str] = {}
    for f in r["findings"]:
        if f["kind"] in STATE_TEXT:
            for layer in f.get("layers") if f["kind"] in ("vanishing", "exploding", "dead_relu") else [f["layer"]]:
                flagged.setdefault(layer, f["kind"])
    for p in r["params"]:
        bad = (p["nan"] or 0) + (p["inf"] or 0)
        if not p["grad"]:
            state = Text(tr(_NONE_TEXT.get(p["none_reason"] or "", "None")), style="dim" if
                         p["none_reason"] == "frozen" else "yellow")
        elif bad:
            state = Text("NaN/Inf", style="bold red")
        elif p["layer"] in flagged:
            state = Text(tr(STATE_TEXT[flagged[p["layer"]]]), style="bold red")
        else:
            state = Text(tr("ok"), style="green")
        t.add_row(str(p["rank"] or ""), Text(p["name"], style="bold"), _shape(p["shape"]),
                  _num(p["grad_norm"]) if not bad else Text("NaN" if p["nan"] else "Inf", style="red"),
                  _num(p["ratio"]),
                  "" if p["nan"] is None else str(p["nan"]), "" if p["inf"] is None else str(p["inf"]),
                  "" if p["zero_fraction"] is None else f"{100 * p['zero_fraction']:.1f}%", state)
    parts: list[Any] = [fit.Fit(t, ["NaN", "Inf", "#", tr("zeros"), tr("shape")])]
    if r["findings"]:
        parts.append(Text(tr("Findings"), style="bold"))
        for f in r["findings"]:
            parts.append(fit.bullet(("  ⚠ ", "bold red"), (f["kind"], "bold"), tr(": "), f["message"]))
    elif r["params"]:
        parts.append(Text(tr("No collapse, explosion, NaN/Inf or missing gradient found."), style="green"))
    sp = r.get("span")
    span = tr("; layer grad norms span {decades} decades ({smallest} {smallest_norm} … {largest} {largest_norm})").format(
        decades=f"{sp['decades']:.1f}", smallest=sp["smallest"], smallest_norm=f"{sp['smallest_norm']:.3g}",
        largest=sp["largest"], largest_norm=f"{sp['largest_norm']:.3g}") if sp else ""
    models = ", ".join(r["models"]) or tr("none")
    parts.append(Text(tr("{params} in {layers} of {modules} ({models}); {frozen} frozen{span}").format(
        params=ntr("{n} parameter", "{n} parameters", len(r["params"])).format(n=f"{len(r['params']):,}"),
        layers=ntr("{n} layer", "{n} layers", len(r["layers"])).format(n=f"{len(r['layers']):,}"),
        modules=ntr("{n} module", "{n} modules", len(r["models"])).format(n=f"{len(r['models']):,}"),
        models=models, frozen=r["frozen"], span=span), style="dim"))
    if not r["params"]:
        parts.insert(0, Text(tr("No nn.Module with parameters in this frame or its globals."), style="yellow"))
    return Group(*parts)


def _saved_text(n: dict[str, Any]) -> str:
    items = []
    for s in n["saved"][:SAVED_SHOWN]:
        what = f"{s['name'] or '?'} {_shape(s['shape'])}"
        what += f" {human_bytes(s['storage_bytes'])}" if s["counted"] else tr(" (storage counted above)")
        items.append(what)
    if not items:
        return ""
    more = len(n["saved"]) - SAVED_SHOWN
    listed = ", ".join(items)
    return (tr("saves {tensors}, +{n} more") if more > 0 else tr("saves {tensors}")).format(tensors=listed, n=more)


def graph_lines(t: dict[str, Any]) -> list[Text]:
    nodes: list[dict[str, Any]] = t["nodes"]
    indeg: Counter[int] = Counter(c for n in nodes for c in n["next"] if c is not None)

    def leaf_text(i: int) -> str | None:
        """A child written after its consumer: an AccumulateGrad, or one op in front of one."""
        n = nodes[i]
        if n["leaf"] is not None:
            return n["leaf"]["name"] or tr("unnamed leaf {shape}").format(shape=_shape(n["leaf"]["shape"]))
        kids = [c for c in n["next"] if c is not None]
        if len(kids) == 1 and not n["saved"] and indeg[i] == 1 and nodes[kids[0]]["leaf"] is not None:
            inner = leaf_text(kids[0])
            return tr("{leaf} (via {op})").format(leaf=inner, op=n["op"])
        return None

    labels: dict[int, int] = {}
    printed: set[int] = set()

    def head(i: int) -> Text:
        n = nodes[i]
        txt = Text()
        if indeg[i] > 1:
            labels.setdefault(i, len(labels) + 1)
            txt.append(f"[{labels[i]}] ", style="cyan")
        txt.append(n["op"], style="bold")
        sv = _saved_text(n)
        if sv:
            txt.append("  " + sv)
        leaves = [x for x in (leaf_text(c) for c in n["next"] if c is not None) if x]
        if leaves:
            txt.append("  ← " + ", ".join(leaves), style="green")
        return txt

    def heavy(i: int) -> list[int]:
        return [c for c in nodes[i]["next"] if c is not None and leaf_text(c) is None]

    out: list[Text] = []
    # work items: (node, prefix of its first line, prefix of the lines after it)
    work: list[tuple[int, str, str]] = [(0, "", "")] if nodes else []
    while work:
        i, first, rest = work.pop()
        if i in printed:
            labels.setdefault(i, len(labels) + 1)
            out.append(Text(first) + Text(tr("→ [{label}] {op} (shown above)").format(label=labels[i], op=nodes[i]["op"]),
                                          style="cyan"))
            continue
        chain = [i]
        while True:
            kids = heavy(chain[-1])
            if len(kids) == 1 and indeg[kids[0]] == 1 and kids[0] not in printed:
                chain.append(kids[0])
                continue
            break
        printed.update(chain)
        shown: list[int | None] = list(chain)
        if len(chain) > FOLD_OVER:
            a, b = FOLD_KEEP
            shown = [*chain[:a], None, *chain[-b:]]
        hidden = chain[FOLD_KEEP[0]:-FOLD_KEEP[1]] if len(chain) > FOLD_OVER else []
        for k, j in enumerate(shown):
            prefix = first if k == 0 else rest
            if j is None:
                ops = Counter(nodes[h]["op"] for h in hidden)
                saved = sum(s["storage_bytes"] for h in hidden for s in nodes[h]["saved"] if s["counted"])
                out.append(Text(prefix) + Text(tr("… {n} more: {ops}; saving {bytes}").format(
                    n=len(hidden), ops=", ".join(f"{op} ×{c}" for op, c in ops.most_common(4)) + (" …" if len(ops) > 4 else ""),
                    bytes=human_bytes(saved)), style="dim"))
            else:
                out.append(Text(prefix) + head(j))
        kids = heavy(chain[-1])
        for k in reversed(range(len(kids))):
            last = k == len(kids) - 1
            work.append((kids[k], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  ")))
    return out


def graph_group(t: dict[str, Any]) -> Group:
    if "error" in t:
        return Group(Text(f"--graph {t['expr']}: {t['error']}", style="red"))
    w = t["walk"]
    title = Text.assemble((tr("Autograd graph of "), "bold"), (t["expr"], "bold cyan"),
                          (f"  {_shape(t['shape'])}", "dim"))
    parts: list[Any] = [title, *graph_lines(t)]
    if t["truncated"]:
        parts.append(Text(tr("(only the first {n} nodes are shown)").format(n=f"{len(t['nodes']):,}"), style="yellow"))
    for p in t["problems"]:
        parts.append(Text(tr("note: {note}").format(note=from_target(p)), style="yellow"))
    nodes, leaves = len(t["nodes"]) - t["leaves"], t["leaves"]
    parts.append(Text(tr("{nodes}, {leaves}; {saved} in {storages}: {bytes} ({exact} B, each storage counted once; "
                         "the probe's walk: {walk} B)").format(
        nodes=ntr("{n} node", "{n} nodes", nodes).format(n=f"{nodes:,}"),
        leaves=ntr("{n} leaf", "{n} leaves", leaves).format(n=f"{leaves:,}"),
        saved=ntr("{n} saved tensor", "{n} saved tensors", t["saved_tensors"]).format(n=f"{t['saved_tensors']:,}"),
        storages=ntr("{n} storage", "{n} storages", t["saved_storages"]).format(n=f"{t['saved_storages']:,}"),
        bytes=human_bytes(t["saved_bytes"]), exact=f"{t['saved_bytes']:,}", walk=f"{w['saved_bytes']:,}"),
        style="dim"))
    return Group(*parts)


def print_text(report: dict[str, Any], console: Console) -> None:
    if "grads" in report:
        console.print(grads_group(report["grads"]))
    for t in report.get("graphs", []):
        console.print(graph_group(t))
