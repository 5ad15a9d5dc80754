// The memory panel's data: built from the probe's process and frame reports, rendered by the
// webview. Pure, unit-tested.
import * as l10n from "@vscode/l10n";
import type { Describe, FrameReport, FrameRow, ProcessReport } from "./facts";
import { chainLines, humanBytes, tuple } from "./format";
import { describedLayout } from "./storagePicture";

export interface SourceRef {
  line: number; // 1-based
  text: string;
}

export interface PanelFinding {
  kind: string;
  title: string; // the named object: `losses`
  message: string;
  bytes: number;
  human: string;
  refs: SourceRef[];
}

export interface PanelModel {
  title: string;
  stop: { path: string; line: number; function?: string } | null;
  totals: { tensors: number; storages: number; bytes: number; human: string };
  // graphSaved: what live graphs saved (probe: graph_saved_bytes), tensor objects holding them or not.
  devices: { device: string; bytes: number; human: string; storages: number; tensors: number; graphSaved: string | null; cuda: Record<string, unknown> | null }[];
  graphNote: string | null; // what the graph-saved column counts, once
  // One row per probe row (`rows`): `losses[0..19]` alike are one, count 20.
  groups: { key: string; device: string; bytes: number; human: string; summary: string; count: number; tensors: { name: string; label: string }[] }[];
  // One row per probe row (`top_rows`): storages one graph saved alike are one, count 9.
  top: { key: string; device: string; bytes: number; human: string; count: number; label: string; savedByGraph: boolean; saved: string }[];
  findings: PanelFinding[];
  tensors: string[]; // selectable names (frame locals)
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * Lines of `text` that bind or grow `name`: assignments, `for name in`, augmented
 * assignments, item assignments and `.append/.extend/.insert(...)`. A dotted or subscripted
 * name (`self.cache`, `d['k']`) is looked up as written and by its last part.
 */
export function findSourceLines(name: string, text: string, limit = 6): SourceRef[] {
  const plain = name.replace(/\s+/g, "");
  if (!plain || /^an unnamed /.test(name)) return [];
  const names = [plain];
  const last = plain.split(/[.[]/)[0];
  if (last && last !== plain) names.push(last);
  const out: SourceRef[] = [];
  const lines = text.split(/\r?\n/);
  for (const n of names) {
    const e = escapeRe(n);
    const pats = [
      new RegExp(`^\\s*(?:[\\w.]+\\s*,\\s*)*${e}\\s*(?::[^=]+)?=(?!=)`),
      new RegExp(`^\\s*for\\s+(?:[\\w\\s,]*,\\s*)?${e}\\b.*\\bin\\b`),
      new RegExp(`(?:^|[^\\w.])${e}\\s*(?:\\+=|\\[[^\\]]*\\]\\s*=(?!=))`),
      new RegExp(`(?:^|[^\\w.])${e}\\.(?:append|extend|insert|add|update|setdefault)\\s*\\(`),
    ];
    lines.forEach((l, i) => {
      const code = l.replace(/#.*$/, "");
      if (pats.some((p) => p.test(code)) && !out.some((r) => r.line === i + 1)) {
        out.push({ line: i + 1, text: l.trim() });
      }
    });
    if (out.length) break;
  }
  return out.sort((a, b) => a.line - b.line).slice(0, limit);
}

function findingTitle(f: { kind: string; container?: string; tensor?: string }): string {
  return f.container ?? f.tensor ?? f.kind;
}

const KIND_LABEL: Record<string, () => string> = {
  graph_kept_alive: () => l10n.t("autograd graphs kept alive"),
  view_pins_storage: () => l10n.t("small view pins a large storage"),
  retained_grad: () => l10n.t("retained grad"),
  stale_grad: () => l10n.t("stale .grad"),
};

export function kindLabel(kind: string): string {
  return KIND_LABEL[kind]?.() ?? kind.replace(/_/g, " ");
}

export function buildPanelModel(
  proc: ProcessReport,
  frame: FrameReport | null,
  stop: PanelModel["stop"],
  sourceText: string | null,
): PanelModel {
  const devices = proc.devices.map((d) => {
    const saved = d.graph_saved_bytes ?? d.graph_only_bytes ?? 0;
    return {
      device: d.device ?? "?",
      bytes: d.bytes,
      human: humanBytes(d.bytes),
      storages: d.storages,
      tensors: d.tensors,
      graphSaved: saved ? humanBytes(saved) : null,
      cuda: d.cuda ?? null,
    };
  });
  const graphOnly = proc.devices.reduce((s, d) => s + (d.graph_only_bytes ?? 0), 0);
  const graphNote = devices.some((d) => d.graphSaved)
    ? l10n.t("graph-saved: storages that live autograd graphs keep for backward ({0} of them held by nothing else: no tensor object has them)", humanBytes(graphOnly))
    : null;
  const bytes = proc.devices.reduce((s, d) => s + d.bytes, 0);
  const topRows = proc.top_rows ?? proc.top.map((_, i) => ({ at: i, count: 1, graph_root: proc.top[i].graph_root ?? null, graphs: proc.top[i].graph_root ? 1 : 0 }));
  const top = topRows.map((row) => {
    const t = proc.top[row.at];
    const names = t.names.slice(0, 4).join(", ");
    const root = row.graph_root ?? t.graph_root ?? null;
    // As the CLI's reports.held_by: a graph's root names what no tensor object does.
    const unnamed = t.unnamed && !(t.saved_by_graph && root) ? `${t.names.length ? " + " : ""}${l10n.t("{0} unnamed", t.unnamed)}` : "";
    let saved = "";
    if (t.saved_by_graph && root) {
      const line = t.graph_line ?? null;
      if (row.graphs > 1) {
        saved = line ? l10n.t("saved by {0}'s {1} graphs, from line {2}", root, row.graphs, line) : l10n.t("saved by {0}'s {1} graphs", root, row.graphs);
      } else {
        saved = line ? l10n.t("saved by {0}'s graph, from line {1}", root, line) : l10n.t("saved by {0}'s graph", root);
      }
    } else if (t.saved_by_graph) saved = l10n.t("saved by an autograd graph");
    return {
      key: t.storage_key,
      device: t.device,
      bytes: t.bytes,
      human: row.count > 1 ? `${row.count} × ${humanBytes(t.bytes)}` : humanBytes(t.bytes),
      count: row.count,
      label: `${names}${unnamed}` || (saved ? "" : l10n.t("unnamed")),
      savedByGraph: !!t.saved_by_graph,
      saved,
    };
  });
  const findings = proc.findings.map((f) => {
    const title = findingTitle(f);
    return {
      kind: f.kind,
      title,
      message: f.message,
      bytes: f.bytes ?? 0,
      human: humanBytes(f.bytes ?? 0),
      refs: sourceText ? findSourceLines(title, sourceText) : [],
    };
  });
  findings.sort((a, b) => b.bytes - a.bytes);
  const frameGroups = frame?.groups ?? [];
  const rows: FrameRow[] = frame?.rows ?? frameGroups.map((_, i) => ({ at: i, count: 1, name: null }));
  const groups = rows.map((row) => {
    const g = frameGroups[row.at];
    if (row.count > 1 && row.name) {
      // `losses[0..19]`: 20 × () float32, 512 B each (selecting it shows the first); another name
      // of an item (`loss` is `losses[19]`) stays selectable, as the CLI's bullet says it.
      const t = g.tensors.find((m) => !row.aliases?.some(([name]) => name === m.name)) ?? g.tensors[0];
      return {
        key: g.storage_key,
        device: g.device,
        bytes: g.storage_bytes * row.count,
        human: humanBytes(g.storage_bytes * row.count),
        summary: "",
        count: row.count,
        tensors: [
          { name: t.name, label: l10n.t("{0}: {1} × {2} {3}, {4} each", row.name, row.count, tuple(t.shape), t.dtype, humanBytes(g.storage_bytes)) },
          ...(row.aliases ?? []).map(([name, item]) => ({ name, label: l10n.t("{0} is {1}", name, item) })),
        ],
      };
    }
    return {
      key: g.storage_key,
      device: g.device,
      bytes: g.storage_bytes,
      human: humanBytes(g.storage_bytes),
      summary: g.summary,
      count: 1,
      tensors: g.tensors.map((t) => ({
        name: t.name,
        label: `${t.name}: ${tuple(t.shape)} ${t.dtype} ${l10n.t("strides {0}", tuple(t.strides))} ${l10n.t("offset {0}", t.storage_offset ?? "?")}${t.contiguous === false ? ` ${l10n.t("non-contiguous")}` : ""}${t.view_of ? ` ${l10n.t("view of {0}", t.view_of)}` : t.shares_storage_of ? ` ${l10n.t("view, shares the storage of {0}", t.shares_storage_of)}` : ""}`,
      })),
    };
  });
  const tensors = groups.flatMap((g) => g.tensors.map((t) => t.name));
  return {
    title: stop ? `${stop.path.split(/[\\/]/).pop()}:${stop.line}` : l10n.t("stopped process"),
    stop,
    totals: { tensors: proc.tensor_count, storages: proc.storage_count, bytes, human: humanBytes(bytes) },
    devices,
    graphNote,
    groups,
    top,
    findings,
    tensors,
  };
}

/** Selected tensor details for the panel: its layout (the webview draws the storage picture for its width) and the grad_fn chain. */
export function tensorDetail(name: string, d: Describe) {
  const elems = d.storage_bytes !== null && d.element_size ? d.storage_bytes / d.element_size : 0;
  return {
    name,
    facts: `${tuple(d.shape)} · ${d.dtype} · ${d.device} · ${l10n.t("strides {0}", tuple(d.strides))} · ${l10n.t("offset {0}", d.storage_offset ?? "?")} · ${d.contiguous ? l10n.t("contiguous") : l10n.t("non-contiguous")}`,
    storage: l10n.t("{0} storage, {1} elements of {2} B", humanBytes(d.storage_bytes), elems, d.element_size),
    layout: describedLayout(d),
    chain: chainLines(d.grad_fn_chain, 24),
    notes: d.notes,
  };
}

/** A frame-report name (`model.0.weight`, `losses[3]`) as a Python expression. */
export function nameToExpression(name: string): string {
  return name.replace(/\.(\d+)(?=\.|\[|$)/g, "[$1]");
}
