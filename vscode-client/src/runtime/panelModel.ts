// The memory panel's data: built from the probe's process and frame reports, rendered by the
// webview. Pure, unit-tested.
import * as l10n from "@vscode/l10n";
import type { Describe, FrameReport, ProcessReport } from "./facts";
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
  devices: { device: string; bytes: number; human: string; storages: number; tensors: number; graphOnly: string | null; cuda: Record<string, unknown> | null }[];
  groups: { key: string; device: string; bytes: number; human: string; summary: string; tensors: { name: string; label: string }[] }[];
  top: { key: string; device: string; bytes: number; human: string; label: string; savedByGraph: boolean }[];
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
  const devices = proc.devices.map((d) => ({
    device: d.device ?? "?",
    bytes: d.bytes,
    human: humanBytes(d.bytes),
    storages: d.storages,
    tensors: d.tensors,
    graphOnly: d.graph_only_bytes ? humanBytes(d.graph_only_bytes) : null,
    cuda: d.cuda ?? null,
  }));
  const bytes = proc.devices.reduce((s, d) => s + d.bytes, 0);
  const top = proc.top.map((t) => {
    const names = t.names.slice(0, 4).join(", ");
    const unnamed = t.unnamed ? `${t.names.length ? " + " : ""}${l10n.t("{0} unnamed", t.unnamed)}` : "";
    return {
      key: t.storage_key,
      device: t.device,
      bytes: t.bytes,
      human: humanBytes(t.bytes),
      label: `${names}${unnamed}` || l10n.t("unnamed"),
      savedByGraph: !!t.saved_by_graph,
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
  const groups = (frame?.groups ?? []).map((g) => ({
    key: g.storage_key,
    device: g.device,
    bytes: g.storage_bytes,
    human: humanBytes(g.storage_bytes),
    summary: g.summary,
    tensors: g.tensors.map((t) => ({
      name: t.name,
      label: `${t.name}: ${tuple(t.shape)} ${t.dtype} ${l10n.t("strides {0}", tuple(t.strides))} ${l10n.t("offset {0}", t.storage_offset ?? "?")}${t.contiguous === false ? ` ${l10n.t("non-contiguous")}` : ""}${t.view_of ? ` ${l10n.t("view of {0}", t.view_of)}` : t.shares_storage_of ? ` ${l10n.t("view, shares the storage of {0}", t.shares_storage_of)}` : ""}`,
    })),
  }));
  const tensors = groups.flatMap((g) => g.tensors.map((t) => t.name));
  return {
    title: stop ? `${stop.path.split(/[\\/]/).pop()}:${stop.line}` : l10n.t("stopped process"),
    stop,
    totals: { tensors: proc.tensor_count, storages: proc.storage_count, bytes, human: humanBytes(bytes) },
    devices,
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
