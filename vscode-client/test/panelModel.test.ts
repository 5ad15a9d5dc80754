import { test } from "node:test";
import assert from "node:assert/strict";
import { buildPanelModel, findSourceLines, nameToExpression, tensorDetail } from "../src/runtime/panelModel";
import { pictureView } from "../src/runtime/webview/pictureSvg";
import { connectEndpoint, isLoopback } from "../src/runtime/address";
import { isSafeExpression } from "../src/runtime/safety";
import type { FrameReport, ProcessReport } from "../src/runtime/facts";

const SRC = `import torch
losses = []
for step in range(20):
    loss = f(x)
    losses.append(loss)  # the leak
mean = sum(v.item() for v in losses) / len(losses)
`;

test("source lines that bind or grow a name", () => {
  assert.deepEqual(findSourceLines("losses", SRC).map((r) => r.line), [2, 5]);
  assert.deepEqual(findSourceLines("loss", SRC).map((r) => r.line), [4]);
  assert.deepEqual(findSourceLines("step", SRC).map((r) => r.line), [3]);
  assert.deepEqual(findSourceLines("an unnamed list", SRC), []);
  assert.deepEqual(findSourceLines("self.cache", "self.cache = {}\nself.cache[k] = v\n").map((r) => r.line), [1, 2]);
  assert.deepEqual(findSourceLines("x", "x == 1\ny = x\nx += 1\n").map((r) => r.line), [3]);
});

const proc: ProcessReport = {
  tensor_count: 108, storage_count: 108,
  devices: [{ device: "cpu", storages: 108, tensors: 108, bytes: 8951816, graph_only_bytes: 0 }],
  top: [{ storage_key: "cpu@1", device: "cpu", bytes: 524288, tensors: 1, names: ["model.0.weight"], unnamed: 0, saved_by_graph: false },
    { storage_key: "cpu@2", device: "cpu", bytes: 262144, tensors: 1, names: [], unnamed: 1, saved_by_graph: true }],
  findings: [
    { kind: "retained_grad", tensor: "h", bytes: 10, message: "h (non-leaf) retains its grad: 10 B" },
    { kind: "graph_kept_alive", container: "losses", container_type: "list", length: 20, bytes: 7884800,
      message: "losses (list of 20) keeps 20 autograd graphs alive holding 7.5 MiB of saved tensors; store .item() or .detach() instead" },
  ],
};
const frame: FrameReport = {
  groups: [{ storage_key: "cpu@3", device: "cpu", storage_bytes: 48, summary: "a, b share one storage", tensors: [
    { name: "a", shape: [3, 4], dtype: "float32", strides: [4, 1], storage_offset: 0, contiguous: true, nbytes: 48, requires_grad: false, grad_fn: null, version: 0, is_view: false, view_of: null },
    { name: "b", shape: [2, 2], dtype: "float32", strides: [4, 1], storage_offset: 5, contiguous: false, nbytes: 16, requires_grad: false, grad_fn: null, version: 0, is_view: true, view_of: "a" },
  ] }],
  no_storage: [], tensor_count: 2, total_bytes: 48,
};

test("the panel model: devices, top, findings first by size with source links, groups", () => {
  const m = buildPanelModel(proc, frame, { path: "/w/leaky_losses.py", line: 26 }, SRC);
  assert.equal(m.title, "leaky_losses.py:26");
  assert.deepEqual(m.devices.map((d) => [d.device, d.human]), [["cpu", "8.5 MiB"]]);
  assert.equal(m.totals.tensors, 108);
  assert.equal(m.findings[0].title, "losses");
  assert.equal(m.findings[0].human, "7.5 MiB");
  assert.deepEqual(m.findings[0].refs.map((r) => r.line), [2, 5]);
  assert.equal(m.top[0].label, "model.0.weight");
  assert.equal(m.top[1].label, "1 unnamed");
  assert.ok(m.top[1].savedByGraph);
  assert.deepEqual(m.tensors, ["a", "b"]);
  assert.match(m.groups[0].tensors[1].label, /b: \(2, 2\) float32 strides \(4, 1\) offset 5 non-contiguous view of a/);
});

test("tensor detail: the layout the picture is drawn from, and the chain", () => {
  const d = tensorDetail("b", {
    type: "Tensor", shape: [2, 2], dtype: "float32", device: "cpu", layout: "strided", memory_format: null, strides: [4, 1],
    storage_offset: 5, contiguous: false, numel: 4, element_size: 4, nbytes: 16, storage_key: "k", storage_bytes: 48, notes: [],
    is_view: true, base: { shape: [3, 4], storage_offset: 0 }, version: 0, requires_grad: false, is_leaf: true, retains_grad: false,
    grad: null, grad_fn: null, grad_fn_chain: [], graph: null, cuda: null, stats: null,
  });
  assert.deepEqual(d.layout, { shape: [2, 2], strides: [4, 1], offset: 5, storageNumel: 12, elementSize: 4, dtype: "float32" });
  assert.match(d.facts, /strides \(4, 1\) · offset 5 · non-contiguous/);
});

/** The SVG's cells: [class, text] per storage element (grid) or the bar's marked rects. */
function gridCells(svg: string): [string, string][] {
  return [...svg.matchAll(/<rect class="([^"]+)"[^>]*\/><text[^>]*>([^<]*)<\/text>/g)].map((m) => [m[1], m[2]]);
}

test("panel picture: a transpose is a grid numbered in reading order, whatever the panel width", () => {
  const t = { shape: [4, 3], strides: [1, 4], offset: 0, storageNumel: 12, elementSize: 4, dtype: "float32" };
  for (const width of [200, 480, 1200]) {
    const v = pictureView(t, width);
    assert.equal(v?.kind, "grid");
    const svgWidth = Number(/width="([\d.]+)"/.exec(v!.svg)![1]);
    assert.ok(svgWidth <= width, `${svgWidth} > ${width}`);
    assert.match(v!.svg, /data-row="4"/); // rows of the outer stride: a row is one step of it
    assert.deepEqual(gridCells(v!.svg).map((c) => c[1]), ["0", "3", "6", "9", "1", "4", "7", "10", "2", "5", "8", "11"]);
  }
  const w = pictureView({ ...t, shape: [2, 2], strides: [4, 1], offset: 5 }, 480)!; // a window: unread cells stay free
  assert.deepEqual(gridCells(w.svg).filter((c) => c[0].includes("pic-used")).map((c) => c[1]), ["0", "1", "2", "3"]);
  assert.equal(gridCells(w.svg)[5][0], "pic-used pic-first");
  assert.equal(w.footer, "offset 5, strides (4, 1)");
});

test("panel picture: a small window on a big storage is a mark at its true position, both sizes labelled", () => {
  const row = { shape: [12800], strides: [1], offset: 400 * 12800, storageNumel: 1000 * 12800, elementSize: 4, dtype: "float32" };
  for (const width of [240, 600, 1400]) {
    const v = pictureView(row, width)!;
    assert.equal(v.kind, "bar");
    assert.match(v.svg, new RegExp(`width="${width}"`));
    const used = [...v.svg.matchAll(/<rect class="pic-used" x="([\d.]+)" y="0" width="([\d.]+)"/g)].map((m) => [Number(m[1]), Number(m[2])]);
    assert.equal(used.length, 1);
    const [x, w] = used[0];
    const cell = width / Math.floor(width / 3);
    assert.ok(Math.abs(x - 0.4 * width) <= cell, `mark at ${x} of ${width}`);
    assert.ok(w <= 2 * cell, `mark ${w} px wide`);
    assert.match(v.svg, /50\.0 KiB at element 5,120,000/);
    assert.match(v.svg, /48\.8 MiB \(12,800,000 elements\)/);
    assert.equal(v.footer, "reads 50.0 KiB of 48.8 MiB (0.1%) from element 5,120,000, strides (1,)");
  }
  // A narrow panel draws the transpose as a bar too (its grid rows would not fit).
  assert.equal(pictureView({ shape: [40, 4], strides: [1, 40], offset: 0, storageNumel: 160, elementSize: 4, dtype: "float32" }, 120)?.kind, "bar");
});

test("frame-report names become safe expressions", () => {
  assert.equal(nameToExpression("model.0.weight"), "model[0].weight");
  assert.equal(nameToExpression("net.layers.12.attn.bias"), "net.layers[12].attn.bias");
  assert.equal(nameToExpression("losses[3]"), "losses[3]");
  assert.equal(nameToExpression("d['k']"), "d['k']");
  for (const n of ["model.0.weight", "losses[3]", "d['k']", "x"]) assert.ok(isSafeExpression(nameToExpression(n)), n);
});

test("attach addresses: loopback only by default", () => {
  for (const h of ["127.0.0.1", "localhost", "::1", "127.3.2.1"]) assert.ok(isLoopback(h), h);
  for (const h of ["0.0.0.0", "10.0.0.2", "example.com", "128.0.0.1"]) assert.ok(!isLoopback(h), h);
});

test("attach connect endpoints: host defaults to loopback, the port must be a port number", () => {
  assert.deepEqual(connectEndpoint({ host: "127.0.0.1", port: 5678 }), { host: "127.0.0.1", port: 5678 });
  assert.deepEqual(connectEndpoint({ port: 5678 }), { host: "127.0.0.1", port: 5678 });
  assert.deepEqual(connectEndpoint({ host: "localhost", port: "5678" }), { host: "localhost", port: 5678 }); // ${input:…}
  assert.deepEqual(connectEndpoint({ host: "[::1]", port: 5678 }), { host: "::1", port: 5678 });
  for (const c of [undefined, null, "127.0.0.1:5678", {}, { port: 0 }, { port: 70000 }, { port: 56.5 }, { port: "x" }, { port: "" }]) {
    assert.ok("error" in connectEndpoint(c), JSON.stringify(c));
  }
});

test("attach connect endpoints: a remote host, also one substituted from ${input:…}, needs allowRemote", () => {
  const refused = connectEndpoint({ host: "10.0.0.2", port: "5678" });
  assert.ok("error" in refused && /not a loopback address/.test(refused.error) && /allowRemote/.test(refused.error));
  assert.deepEqual(connectEndpoint({ host: "10.0.0.2", port: 5678 }, true), { host: "10.0.0.2", port: 5678 });
  assert.deepEqual(connectEndpoint({ host: "localhost", port: "5678" }, false), { host: "localhost", port: 5678 });
});
