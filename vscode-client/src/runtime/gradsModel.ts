// The memory panel's "Gradients" section: the report of `stridelens inspect --grads` (the
// JSON of inspector/grad_reports.analyze over inspector/grads_probe.grads), as rows the
// webview renders. Pure, unit-tested; the analysis itself stays in Python (one source).
import * as l10n from "@vscode/l10n";

/** One row of the probe (grads_probe.grads) after grad_reports.analyze. */
export interface GradParam {
  name: string;
  model: string;
  layer: string;
  shape: number[];
  dtype: string;
  device: string;
  numel: number;
  requires_grad: boolean;
  grad: boolean;
  none_reason: "frozen" | "in_graph" | "not_in_graph" | "no_graph" | null;
  grad_norm: number | null;
  weight_norm: number | null;
  ratio: number | null;
  nan: number | null;
  inf: number | null;
  zeros: number | null;
  zero_fraction: number | null;
  rank: number | null;
}

export interface GradFinding {
  kind: string; // collapse | explode | vanishing | exploding | ratio_outlier | dead_relu | dead_units | nonfinite | zero | no_grad
  layer: string;
  layers?: string[]; // vanishing / exploding: the stack; dead_relu: the dead layer and those it starves
  message: string;
}

/** The table's word for a parameter of a flagged layer (grad_reports.STATE_TEXT). */
const STATE_TEXT: Record<string, () => string> = {
  collapse: () => l10n.t("collapses here"),
  explode: () => l10n.t("explodes here"),
  vanishing: () => l10n.t("vanishing"),
  exploding: () => l10n.t("exploding"),
  ratio_outlier: () => l10n.t("ratio far off"),
  dead_relu: () => l10n.t("dead ReLU"),
  dead_units: () => l10n.t("dead units"),
};

export interface GradReport {
  models: string[];
  graph_roots: string[];
  params: GradParam[];
  layers: { layer: string; model: string; grad_norm: number | null; status: string; ratio_to_next: number | null; finding: string | null }[];
  findings: GradFinding[];
  frozen: number;
  span: { smallest: string; smallest_norm: number; largest: string; largest_norm: number; decades: number } | null;
}

export interface GradRow {
  rank: string;
  name: string;
  shape: string;
  gradNorm: string;
  ratio: string;
  nan: string;
  inf: string;
  zeros: string;
  state: string;
  tone: "ok" | "bad" | "warn" | "muted";
}

export interface GradsView {
  rows: GradRow[];
  findings: { kind: string; message: string }[];
  summary: string;
  empty: string | null; // why there are no rows
}

/** Python's `f"{v:.3g}"` (grad_reports._num): 3 significant digits, exponent past 1e-5 / 1e3. */
export function general3(v: number | null): string {
  if (v === null) return "—";
  if (v === 0) return "0";
  const [mantissa, exp] = v.toExponential(2).split("e");
  const e = Number(exp);
  if (e < -4 || e >= 3) return `${mantissa.replace(/\.?0+$/, "")}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return v.toFixed(Math.max(0, 2 - e)).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
}

const NONE_TEXT: Record<string, () => string> = {
  frozen: () => l10n.t("frozen"),
  in_graph: () => l10n.t("None (in graph, not reached yet)"),
  not_in_graph: () => l10n.t("None (not in the graph)"),
  no_graph: () => l10n.t("None (never reached)"),
};

const parameters = (n: number): string => (n === 1 ? l10n.t("{0} parameter", n) : l10n.t("{0} parameters", n));
const layers = (n: number): string => (n === 1 ? l10n.t("{0} layer", n) : l10n.t("{0} layers", n));
const modules = (n: number): string => (n === 1 ? l10n.t("{0} module", n) : l10n.t("{0} modules", n));

/** The table and findings `inspect --grads` prints (grad_reports.grads_group), as panel rows. */
export function gradsView(r: GradReport): GradsView {
  const flagged = new Map<string, string>();
  for (const f of r.findings) {
    if (!(f.kind in STATE_TEXT)) continue;
    const stack = ["vanishing", "exploding", "dead_relu"].includes(f.kind) && f.layers ? f.layers : [f.layer];
    for (const layer of stack) if (!flagged.has(layer)) flagged.set(layer, f.kind);
  }
  const rows = r.params.map((p): GradRow => {
    const bad = (p.nan ?? 0) + (p.inf ?? 0);
    let state: string;
    let tone: GradRow["tone"];
    if (!p.grad) {
      state = NONE_TEXT[p.none_reason ?? ""]?.() ?? "None";
      tone = p.none_reason === "frozen" ? "muted" : "warn";
    } else if (bad) {
      [state, tone] = ["NaN/Inf", "bad"];
    } else if (flagged.has(p.layer)) {
      [state, tone] = [STATE_TEXT[flagged.get(p.layer) as string](), "bad"];
    } else {
      [state, tone] = [l10n.t("ok"), "ok"];
    }
    return {
      rank: p.rank ? String(p.rank) : "",
      name: p.name,
      shape: p.shape.length === 1 ? `(${p.shape[0]},)` : `(${p.shape.join(", ")})`,
      gradNorm: bad ? (p.nan ? "NaN" : "Inf") : general3(p.grad_norm),
      ratio: general3(p.ratio),
      nan: p.nan === null ? "" : String(p.nan),
      inf: p.inf === null ? "" : String(p.inf),
      zeros: p.zero_fraction === null ? "" : `${(100 * p.zero_fraction).toFixed(1)}%`,
      state,
      tone,
    };
  });
  const sp = r.span;
  const span = sp ? l10n.t("; layer grad norms span {0} decades ({1} {2} … {3} {4})", sp.decades.toFixed(1), sp.smallest, general3(sp.smallest_norm), sp.largest, general3(sp.largest_norm)) : "";
  const summary = l10n.t("{0} in {1} of {2} ({3}); {4} frozen{5}", parameters(r.params.length), layers(r.layers.length), modules(r.models.length), r.models.join(", ") || l10n.t("none"), r.frozen, span);
  return {
    rows,
    findings: r.findings.map((f) => ({ kind: f.kind, message: f.message })),
    summary,
    empty: r.params.length ? null : l10n.t("No nn.Module with parameters in this frame or its globals."),
  };
}
