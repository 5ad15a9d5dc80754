// The storage picture of server/analysis/storage_picture.py, ported line for line: the same
// choice (a grid numbered by reading element for a small storage, a to-scale bar for a big
// one) and the same text, so the panel, the runtime hover and `stridelens explain` agree.
// test/storagePicture.test.ts checks it against the Python renderer itself (random layouts)
// and against the cases of tests/analysis/test_storage_picture.py. Pure: no VS Code imports;
// the webview bundles it too (src/runtime/webview/).
import * as l10n from "@vscode/l10n";
import type { Describe } from "./facts";
import { humanBytes, tuple } from "./format";

/** The largest view whose storage positions are listed one by one (beyond: its span). */
export const MAX_ENUMERATE = 1 << 16;
export const GRID_MAX_ROWS = 8;
export const USED = "█";
export const FREE = "░";
export const SPREAD = "▒";
const barLabel = (): string => l10n.t("storage ▕");
const BAR_CLOSE = "▏";

/** What the picture needs of a tensor (storage size in elements). */
export interface Layout {
  shape: number[];
  strides: number[];
  offset: number;
  storageNumel: number;
  elementSize: number | null;
  dtype: string | null;
}

export interface GridPicture {
  kind: "grid";
  total: number; // storage elements
  row: number; // storage elements per row
  cell: number; // text columns per cell (widest number + 1)
  readers: (number | null)[]; // per storage element: the first tensor element (row-major) reading it
  repeated: boolean; // some storage element is read more than once (a zero stride)
  header: string;
  footer: string;
}

export type Mark = "used" | "free" | "spread";

export interface BarPicture {
  kind: "bar";
  total: number;
  marks: Mark[]; // one per cell, each cell an equal share of the storage
  first: number; // first and last storage element read
  last: number;
  used: string | null; // "8.0 KiB" (null: too many to count, spread over the span)
  whole: string; // "48.8 MiB"
  footer: string;
}

export type Picture = GridPicture | BarPicture;

function product(xs: readonly number[]): number {
  return xs.reduce((a, b) => a * b, 1);
}

/** Storage index of each element, in the tensor's row-major order; null when too many. */
export function positionsRead(shape: readonly number[], strides: readonly number[], offset: number): number[] | null {
  if (product(shape) > MAX_ENUMERATE) return null;
  let positions = [offset];
  shape.forEach((size, k) => {
    const next: number[] = [];
    for (const p of positions) for (let i = 0; i < size; i++) next.push(p + i * strides[k]);
    positions = next;
  });
  return positions;
}

/** First and last storage index the tensor reads (non-negative strides). */
export function spanOf(shape: readonly number[], strides: readonly number[], offset: number): [number, number] {
  let last = offset;
  shape.forEach((size, k) => {
    if (size > 0) last += (size - 1) * strides[k];
  });
  return [offset, last];
}

/** The cells holding storage indices `first` and `last`, each cell an equal share. */
export function barCells(first: number, last: number, storageNumel: number, cells: number): [number, number] {
  return [cellOf(first, storageNumel, cells), Math.min(cells - 1, cellOf(last, storageNumel, cells))];
}

function cellOf(position: number, total: number, cells: number): number {
  // floor(position * cells / total) without losing integers past 2**53 (100 GiB × 200 cells is not)
  const p = BigInt(Math.floor(position)) * BigInt(cells);
  return Number(p / BigInt(Math.floor(total)));
}

/** Python's `f"{n:,}"` for an integer. */
export function grouped(n: number): string {
  return Math.trunc(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** `elements(12800)` is "12,800 elements" (storage_picture._elements), in the user's language. */
export function elements(n: number): string {
  return n === 1 ? l10n.t("{n} element", { n: grouped(n) }) : l10n.t("{n} elements", { n: grouped(n) });
}

const WIDE: [number, number][] = [
  [0x1100, 0x115f], [0x2e80, 0x303e], [0x3041, 0x33ff], [0x3400, 0x4dbf], [0x4e00, 0x9fff], [0xa000, 0xa4cf], [0xac00, 0xd7a3],
  [0xf900, 0xfaff], [0xfe30, 0xfe4f], [0xff00, 0xff60], [0xffe0, 0xffe6], [0x1f300, 0x1f64f], [0x1f900, 0x1f9ff], [0x20000, 0x3fffd],
];

/** Terminal columns `text` takes: CJK characters take two (i18n.columns: East Asian Wide and Fullwidth). */
export function columns(text: string): number {
  let n = 0;
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    n += WIDE.some(([lo, hi]) => c >= lo && c <= hi) ? 2 : 1;
  }
  return n;
}

/** The longest start of `text` within `width` columns. */
function clip(text: string, width: number): string {
  let chars = [...text];
  while (columns(chars.join("")) > width) chars = chars.slice(0, -1);
  return chars.join("");
}

/** Python's `f"{x:.2g}"`. */
export function general2(x: number): string {
  if (x === 0) return "0";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : x < 0 ? "-inf" : "nan";
  const [mantissa, exp] = x.toExponential(1).split("e");
  const e = Number(exp);
  if (e < -4 || e >= 2) {
    const m = mantissa.replace(/\.0$/, "");
    return `${m}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  return x.toFixed(Math.max(0, 1 - e)).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
}

/** `100%`, `48%` (never rounded up to a whole it is not), `2.5%`, `0.13%`, `<0.01%`: as storage_picture.py. */
export function percent(part: number, whole: number): string {
  if (part >= whole) return "100%";
  const share = (100 * part) / whole;
  if (share >= 10) return `${Math.floor(share)}%`;
  return share >= 0.01 ? `${general2(share)}%` : "<0.01%";
}

/** `text` in lines of at most `width` columns, broken at spaces, as storage_picture.py's
 * `_wrap`: a number or a parenthesised stride tuple is never cut; the rest of a line is
 * indented by two, and a run wider than a line breaks at the last column that fits. */
export function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.match(/\S*\([^()]*\)\S*|\S+/g) ?? []) {
    const joined = line ? `${line} ${word}` : word;
    if (columns(joined) <= width || !line) {
      line = joined;
      continue;
    }
    lines.push(line);
    line = "  " + word;
  }
  lines.push(line);
  const out: string[] = [];
  for (let x of lines) {
    while (columns(x) > width) {
      const head = clip(x, width);
      out.push(head);
      x = "  " + [...x].slice([...head].length).join("");
    }
    out.push(x);
  }
  return out;
}

/** Whether the layout can be pictured (known, non-empty, non-negative strides). */
function pictured(l: Layout): boolean {
  return l.shape.length === l.strides.length && product(l.shape) > 0 && l.storageNumel > 0 && l.strides.every((s) => s >= 0);
}

/** The grid for a storage of at most 192 elements, if one fits `width` columns. */
export function gridPicture(l: Layout, width: number): GridPicture | null {
  const total = l.storageNumel;
  if (!pictured(l) || total > GRID_MAX_ROWS * 24) return null;
  const order = positionsRead(l.shape, l.strides, l.offset);
  if (order === null) return null;
  const readers: (number | null)[] = new Array(total).fill(null);
  const seen = new Set<number>();
  let repeated = false;
  order.forEach((position, number) => {
    if (seen.has(position)) repeated = true;
    else {
      seen.add(position);
      if (position < total) readers[position] = number;
    }
  });
  const cell = String(order.length - 1).length + 1;
  // Rows of one of the tensor's strides (largest first), so each row is one step of it.
  const strides = [...new Set(l.shape.flatMap((size, k) => (size > 1 && l.strides[k] > 1 && l.strides[k] < total ? [l.strides[k]] : [])))];
  const candidates = [...strides.sort((a, b) => b - a), total];
  const row = candidates.find((r) => Math.ceil(total / r) <= GRID_MAX_ROWS && 2 + r * cell <= width);
  if (row === undefined) return null;
  const size = `${total} × ${l.dtype ?? "?"}` + (l.elementSize !== null ? ` (${humanBytes(total * l.elementSize)})` : "");
  const rows = row < total ? l10n.t(" in rows of {n}", { n: row }) : "";
  let header = l10n.t("storage {size}{rows}; numbers: the order this tensor reads", { size, rows });
  if (columns(header) > width) header = l10n.t("storage {size}{rows}", { size, rows });
  let footer = l10n.t("offset {offset}, strides {strides}", { offset: l.offset, strides: tuple(l.strides) });
  if (repeated) footer += l10n.t("; some elements are read more than once");
  return { kind: "grid", total, row, cell, readers, repeated, header: clip(header, width), footer };
}

/** The to-scale bar of `cells` cells. */
export function barPicture(l: Layout, cells: number): BarPicture | null {
  if (!pictured(l)) return null;
  const total = l.storageNumel;
  const numel = product(l.shape);
  const [first, spanLast] = spanOf(l.shape, l.strides, l.offset);
  const last = Math.min(spanLast, total - 1);
  const order = positionsRead(l.shape, l.strides, l.offset);
  const marks: Mark[] = new Array(cells).fill("free");
  let read: number | null;
  if (order !== null) {
    const unique = new Set(order);
    for (const p of unique) if (p < total) marks[cellOf(p, total, cells)] = "used";
    read = unique.size;
  } else {
    // Too many to list: the span is marked; solid only when the tensor reads all of it.
    const [lo, hi] = barCells(first, last, total, cells);
    const dense = last - first + 1 === numel;
    for (let i = lo; i <= hi; i++) marks[i] = dense ? "used" : "spread";
    read = dense ? numel : null;
  }
  const element = l.elementSize;
  const used = read !== null ? (element ? humanBytes(read * element) : elements(read)) : null;
  const whole = element ? humanBytes(total * element) : elements(total);
  const share = read !== null ? ` (${percent(read, total)})` : "";
  let what: string;
  if (used !== null) what = l10n.t("reads {used} of {whole}{share}", { used, whole, share });
  else {
    // the tensor's own size: `numel` elements, wherever they lie in the span
    what = l10n.t("reads {size} spread over {whole}", { size: elements(numel) + (element ? ` (${humanBytes(numel * element)})` : ""), whole });
  }
  const footer = l10n.t("{what} from element {first}, strides {strides}", { what, first: grouped(first), strides: tuple(l.strides) });
  return { kind: "bar", total, marks, first, last, used, whole, footer };
}

/** What the storage picture needs of a described tensor (null: its layout is not known). */
export function describedLayout(d: Describe): Layout | null {
  if (!d.shape || !d.strides || d.storage_offset === null || d.storage_bytes === null || !d.element_size) return null;
  return { shape: d.shape, strides: d.strides, offset: d.storage_offset, storageNumel: Math.floor(d.storage_bytes / d.element_size), elementSize: d.element_size, dtype: d.dtype };
}

/** The picture for `width` text columns: the grid when one fits, else the bar (null: unknown layout). */
export function storagePicture(l: Layout, width = 78): Picture | null {
  if (!pictured(l)) return null;
  return gridPicture(l, width) ?? barPicture(l, Math.max(8, width - columns(barLabel()) - BAR_CLOSE.length));
}

const MARK_CHAR: Record<Mark, string> = { used: USED, free: FREE, spread: SPREAD };

/** The picture as monospace lines, each at most `width` columns: what `stridelens explain` prints. */
export function pictureLines(l: Layout, width = 78): string[] {
  const p = storagePicture(l, width);
  if (!p) return [];
  if (p.kind === "bar") return [`${barLabel()}${p.marks.map((m) => MARK_CHAR[m]).join("")}${BAR_CLOSE}`, ...wrap(p.footer, width)];
  const lines = [p.header];
  for (let start = 0; start < p.total; start += p.row) {
    const row = p.readers.slice(start, Math.min(start + p.row, p.total));
    lines.push("  " + row.map((r) => (r === null ? "·" : String(r)).padStart(p.cell)).join(""));
  }
  lines.push(...wrap(p.footer, width));
  return lines;
}
