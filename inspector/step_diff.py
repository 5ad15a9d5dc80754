"""`inspect --diff-steps N`: stop at the breakpoint, run on until it has been hit N more times,
and report the storages that are new and still alive at the second stop, grouped by what keeps
them, with each keeper's bytes at every stop and whether they grow linearly.

A step is one more hit of the breakpoint the first stop was at (hits of other --break lines
do not count). At every hit the diff probe (`diff_probe.py`, in the debuggee) walks the live
storages and names their keepers; the shape of each keeper's bytes over the N+1 stops is read
with one rule (`shape`):

    growth = bytes at the last stop - bytes at the first; tol = 1% of the largest
    |growth| <= tol: flat; growth < -tol: shrinking; N < 2: grows (shape unknown)
    every step's change within 25% (+tol) of growth / N: linear
    the first step's change carries the growth and the later ones are within tol: once
    otherwise: irregular
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from stridelens.i18n import N_, ntr, tr
from stridelens.inspector import diff_probe, fit
from stridelens.inspector.target_text import from_target
from stridelens.server.units import human_bytes

LINEAR_SLACK = 0.25  # a step's change may differ this much from the mean step and still be linear
TOL_FRACTION = 0.01  # changes below this fraction of the keeper's bytes are noise
GROUPS_SHOWN = 12  # text: keepers listed (JSON has all)

SHAPE_SHORT = {"linear": N_("linear"), "once": N_("once (first step)"), "irregular": N_("irregular"),
               "grows": N_("grows"), "flat": N_("flat"), "shrinking": N_("shrinks")}
SHAPE_TEXT = {
    "linear": N_("grows linearly"),
    "once": N_("grew once, in the first step, then stayed"),
    "irregular": N_("grows, not linearly"),
    "grows": N_("grows (two stops cannot tell a line from a jump: use --diff-steps 2 or more)"),
    "flat": N_("flat"),
    "shrinking": N_("shrinks"),
}
KIND_TEXT = {diff_probe.VARIABLE: N_("variable"), diff_probe.MODULE: N_("module"),
             diff_probe.GRADIENT: N_("gradient"), diff_probe.OPTIMIZER: N_("optimizer state"),
             diff_probe.CONTAINER: N_("container"), diff_probe.GRAPH: N_("graph"), diff_probe.OTHER: N_("unnamed")}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--diff-steps", type=int, default=0, metavar="N",
                   help=tr("stop at the breakpoint, continue until it has been hit N more times, and report "
                        "the storages new and alive at the second stop, grouped by what keeps them, with "
                        "growth per step and whether it is linear"))


def requested(args: argparse.Namespace) -> bool:
    return bool(args.diff_steps)


def check_usage(args: argparse.Namespace) -> None:
    from stridelens.inspector.session import UsageError

    if args.diff_steps < 0:
        raise UsageError(tr("--diff-steps must be >= 1"))
    if args.diff_steps and (args.pause or not args.breaks):
        raise UsageError(tr("--diff-steps N needs --break FILE:LINE (a step is one more hit of that breakpoint)"))


def _call(s: Any, call: str) -> Any:
    return s.call_probe(call, module=diff_probe.PRIVATE_NAME)


def _where(s: Any) -> tuple[str | None, int | None]:
    return (s.frame.get("source") or {}).get("path"), s.frame.get("line")


def run_steps(s: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """At the first stop (probe injected): record, step N hits on, record each, compare.
    Leaves the target stopped at the second stop; None when --diff-steps was not asked for."""
    from stridelens.inspector.dap_client import DapTimeout
    from stridelens.inspector.session import InspectError

    n = int(args.diff_steps)
    if not n:
        return None
    s.inject(diff_probe.__file__, diff_probe.PRIVATE_NAME, diff_probe.FILENAME)
    first_stop = _where(s)
    s.progress(tr("recording the first stop"))
    _call(s, "begin_json(locals())")
    hits = 0
    while hits < n:
        s.resume()
        s.progress(tr("running to hit {hit} of {n}").format(hit=hits + 1, n=n))
        try:
            code = s.next_stop(timeout=args.timeout)
        except DapTimeout:
            raise InspectError(tr("--diff-steps {n}: the breakpoint was hit {hits} of {n} more times within "
                                  "{seconds} s (raise --timeout, or use a smaller N)").format(
                n=n, hits=hits, seconds=f"{args.timeout:g}")) from None
        if code is not None:
            steps = ntr("{n} step", "{n} steps", hits).format(n=hits)
            if code != -1:
                raise InspectError(tr("--diff-steps {n}: the target exited (exit code {code}) after {steps} of "
                                      "{n}").format(n=n, code=code, steps=steps))
            raise InspectError(tr("--diff-steps {n}: the target exited after {steps} of {n}").format(n=n, steps=steps))
        if _where(s) != first_stop:
            continue  # another --break line: not a step
        hits += 1
        s.progress(tr("recording step {step} of {n}").format(step=hits, n=n))
        if hits < n:
            try:
                _call(s, "sample_json(locals())")
            except InspectError as e:  # the target is stopped: drop the first stop's record
                with contextlib.suppress(InspectError):
                    _call(s, "reset_json()")
                raise InspectError(tr("--diff-steps {n}, step {step}: {error}").format(n=n, step=hits, error=e)) from None
    return analyze(_call(s, "end_json(locals())"))


def shape(curve: list[int]) -> str:
    """The module docstring's rule, on bytes at each stop."""
    steps = len(curve) - 1
    growth = curve[-1] - curve[0]
    tol = TOL_FRACTION * max(curve, default=0)
    if abs(growth) <= tol:
        return "flat"
    if growth < 0:
        return "shrinking"
    if steps < 2:
        return "grows"
    deltas = [b - a for a, b in itertools.pairwise(curve)]
    mean = growth / steps
    if all(abs(d - mean) <= LINEAR_SLACK * mean + tol for d in deltas):
        return "linear"
    if abs(deltas[0] - growth) <= tol and all(abs(d) <= tol for d in deltas[1:]):
        return "once"
    return "irregular"


def analyze(d: dict[str, Any]) -> dict[str, Any]:
    """Growth per step and shape for the process and for each keeper; keepers with new or
    growing storages first, largest growth first."""
    steps = d["steps"]
    for g in d["groups"]:
        curve = g["bytes_by_stop"]
        g["growth_bytes"] = curve[-1] - curve[0]
        g["growth_per_step"] = g["growth_bytes"] / steps
        g["shape"] = shape(curve)
        if g["shape"] == "once" and g["kind"] == diff_probe.OPTIMIZER:
            g["note"] = tr("optimizer state created by the first step(): expected once, not a leak")
        elif g["shape"] == "flat" and g["new_storages"] and g["bytes_by_stop"][0]:
            g["note"] = ntr("{n} storage replaced since the first stop, the same bytes: a cache or buffer "
                            "that is refilled, not a leak",
                            "{n} storages replaced since the first stop, the same bytes: a cache or buffer "
                            "that is refilled, not a leak", g["new_storages"]).format(n=f"{g['new_storages']:,}")
        elif g["shape"] == "linear":
            g["note"] = tr("a leak: {bytes} more every step").format(bytes=human_bytes(g["growth_per_step"]))
        else:
            g["note"] = None
    d["groups"].sort(key=lambda g: (g["shape"] != "linear", not (g["growth_bytes"] > 0 or g["new_storages"] > 0),
                                    -g["growth_bytes"], -g["new_bytes"], g["keeper"]))
    curve = [st["bytes"] for st in d["stops"]]
    d["growth_bytes"] = curve[-1] - curve[0]
    d["growth_per_step"] = d["growth_bytes"] / steps
    d["shape"] = shape(curve)
    d["linear_keepers"] = [g["keeper"] for g in d["groups"] if g["shape"] == "linear"]
    d["rule"] = {"linear_slack": LINEAR_SLACK, "tolerance_fraction": TOL_FRACTION}
    return d


# ---------------------------------------------------------------- text


def _curve_text(curve: list[int]) -> str:
    if len(curve) <= 3:
        return " → ".join(human_bytes(b) for b in curve)
    return f"{human_bytes(curve[0])} → {human_bytes(curve[1])} … {human_bytes(curve[-1])}"


def _per_step_text(g: dict[str, Any]) -> str:
    if g["shape"] == "flat":
        return "0 B"
    if g["shape"] == "once":
        return tr("+{bytes} once").format(bytes=human_bytes(g["growth_bytes"]))
    per = g["growth_per_step"]
    return ("+" if per >= 0 else "−") + human_bytes(abs(per))


def group_text(d: dict[str, Any]) -> Group:
    n = d["steps"]
    first, last = d["stops"][0], d["stops"][-1]
    # The table's linear rows are leaks whatever the total does: the headline names them (a
    # total of a few MiB moves by less than its 1% tolerance for a leak of 260 B a step, and
    # reads flat: the headline said "flat" above a table of leaks).
    leaks = [g for g in d["groups"] if g["shape"] == "linear"]
    shape = tr(SHAPE_TEXT[d["shape"]])
    if leaks and d["shape"] != "linear":
        shape = ntr("{n} keeper grows linearly", "{n} keepers grow linearly", len(leaks)).format(n=len(leaks))
    head = Text.assemble(
        (tr("Step diff"), "bold"), ntr(
            " over {n} step (the breakpoint hit {n} more time): live storages {first} → {last} ({growth}, "
            "{per_step} per step; {shape})",
            " over {n} steps (the breakpoint hit {n} more times): live storages {first} → {last} ({growth}, "
            "{per_step} per step; {shape})", n).format(
            n=n, first=human_bytes(first["bytes"]), last=human_bytes(last["bytes"]),
            growth=("+" if d["growth_bytes"] >= 0 else "−") + human_bytes(abs(d["growth_bytes"])),
            per_step=human_bytes(d["growth_per_step"]), shape=shape))
    parts: list[Any] = [head]
    if leaks:
        named = tr(", ").join(tr("{keeper} +{bytes} per step").format(
            keeper=from_target(g["keeper"]), bytes=human_bytes(g["growth_per_step"])) for g in leaks[:4])
        if len(leaks) > 4:
            named += tr(", … {n} more").format(n=len(leaks) - 4)
        line = tr("Leaking: {keepers}").format(keepers=named)
        if d["shape"] != "linear":
            line += tr(" (the total alone reads {shape}: a change under {tol}, 1% of it, is noise, and other "
                       "storages come and go)").format(
                shape=tr(SHAPE_SHORT[d["shape"]]), tol=human_bytes(TOL_FRACTION * max(st["bytes"] for st in d["stops"])))
        parts.append(Text(line, style="bold red"))
    parts.append(Text(tr("{new} new and alive at the second stop ({new_bytes}); {freed} of the first "
                                      "stop freed ({freed_bytes})").format(
        new=ntr("{n} storage", "{n} storages", d["new_storages"]).format(n=f"{d['new_storages']:,}"),
        new_bytes=human_bytes(d["new_bytes"]),
        freed=ntr("{n} storage", "{n} storages", d["freed_storages"]).format(n=f"{d['freed_storages']:,}"),
        freed_bytes=human_bytes(d["freed_bytes"])), style="dim"))
    t = Table(box=box.SIMPLE_HEAD, title=tr("What keeps them (bytes at each stop)"), title_justify="left")
    for col, right, no_wrap in ((tr("kept by"), False, True), (tr("kind"), False, True), (tr("new"), True, False),
                                (tr("bytes per stop"), False, False), (tr("per step"), True, False),
                                (tr("shape"), False, False)):
        t.add_column(col, justify="right" if right else "left", no_wrap=no_wrap)
    shown = [g for g in d["groups"] if g["new_storages"] or g["growth_bytes"]][:GROUPS_SHOWN]
    for g in shown:
        style = "bold red" if g["shape"] == "linear" else "green" if g["shape"] == "flat" else "yellow"
        kind = tr(KIND_TEXT[g["kind"]]) if g["kind"] in KIND_TEXT else g["kind"].replace("_", " ")
        t.add_row(Text(from_target(g["keeper"]), style="bold"), kind,
                  f"{g['new_storages']} ({human_bytes(g['new_bytes'])})", _curve_text(g["bytes_by_stop"]),
                  _per_step_text(g), Text(tr(SHAPE_SHORT[g["shape"]]), style=style))
    if shown:
        parts.append(fit.Fit(t, [tr("kind"), tr("new"), tr("bytes per stop")]))
    else:
        parts.append(Text(tr("No storage is new at the second stop and no keeper grew."), style="green"))
    for g in shown:
        # variables and gradients refilled each step are the normal case: no note in the text
        if g["note"] and (g["shape"] != "flat" or g["kind"] == diff_probe.CONTAINER):
            parts.append(fit.bullet(("  • ", "bold"), (from_target(g["keeper"]), "bold"), tr(": "), g["note"]))
    rest = len([g for g in d["groups"] if g["new_storages"] or g["growth_bytes"]]) - len(shown)
    if rest > 0:
        parts.append(Text(ntr("… {n} more keeper (see --format json)", "… {n} more keepers (see --format json)",
                              rest).format(n=f"{rest:,}"), style="dim"))
    return Group(*parts)


def print_text(report: dict[str, Any], console: Console) -> None:
    if "diff_steps" in report:
        console.print(group_text(report["diff_steps"]))
