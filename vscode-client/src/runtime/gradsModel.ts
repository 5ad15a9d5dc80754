// The memory panel's "Gradients" section: the report of `stridelens inspect --grads` (the
// JSON of inspector/grad_reports.analyze over inspector/grads_probe.grads), as rows the
// webview renders. Pure, unit-tested; the analysis itself stays in Python (one source).

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
  kind: string; // collapse | explode | nonfinite | zero | no_grad
  layer: string;
  message: string;
}

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

const NONE_TEXT: Record<string, string> = {
  frozen: "frozen",
  in_graph: "None (in graph, not reached yet)",
  not_in_graph: "None (not in the graph)",
  no_graph: "None (never reached)",
};

const plural = (n: number, word: string): string => `${n} ${n === 1 ? word : word + "s"}`;

/** The table and findings `inspect --grads` prints (grad_reports.grads_group), as panel rows. */
export function gradsView(r: GradReport): GradsView {
  const flagged = new Map(r.findings.filter((f) => f.kind === "collapse" || f.kind === "explode").map((f) => [f.layer, f.kind]));
  const rows = r.params.map((p): GradRow => {
    const bad = (p.nan ?? 0) + (p.inf ?? 0);
    let state: string;
    let tone: GradRow["tone"];
    if (!p.grad) {
      state = NONE_TEXT[p.none_reason ?? ""] ?? "None";
      tone = p.none_reason === "frozen" ? "muted" : "warn";
    } else if (bad) {
      [state, tone] = ["NaN/Inf", "bad"];
    } else if (flagged.has(p.layer)) {
      [state, tone] = [`${flagged.get(p.layer)}s here`, "bad"];
    } else {
      [state, tone] = ["ok", "ok"];
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
  const span = sp ? `; layer grad norms span ${sp.decades.toFixed(1)} decades (${sp.smallest} ${general3(sp.smallest_norm)} … ${sp.largest} ${general3(sp.largest_norm)})` : "";
  const summary = `${plural(r.params.length, "parameter")} in ${plural(r.layers.length, "layer")} of ${plural(r.models.length, "module")} (${r.models.join(", ") || "none"}); ${r.frozen} frozen${span}`;
  return {
    rows,
    findings: r.findings.map((f) => ({ kind: f.kind, message: f.message })),
    summary,
    empty: r.params.length ? null : "No nn.Module with parameters in this frame or its globals.",
  };
}
