// The storage picture as SVG for the memory panel, drawn for the panel's width in pixels:
// the grid (storagePicture.gridPicture) when its rows fit that width, else the to-scale bar
// with one cell per few pixels. One <svg> of a fixed pixel width: rows cannot wrap apart.
// Pure string building (unit-tested); the webview calls it again when the panel resizes.
import * as l10n from "@vscode/l10n";
import { barPicture, gridPicture, Layout } from "../storagePicture";

export const CHAR_PX = 7.5; // a column of the editor font at the panel's size (grid widths are in columns)
const BAR_CELL_PX = 3; // the bar's resolution: one storage share per 3 px
const GRID_MAX_CELL_PX = 34;
const BAR_HEIGHT = 22;

export interface PictureView {
  kind: "grid" | "bar";
  svg: string;
  header: string | null; // a caption above (grid)
  footer: string; // a caption below
}

const esc = (s: string): string => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] as string);
const px = (n: number): string => String(Math.round(n * 100) / 100);

/** The picture for a panel `widthPx` wide (null: the layout cannot be pictured). */
export function pictureView(l: Layout, widthPx: number): PictureView | null {
  const width = Math.max(120, Math.floor(widthPx));
  const grid = gridPicture(l, Math.floor(width / CHAR_PX));
  if (grid) {
    const cellPx = Math.min(GRID_MAX_CELL_PX, (width - 2) / grid.row);
    const rows = Math.ceil(grid.total / grid.row);
    const font = Math.max(7, Math.min(12, cellPx / (grid.cell * 0.62)));
    const parts: string[] = [];
    for (let i = 0; i < grid.total; i++) {
      const x = 1 + (i % grid.row) * cellPx;
      const y = 1 + Math.floor(i / grid.row) * cellPx;
      const reader = grid.readers[i];
      const cls = reader === null ? "pic-free" : i === l.offset ? "pic-used pic-first" : "pic-used";
      parts.push(`<g class="pic-cell" data-element="${i}"><title>${esc(reader === null ? l10n.t("storage element {0}: not read", i) : l10n.t("storage element {0}: read by element {1}", i, reader))}</title>` +
        `<rect class="${cls}" x="${px(x)}" y="${px(y)}" width="${px(cellPx - 2)}" height="${px(cellPx - 2)}" rx="2"/>` +
        `<text class="${reader === null ? "pic-dot" : "pic-num"}" x="${px(x + (cellPx - 2) / 2)}" y="${px(y + (cellPx - 2) / 2)}" font-size="${px(font)}" text-anchor="middle" dominant-baseline="central">${reader === null ? "·" : reader}</text></g>`);
    }
    const w = 2 + grid.row * cellPx;
    const h = 2 + rows * cellPx;
    return {
      kind: "grid",
      svg: `<svg class="picture" data-kind="grid" data-row="${grid.row}" width="${px(w)}" height="${px(h)}" viewBox="0 0 ${px(w)} ${px(h)}" role="img" aria-label="${esc(grid.header)}">${parts.join("")}</svg>`,
      header: grid.header,
      footer: grid.footer,
    };
  }
  const cells = Math.max(8, Math.floor(width / BAR_CELL_PX));
  const bar = barPicture(l, cells);
  if (!bar) return null;
  const cw = width / cells;
  const runs: string[] = [];
  for (let i = 0; i < cells; ) {
    const mark = bar.marks[i];
    let j = i + 1;
    while (j < cells && bar.marks[j] === mark) j++;
    if (mark !== "free") runs.push(`<rect class="pic-${mark}" x="${px(i * cw)}" y="0" width="${px((j - i) * cw)}" height="${BAR_HEIGHT}"/>`);
    i = j;
  }
  // Labels: where the view starts (at its true position), and both ends of the storage.
  const at = Math.min(width - 1, (bar.first / bar.total) * width);
  const anchor = at < width * 0.25 ? "start" : at > width * 0.75 ? "end" : "middle";
  const h = BAR_HEIGHT + 32;
  const svg = `<svg class="picture" data-kind="bar" data-cells="${cells}" width="${width}" height="${h}" viewBox="0 0 ${width} ${h}" role="img" aria-label="${esc(bar.footer)}">` +
    `<title>${esc(bar.footer)}</title>` +
    `<rect class="pic-free" x="0" y="0" width="${width}" height="${BAR_HEIGHT}"/>${runs.join("")}` +
    `<line class="pic-tick" x1="${px(at)}" y1="0" x2="${px(at)}" y2="${BAR_HEIGHT + 4}"/>` +
    `<text class="pic-label" x="${px(at)}" y="${BAR_HEIGHT + 15}" text-anchor="${anchor}">${esc(l10n.t("{0} at element {1}", bar.used ?? l10n.t("view"), bar.first.toLocaleString("en-US")))}</text>` +
    `<text class="pic-label pic-muted" x="0" y="${BAR_HEIGHT + 29}" text-anchor="start">0</text>` +
    `<text class="pic-label pic-muted" x="${width}" y="${BAR_HEIGHT + 29}" text-anchor="end">${esc(l10n.t("{0} ({1} elements)", bar.whole, bar.total.toLocaleString("en-US")))}</text>` +
    `</svg>`;
  return { kind: "bar", svg, header: null, footer: bar.footer };
}
