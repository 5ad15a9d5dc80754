// Formatting of runtime facts (inline text, hover card), and the comparison with the static
// analysis. Pure: no VS Code imports, unit-tested.
import * as l10n from "@vscode/l10n";
import type { ChainNode, Describe, Member, StaticFacts } from "./facts";
import { describedLayout, pictureLines } from "./storagePicture";

export function humanBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${oneDecimal(v)} ${units[i]}`;
}

/** `x.toFixed(1)` with Python's tie rule (half to even: 1.25 -> "1.2"), as server/units.py prints. */
function oneDecimal(x: number): string {
  const twenty = x * 20;
  if (Number.isInteger(twenty) && !Number.isInteger(x * 10)) {
    const down = Math.floor(x * 10);
    return ((down % 2 === 0 ? down : down + 1) / 10).toFixed(1);
  }
  return x.toFixed(1);
}

/** A Python tuple: (2, 2), (12,), (). */
export function tuple(xs: readonly (number | string)[] | null | undefined): string {
  if (!xs) return "?";
  if (xs.length === 1) return `(${xs[0]},)`;
  return `(${xs.join(", ")})`;
}

/** The facts one inline line or card shows, in order (shape first). */
export interface RuntimeLike {
  shape: number[] | null;
  dtype: string;
  device?: string | null;
  strides: number[] | null;
  storage_offset: number | null;
  contiguous: boolean | null;
  is_view?: boolean;
  view_of?: string | null;
  shares_storage_of?: string | null;
  grad_fn: string | null;
}

export interface Mismatch {
  fact: "shape" | "dtype" | "device" | "strides" | "offset" | "contiguous";
  runtime: string;
  expected: string;
}

function sameSeq(a: readonly (number | string)[], b: readonly (number | string)[]): boolean {
  if (a.length !== b.length) return false;
  // A symbolic dimension (a string such as "B") matches anything.
  return a.every((x, i) => typeof b[i] !== "number" || typeof x !== "number" || x === b[i]);
}

/** Facts where runtime and static analysis disagree (unknown static facts never disagree). */
export function compareWithStatic(rt: RuntimeLike, st: StaticFacts | null | undefined): Mismatch[] {
  if (!st) return [];
  const out: Mismatch[] = [];
  if (st.shape && rt.shape && !sameSeq(rt.shape, st.shape)) {
    out.push({ fact: "shape", runtime: tuple(rt.shape), expected: tuple(st.shape) });
  }
  if (st.dtype && rt.dtype && st.dtype !== rt.dtype) {
    out.push({ fact: "dtype", runtime: rt.dtype, expected: st.dtype });
  }
  if (st.device && rt.device && st.device !== rt.device && !(st.device === "cuda" && rt.device.startsWith("cuda"))) {
    out.push({ fact: "device", runtime: rt.device, expected: st.device });
  }
  if (st.strides && rt.strides && !sameSeq(rt.strides, st.strides)) {
    out.push({ fact: "strides", runtime: tuple(rt.strides), expected: tuple(st.strides) });
  }
  if (typeof st.storage_offset === "number" && typeof rt.storage_offset === "number" && st.storage_offset !== rt.storage_offset) {
    out.push({ fact: "offset", runtime: String(rt.storage_offset), expected: String(st.storage_offset) });
  }
  if (typeof st.contiguous === "boolean" && typeof rt.contiguous === "boolean" && st.contiguous !== rt.contiguous) {
    out.push({
      fact: "contiguous",
      runtime: rt.contiguous ? l10n.t("contiguous") : l10n.t("non-contiguous"),
      expected: st.contiguous ? l10n.t("contiguous") : l10n.t("non-contiguous"),
    });
  }
  return out;
}

export const MISMATCH_MARK = "⚠";

/** A fact's name in the user's language (a mismatch's tooltip). */
export function factName(fact: Mismatch["fact"]): string {
  return {
    shape: l10n.t("shape"), dtype: "dtype", device: l10n.t("device"), strides: l10n.t("strides"), offset: l10n.t("storage offset"), contiguous: l10n.t("contiguity"),
  }[fact];
}
/** Columns of the storage picture in a hover (server/lsp/hover.py HOVER_PICTURE_WIDTH). */
export const HOVER_PICTURE_WIDTH = 64;

/** The facts as short parts: shape · dtype · device · strides · offset · contiguity · view-of · grad_fn. */
export function factParts(rt: RuntimeLike, mismatches: Mismatch[] = []): string[] {
  const bad = new Map(mismatches.map((m) => [m.fact, m]));
  const mark = (fact: Mismatch["fact"], text: string): string => {
    const m = bad.get(fact);
    return m ? `${MISMATCH_MARK}${l10n.t("{0} (static: {1})", text, m.expected)}` : text;
  };
  const parts = [mark("shape", tuple(rt.shape)), mark("dtype", rt.dtype)];
  if (rt.device) parts.push(mark("device", rt.device));
  if (rt.strides) parts.push(mark("strides", l10n.t("strides {0}", tuple(rt.strides))));
  if (rt.storage_offset !== null && rt.storage_offset !== undefined) {
    parts.push(mark("offset", l10n.t("offset {0}", rt.storage_offset)));
  }
  if (rt.contiguous !== null && rt.contiguous !== undefined) {
    parts.push(mark("contiguous", rt.contiguous ? l10n.t("contiguous") : l10n.t("non-contiguous")));
  }
  if (rt.view_of) parts.push(l10n.t("view of {0}", rt.view_of));
  else if (rt.is_view && rt.shares_storage_of) parts.push(l10n.t("view, shares the storage of {0}", rt.shares_storage_of));
  else if (rt.is_view) parts.push(l10n.t("view"));
  if (rt.grad_fn) parts.push(`grad_fn ${rt.grad_fn}`);
  return parts;
}

/** One tensor variable's inline text: `b: (2, 2) · float32 · cpu · strides (4, 1) · …`. */
export function inlineText(name: string, member: Member, device: string | null, st?: StaticFacts | null): { text: string; mismatches: Mismatch[] } {
  const rt: RuntimeLike = { ...member, device };
  const mismatches = compareWithStatic(rt, st);
  return { text: `${name}: ${factParts(rt, mismatches).join(" · ")}`, mismatches };
}

/** Several variables on one line, each trimmed so the line stays readable. */
export function joinInline(texts: string[], maxLength = 240): string {
  const joined = texts.join("   ");
  return joined.length <= maxLength ? joined : joined.slice(0, maxLength - 1) + "…";
}

export function chainLines(chain: ChainNode[], limit = 12): string[] {
  const lines = chain.slice(0, limit).map((n) => `${"  ".repeat(n.depth)}${n.name}${n.next.length ? ` → ${n.next.join(", ")}` : ""}`);
  if (chain.length > limit) lines.push(l10n.t("… {0} more", chain.length - limit));
  return lines;
}

function md(text: string): string {
  return text.replace(/([\\`*_{}[\]<>|])/g, "\\$1");
}

/** The runtime card (markdown) for a hover on `expr`. */
export function hoverMarkdown(expr: string, d: Describe, st?: StaticFacts | null): string {
  const mismatches = compareWithStatic(d, st);
  const rows: [string, string][] = [];
  const bad = new Map(mismatches.map((m) => [m.fact, m]));
  const cell = (fact: Mismatch["fact"], text: string) => {
    const m = bad.get(fact);
    return m ? `${MISMATCH_MARK} ${l10n.t("{0} (static analysis expected {1})", text, m.expected)}` : text;
  };
  rows.push([l10n.t("shape"), cell("shape", tuple(d.shape))]);
  rows.push(["dtype", cell("dtype", d.dtype)]);
  rows.push([l10n.t("device"), cell("device", d.device)]);
  if (d.strides) rows.push([l10n.t("strides"), cell("strides", tuple(d.strides))]);
  if (d.storage_offset !== null) rows.push([l10n.t("storage offset"), cell("offset", String(d.storage_offset))]);
  if (d.contiguous !== null) rows.push([l10n.t("contiguous"), cell("contiguous", d.contiguous ? l10n.t("yes") : l10n.t("no (non-contiguous)"))]);
  if (d.memory_format && d.memory_format !== "contiguous") rows.push([l10n.t("memory format"), d.memory_format]);
  rows.push([l10n.t("size"), `${d.numel} × ${d.element_size} B = ${humanBytes(d.nbytes)}`]);
  if (d.storage_bytes !== null) rows.push([l10n.t("storage"), `${humanBytes(d.storage_bytes)}${d.storage_key ? ` (${d.storage_key})` : ""}`]);
  if (d.is_view) {
    const shape = d.base ? l10n.t("a tensor of shape {0}", tuple(d.base.shape)) : l10n.t("another tensor");
    // Named only when the base is that tensor (`t._base is a`); else who shares its storage.
    const base = d.base?.name ? `${d.base.name} (${shape})`
      : d.base?.shares_with ? l10n.t("an unnamed tensor of shape {0}; shares the storage of {1}", tuple(d.base.shape), d.base.shares_with)
      : shape;
    rows.push([l10n.t("view of"), base]);
  }
  const grad: string[] = [];
  grad.push(d.requires_grad ? "requires_grad" : l10n.t("no grad"));
  if (d.requires_grad) grad.push(d.is_leaf ? l10n.t("leaf") : l10n.t("non-leaf"));
  if (d.retains_grad) grad.push("retains_grad");
  if (d.grad) grad.push(`.grad ${tuple(d.grad.shape)} ${humanBytes(d.grad.nbytes)}`);
  rows.push(["autograd", grad.join(l10n.t(", "))]);
  if (d.grad_fn) rows.push(["grad_fn", d.grad_fn]);
  if (d.graph) rows.push([l10n.t("graph"), l10n.t("{0} nodes, {1} saved tensors, {2} saved", d.graph.nodes, d.graph.saved_tensors, humanBytes(d.graph.saved_bytes))]);
  if (d.version !== null && d.version !== undefined) rows.push([l10n.t("version"), String(d.version)]);
  const lines = [`**stridelens · ${l10n.t("runtime")}** \`${expr.replace(/`/g, "'")}\``, "", "| | |", "|---|---|"];
  for (const [k, v] of rows) lines.push(`| ${k} | ${md(v)} |`);
  const layout = describedLayout(d);
  const picture = layout ? pictureLines(layout, HOVER_PICTURE_WIDTH) : [];
  if (picture.length) lines.push("", "```text", ...picture, "```");
  if (d.grad_fn_chain.length) {
    lines.push("", l10n.t("grad_fn chain:"), "```", ...chainLines(d.grad_fn_chain, 8), "```");
  }
  const notes = [...new Set(d.notes)];
  if (notes.length) {
    lines.push("");
    for (const n of notes) lines.push(`- ${md(n)}`);
  }
  return lines.join("\n");
}

/** A list/tuple/dict of tensors in the frame: `losses: 20 tensors · each () float32 · grad_fn MseLossBackward0`. */
export function containerText(name: string, items: Member[]): string {
  const n = items.length;
  const count = `${n}${n >= 64 ? "+" : ""}`;
  const parts = [`${name}: ${n === 1 ? l10n.t("{0} tensor", count) : l10n.t("{0} tensors", count)}`];
  const first = items[0];
  if (first && items.every((m) => tuple(m.shape) === tuple(first.shape) && m.dtype === first.dtype)) {
    parts.push(l10n.t("each {0} {1}", tuple(first.shape), first.dtype));
    const fns = new Set(items.map((m) => m.grad_fn));
    if (fns.size === 1 && first.grad_fn) parts.push(`grad_fn ${first.grad_fn}`);
  } else {
    parts.push(humanBytes(items.reduce((s, m) => s + m.nbytes, 0)));
  }
  return parts.join(" · ");
}
