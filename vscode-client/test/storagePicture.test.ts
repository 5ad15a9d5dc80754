import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { general2, Layout, percent, pictureLines, storagePicture, USED } from "../src/runtime/storagePicture";
import { humanBytes } from "../src/runtime/format";

const GiB = 2 ** 30;

function layout(shape: number[], strides: number[], offset: number, storage: number, element = 4): Layout {
  const dtype = ({ 1: "uint8", 4: "float32" } as Record<number, string>)[element] ?? "float64";
  return { shape, strides, offset, storageNumel: storage, elementSize: element, dtype };
}

/** A small deterministic PRNG (mulberry32): the same random layouts every run. */
function rng(seed: number): (lo: number, hi: number) => number {
  let a = seed >>> 0;
  return (lo, hi) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const r = ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    return lo + Math.floor(r * (hi - lo + 1));
  };
}

/** Random layouts as tests/analysis/test_storage_picture.py draws them (hypothesis there). */
function randomLayouts(n: number, seed = 1): { l: Layout; width: number }[] {
  const r = rng(seed);
  const out: { l: Layout; width: number }[] = [];
  for (let k = 0; k < n; k++) {
    const rank = r(1, 4);
    const shape = Array.from({ length: rank }, () => r(1, 40));
    const strides = Array.from({ length: rank }, () => (r(0, 3) === 0 ? r(0, 4) : r(0, 5000)));
    const offset = r(0, 3) === 0 ? r(0, 20) : r(0, 1e9);
    const span = shape.reduce((s, size, i) => s + (size - 1) * strides[i], 0);
    const extra = [0, r(0, 200), r(0, 1e6), r(0, 1e11)][r(0, 3)];
    const storage = (k % 3 === 0 ? r(0, 20) : offset) + span + 1 + extra;
    out.push({ l: layout(shape, strides, Math.min(offset, storage - span - 1), storage, [1, 4, 8][r(0, 2)]), width: r(40, 140) });
  }
  return out;
}

test("no row is wider than asked", () => {
  for (const { l, width } of randomLayouts(600)) {
    const lines = pictureLines(l, width);
    assert.ok(lines.length, `a known layout always gets a picture: ${JSON.stringify(l)}`);
    for (const line of lines) assert.ok(line.length <= width, `${line.length} > ${width}: ${line}`);
  }
});

const SIZES = [1, 100, 1 << 10, 1 << 20, GiB, 100 * GiB];

test("a window is marked at its true position, 1 B to 100 GiB", () => {
  for (const storage of SIZES) {
    for (const where of [0.0, 0.13, 0.5, 0.999]) {
      for (const want of [1, 8 << 10, GiB]) {
        const length = Math.min(want, storage);
        const offset = Math.min(Math.floor(storage * where), storage - length);
        const lines = pictureLines(layout([length], [1], offset, storage, 1), 80);
        const name = `${length} B at ${offset} of ${storage} B`;
        if (!lines[0].startsWith("storage ▕")) { // a small storage is drawn cell by cell
          const cells = lines.slice(1, -1).join(" ").split(/\s+/).filter(Boolean);
          assert.equal(cells.length, storage, name);
          assert.deepEqual(cells.flatMap((c, i) => (c !== "·" ? [i] : [])), Array.from({ length }, (_, i) => offset + i), name);
          continue;
        }
        const bar = lines[0];
        assert.ok(bar.endsWith("▏"), name);
        const cells = [...bar.slice("storage ▕".length, -1)];
        const marked = cells.flatMap((c, i) => (c !== "░" ? [i] : []));
        // The first and last marked cells hold the window's first and last byte, within a cell.
        assert.ok(Math.abs(marked[0] - (offset * cells.length) / storage) < 1, name);
        assert.ok(Math.abs(marked[marked.length - 1] - ((offset + length - 1) * cells.length) / storage) < 1, name);
        for (let i = marked[0]; i <= marked[marked.length - 1]; i++) assert.equal(cells[i], USED, `${name}: a dense window`);
        if (storage > 1 << 20) assert.match(lines[1], /of .*(GiB|MiB)/, name);
      }
    }
  }
});

test("8 KiB of a big activation says both sizes", () => {
  const lines = pictureLines(layout([2048], [1], 6_000_000, 12_800_000), 80);
  assert.match(lines[1], /^reads 8\.0 KiB of 48\.8 MiB \(0\.016%\) from element 6,000,000, strides \(1,\)$/);
  assert.equal([...lines[0]].filter((c) => c === USED).length, 1);
});

/** torch.arange(12.0).reshape(3, 4) and views of it: shape, strides, offset (torch's own). */
const VIEWS: Record<string, [number[], number[], number]> = {
  transpose: [[4, 3], [1, 4], 0], // base.t()
  "step-slice": [[3, 2], [4, 2], 0], // base[:, ::2]
  window: [[2, 2], [4, 1], 5], // base[1:, 1:3]
  permute: [[2, 2, 3], [1, 6, 2], 0], // base.reshape(2, 3, 2).permute(2, 0, 1)
};

test("a small tensor shows which element reads each cell", () => {
  for (const [name, [shape, strides, offset]] of Object.entries(VIEWS)) {
    const lines = pictureLines(layout(shape, strides, offset, 12), 78);
    const cells = lines.slice(1, -1).join(" ").split(/\s+/).filter(Boolean);
    assert.equal(cells.length, 12, name);
    // Expected by walking the indices the long way (row-major), the first reader wins.
    const expected: string[] = new Array(12).fill("·");
    const idx = shape.map(() => 0);
    for (let n = 0; n < shape.reduce((a, b) => a * b, 1); n++) {
      const pos = offset + idx.reduce((s, i, k) => s + i * strides[k], 0);
      if (expected[pos] === "·") expected[pos] = String(n);
      for (let k = shape.length - 1; k >= 0 && ++idx[k] === shape[k]; k--) idx[k] = 0;
    }
    assert.deepEqual(cells, expected, name);
    assert.ok(lines[lines.length - 1].startsWith(`offset ${offset}, strides (${strides.join(", ")})`), name);
  }
  assert.deepEqual(pictureLines(layout([4, 3], [1, 4], 0, 12), 78), [
    "storage 12 × float32 (48 B) in rows of 4; numbers: the order this tensor reads",
    "    0  3  6  9",
    "    1  4  7 10",
    "    2  5  8 11",
    "offset 0, strides (1, 4)",
  ]);
});

test("the panel's widths: a grid when its rows fit, else the bar", () => {
  const t = layout([4, 3], [1, 4], 0, 12);
  assert.equal(storagePicture(t, 78)?.kind, "grid");
  assert.equal(storagePicture(t, 10)?.kind, "bar"); // 2 + 4 cells of 3 columns do not fit 10
  assert.equal(storagePicture(layout([2048], [1], 0, 12_800_000), 400)?.kind, "bar");
  assert.equal(storagePicture(layout([0], [1], 0, 12), 78), null);
  assert.equal(storagePicture(layout([2], [-1], 1, 12), 78), null);
});

test("the share of the storage as a percentage, as storage_picture.py writes it", () => {
  const GiB = 2 ** 30;
  for (const [part, whole, text] of [
    [32768, 32768, "100%"], [32767, 32768, "99%"], [4000, 10000, "40%"],
    [250, 10000, "2.5%"], [2048, 12_800_000, "0.016%"], [1, 100 * GiB, "<0.01%"],
  ] as const) {
    assert.equal(percent(part, whole), text, `${part} of ${whole}`);
  }
});

test("Python's number formats", () => {
  assert.equal(general2(0.016384), "0.016");
  assert.equal(general2(100), "1e+02");
  assert.equal(general2(50), "50");
  assert.equal(general2(0.5), "0.5");
  assert.equal(general2(2), "2");
  assert.equal(general2(0.00001), "1e-05");
  assert.equal(humanBytes(1280), "1.2 KiB"); // a tie: half to even, as Python rounds
  assert.equal(humanBytes(1 << 30), "1.0 GiB");
});

/** Small strided layouts (storages of up to 192 elements): the grid's cases. */
function smallLayouts(n: number, seed = 3): { l: Layout; width: number }[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const rank = r(1, 3);
    const shape = Array.from({ length: rank }, () => r(1, 6));
    const strides = Array.from({ length: rank }, () => r(0, 8));
    const offset = r(0, 10);
    const span = shape.reduce((s, size, i) => s + (size - 1) * strides[i], 0);
    return { l: layout(shape, strides, offset, Math.min(192, offset + span + 1 + r(0, 30)), 4), width: r(20, 100) };
  });
}

test("small layouts: rows within the width", () => {
  for (const { l, width } of smallLayouts(300)) for (const line of pictureLines(l, width)) assert.ok(line.length <= width, line);
});

// The Python renderer itself (the CLI's and the hover's): the same lines for the same layouts.
const PYTHON = process.env.STRIDELENS_BUILD_PYTHON ?? resolve(__dirname, "../../.venv/bin/python");
const RENDER = `
import json, sys
from stridelens.server.analysis.facts import TensorFact
from stridelens.server.analysis.storage_picture import render_storage_picture
out = []
for c in json.load(sys.stdin):
    f = TensorFact(shape=tuple(c["shape"]), strides=tuple(c["strides"]), storage_offset=c["offset"],
                   storage_numel=c["storageNumel"], element_size=c["elementSize"], dtype=c["dtype"])
    out.append(render_storage_picture(f, width=c["width"]))
print(json.dumps(out))
`;

test("the same lines as server/analysis/storage_picture.py", { skip: !existsSync(PYTHON) && `no ${PYTHON}` }, () => {
  const cases = [
    ...randomLayouts(400, 7).map(({ l, width }) => ({ ...l, width })),
    ...smallLayouts(300, 11).map(({ l, width }) => ({ ...l, width })),
    ...Object.values(VIEWS).map(([shape, strides, offset]) => ({ ...layout(shape, strides, offset, 12), width: 78 })),
    ...SIZES.map((s) => ({ ...layout([Math.min(8192, s)], [1], Math.floor(s / 3), Math.floor(s / 3) + Math.min(8192, s) + s), width: 64 })),
  ];
  const r = spawnSync(PYTHON, ["-c", RENDER], { input: JSON.stringify(cases), encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  const python: string[][] = JSON.parse(r.stdout);
  cases.forEach((c, i) => assert.deepEqual(pictureLines(c, c.width), python[i], JSON.stringify(c)));
});
