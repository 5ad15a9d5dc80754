// The memory panel's "Step diff" section: the report of `stridelens inspect --diff-steps N`
// (inspector/step_diff.analyze over inspector/diff_probe's stops) as the lines and rows the
// webview renders, worded as the CLI prints them (step_diff.group_text). Pure, unit-tested.
import * as l10n from "@vscode/l10n";
import { humanBytes } from "./format";
import { grouped } from "./storagePicture";

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
const KIND_TEXT: Record<string, () => string> = {
  variable: () => l10n.t("variable"), container: () => l10n.t("container"), module: () => l10n.t("module"), gradient: () => l10n.t("gradient"),
  optimizer_state: () => l10n.t("optimizer state"), graph: () => l10n.t("graph"), other: () => l10n.t("other"),
};

const SHAPE_SHORT: Record<Shape, () => string> = {
  linear: () => l10n.t("linear"), once: () => l10n.t("once (first step)"), irregular: () => l10n.t("irregular"), grows: () => l10n.t("grows"), flat: () => l10n.t("flat"), shrinking: () => l10n.t("shrinks"),
};
const SHAPE_TEXT: Record<Shape, () => string> = {
  linear: () => l10n.t("grows linearly"),
  once: () => l10n.t("grew once, in the first step, then stayed"),
  irregular: () => l10n.t("grows, not linearly"),
  grows: () => l10n.t("grows (two stops cannot tell a line from a jump: use --diff-steps 2 or more)"),
  flat: () => l10n.t("flat"),
  shrinking: () => l10n.t("shrinks"),
};

const storages = (n: number): string => (n === 1 ? l10n.t("{0} storage", grouped(n)) : l10n.t("{0} storages", grouped(n)));

function curveText(curve: number[]): string {
  if (curve.length <= 3) return curve.map(humanBytes).join(" → ");
  return `${humanBytes(curve[0])} → ${humanBytes(curve[1])} … ${humanBytes(curve[curve.length - 1])}`;
}

function perStepText(g: DiffGroup): string {
  if (g.shape === "flat") return "0 B";
  if (g.shape === "once") return l10n.t("+{0} once", humanBytes(g.growth_bytes));
  return (g.growth_per_step >= 0 ? "+" : "−") + humanBytes(Math.abs(g.growth_per_step));
}

export function diffView(d: DiffReport): DiffView {
  const n = d.steps;
  const first = d.stops[0];
  const last = d.stops[d.stops.length - 1];
  const args = [n, humanBytes(first.bytes), humanBytes(last.bytes), `${d.growth_bytes >= 0 ? "+" : "−"}${humanBytes(Math.abs(d.growth_bytes))}`, humanBytes(d.growth_per_step), SHAPE_TEXT[d.shape]()];
  const head = n === 1
    ? l10n.t("Step diff over {0} step (the breakpoint hit {0} more time): live storages {1} → {2} ({3}, {4} per step; {5})", ...args)
    : l10n.t("Step diff over {0} steps (the breakpoint hit {0} more times): live storages {1} → {2} ({3}, {4} per step; {5})", ...args);
  const sub = l10n.t("{0} new and alive at the second stop ({1}); {2} of the first stop freed ({3})", storages(d.new_storages), humanBytes(d.new_bytes), storages(d.freed_storages), humanBytes(d.freed_bytes));
  const changed = d.groups.filter((g) => g.new_storages || g.growth_bytes);
  const shown = changed.slice(0, GROUPS_SHOWN);
  const rows = shown.map((g) => ({
    keeper: g.keeper,
    kind: KIND_TEXT[g.kind]?.() ?? g.kind.replace(/_/g, " "),
    added: `${g.new_storages} (${humanBytes(g.new_bytes)})`,
    curve: curveText(g.bytes_by_stop),
    perStep: perStepText(g),
    shape: SHAPE_SHORT[g.shape](),
    tone: g.shape === "linear" ? ("bad" as const) : g.shape === "flat" ? ("ok" as const) : ("warn" as const),
  }));
  // variables and gradients refilled each step are the normal case: no note (as the CLI)
  const notes = shown.filter((g) => g.note && (g.shape !== "flat" || g.kind === CONTAINER)).map((g) => `${g.keeper}: ${g.note}`);
  return {
    head,
    sub,
    rows,
    notes,
    empty: shown.length ? null : l10n.t("No storage is new at the second stop and no keeper grew."),
    more: changed.length > shown.length ? (changed.length - shown.length === 1 ? l10n.t("… {0} more keeper", 1) : l10n.t("… {0} more keepers", grouped(changed.length - shown.length))) : null,
  };
}
