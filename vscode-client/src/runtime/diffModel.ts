// The memory panel's "Step diff" section: the report of `stridelens inspect --diff-steps N`
// (inspector/step_diff.analyze over inspector/diff_probe's stops) as the lines and rows the
// webview renders, worded as the CLI prints them (step_diff.group_text). Pure, unit-tested.
import { humanBytes } from "./format";
import { plural } from "./storagePicture";

export interface DiffGroup {
  kind: string; // variable | container | module | gradient | optimizer_state | graph | other
  keeper: string;
  bytes_by_stop: number[];
  new_storages: number;
  new_bytes: number;
  growth_bytes: number;
  growth_per_step: number;
  shape: Shape;
  note: string | null;
}

type Shape = "linear" | "once" | "irregular" | "grows" | "flat" | "shrinking";

export interface DiffReport {
  steps: number;
  stops: { bytes: number; storages: number }[];
  groups: DiffGroup[];
  new_storages: number;
  new_bytes: number;
  freed_storages: number;
  freed_bytes: number;
  growth_bytes: number;
  growth_per_step: number;
  shape: Shape;
  linear_keepers: string[];
}

export interface DiffView {
  head: string;
  sub: string;
  rows: { keeper: string; kind: string; added: string; curve: string; perStep: string; shape: string; tone: "bad" | "ok" | "warn" }[];
  notes: string[];
  empty: string | null;
  more: string | null;
}

const GROUPS_SHOWN = 12; // step_diff.GROUPS_SHOWN
const CONTAINER = "container";

const SHAPE_SHORT: Record<Shape, string> = {
  linear: "linear", once: "once (first step)", irregular: "irregular", grows: "grows", flat: "flat", shrinking: "shrinks",
};
const SHAPE_TEXT: Record<Shape, string> = {
  linear: "grows linearly",
  once: "grew once, in the first step, then stayed",
  irregular: "grows, not linearly",
  grows: "grows (two stops cannot tell a line from a jump: use --diff-steps 2 or more)",
  flat: "flat",
  shrinking: "shrinks",
};

function curveText(curve: number[]): string {
  if (curve.length <= 3) return curve.map(humanBytes).join(" → ");
  return `${humanBytes(curve[0])} → ${humanBytes(curve[1])} … ${humanBytes(curve[curve.length - 1])}`;
}

function perStepText(g: DiffGroup): string {
  if (g.shape === "flat") return "0 B";
  if (g.shape === "once") return `+${humanBytes(g.growth_bytes)} once`;
  return (g.growth_per_step >= 0 ? "+" : "−") + humanBytes(Math.abs(g.growth_per_step));
}

export function diffView(d: DiffReport): DiffView {
  const n = d.steps;
  const first = d.stops[0];
  const last = d.stops[d.stops.length - 1];
  const head = `Step diff over ${plural(n, "step")} (the breakpoint hit ${n} more ${n === 1 ? "time" : "times"}): live storages ` +
    `${humanBytes(first.bytes)} → ${humanBytes(last.bytes)} (${d.growth_bytes >= 0 ? "+" : "−"}${humanBytes(Math.abs(d.growth_bytes))}, ` +
    `${humanBytes(d.growth_per_step)} per step; ${SHAPE_TEXT[d.shape]})`;
  const sub = `${plural(d.new_storages, "storage")} new and alive at the second stop (${humanBytes(d.new_bytes)}); ` +
    `${plural(d.freed_storages, "storage")} of the first stop freed (${humanBytes(d.freed_bytes)})`;
  const changed = d.groups.filter((g) => g.new_storages || g.growth_bytes);
  const shown = changed.slice(0, GROUPS_SHOWN);
  const rows = shown.map((g) => ({
    keeper: g.keeper,
    kind: g.kind.replace(/_/g, " "),
    added: `${g.new_storages} (${humanBytes(g.new_bytes)})`,
    curve: curveText(g.bytes_by_stop),
    perStep: perStepText(g),
    shape: SHAPE_SHORT[g.shape],
    tone: g.shape === "linear" ? ("bad" as const) : g.shape === "flat" ? ("ok" as const) : ("warn" as const),
  }));
  // variables and gradients refilled each step are the normal case: no note (as the CLI)
  const notes = shown.filter((g) => g.note && (g.shape !== "flat" || g.kind === CONTAINER)).map((g) => `${g.keeper}: ${g.note}`);
  return {
    head,
    sub,
    rows,
    notes,
    empty: shown.length ? null : "No storage is new at the second stop and no keeper grew.",
    more: changed.length > shown.length ? `… ${plural(changed.length - shown.length, "more keeper")}` : null,
  };
}
