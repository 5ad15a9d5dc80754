"""Periodic snapshots of one process: what grew since the first one, by owner.

Owners are those of the all-ranks growth report (`rank_findings.holders`: a variable, a
container such as `history` for `history[3]`, the graphs a container keeps, unnamed storages of
one size), with the probe's per-name totals over every storage (`named`) where the report has
them, so a container of many small tensors counts in full and not only through the top-N.
"""

from __future__ import annotations

from typing import Any

from stridelens.i18n import tr
from stridelens.inspector.rank_findings import holders, total_bytes
from stridelens.server.units import human_bytes

GROW_MIN = 4096  # an owner that grew less than this did not grow


def owners(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = holders(report)
    for n in report.get("named", []):
        kind = "container" if n["container"] else "variable"
        out[f"{kind}:{n['name']}"] = {"kind": kind, "holder": n["name"], "bytes": n["bytes"],
                                      "storages": n["storages"]}
    return out


def grew(first: dict[str, Any], later: dict[str, Any], limit: int = 10) -> list[dict[str, Any]]:
    """Owners whose bytes grew from `first` to `later`, largest growth first."""
    h0, h1 = owners(first), owners(later)
    rows = []
    for key, h in h1.items():
        before = h0.get(key, {"bytes": 0, "storages": 0})
        delta = h["bytes"] - before["bytes"]
        if delta < GROW_MIN:
            continue
        rows.append({"holder": h["holder"], "kind": h["kind"], "bytes_first": before["bytes"],
                     "bytes_now": h["bytes"], "grew_bytes": delta,
                     "storages_first": before["storages"], "storages_now": h["storages"]})
    rows.sort(key=lambda r: -r["grew_bytes"])
    return rows[:limit]


def summary(first: dict[str, Any], later: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    a, b = total_bytes(first), total_bytes(later)
    what = ", ".join(f"{r['holder']} +{human_bytes(r['grew_bytes'])}" for r in rows[:3])
    text = tr("live tensors {first} → {last} ({change})").format(
        first=human_bytes(a), last=human_bytes(b), change=("+" if b >= a else "−") + human_bytes(abs(b - a)))
    return text + (tr("; grew: {what}").format(what=what) if what else tr("; no owner grew"))
