import { test } from "node:test";
import assert from "node:assert/strict";
import { panelHtml } from "../src/runtime/panelHtml";

test("the panel page: its scripts parse, the picture bundle is allowed by the CSP", () => {
  const page = panelHtml("vscode-resource:", "vscode-resource:/dist/webview.js");
  const scripts = [...page.matchAll(/<script nonce="([0-9a-f]+)"( id="picture-script" src="[^"]+" defer)?>([\s\S]*?)<\/script>/g)];
  assert.equal(scripts.length, 2);
  assert.equal(scripts[0][2], ' id="picture-script" src="vscode-resource:/dist/webview.js" defer');
  const nonce = scripts[0][1];
  assert.match(page, new RegExp(`script-src 'nonce-${nonce}' vscode-resource:;`));
  // A syntax error here leaves the panel empty (the e2e would only time out): parse it.
  assert.doesNotThrow(() => new Function(scripts[1][3]));
  assert.match(scripts[1][3], /vscode\.postMessage\(\{ type: "ready" \}\);\s*$/); // the host waits for it
});

// ---- the page in the user's language ---------------------------------------------------------

import { join } from "node:path";
import { buildPanelModel, tensorDetail } from "../src/runtime/panelModel";
import { loadBundle, useBundle } from "../src/locale";
import { pictureView } from "../src/runtime/webview/pictureSvg";
import { hoverMarkdown } from "../src/runtime/format";
import type { Describe, FrameReport, ProcessReport } from "../src/runtime/facts";

const ROOT = join(__dirname, "..");

const proc: ProcessReport = {
  tensor_count: 3, storage_count: 2,
  devices: [{ device: "cpu", storages: 2, tensors: 3, bytes: 1048624, graph_only_bytes: 0 }],
  top: [{ storage_key: "cpu@1", device: "cpu", bytes: 1048576, tensors: 1, names: ["big"], unnamed: 0, saved_by_graph: true }],
  findings: [{ kind: "graph_kept_alive", container: "losses", container_type: "list", length: 2, bytes: 1048576, message: "losses keeps 2 autograd graphs alive" }],
};
const frame: FrameReport = {
  groups: [{ storage_key: "cpu@3", device: "cpu", storage_bytes: 48, summary: "a, b share one storage", tensors: [
    { name: "a", shape: [3, 4], dtype: "float32", strides: [4, 1], storage_offset: 0, contiguous: true, nbytes: 48, requires_grad: false, grad_fn: null, version: 0, is_view: false, view_of: null },
    { name: "b", shape: [2, 2], dtype: "float32", strides: [4, 1], storage_offset: 5, contiguous: false, nbytes: 16, requires_grad: false, grad_fn: null, version: 0, is_view: true, view_of: "a" },
  ] }],
  no_storage: [], tensor_count: 2, total_bytes: 48,
};
const b: Describe = {
  type: "torch.Tensor", shape: [2, 2], dtype: "float32", device: "cpu", layout: "strided", memory_format: null, strides: [4, 1], storage_offset: 5,
  contiguous: false, numel: 4, element_size: 4, nbytes: 16, storage_key: "cpu@3", storage_bytes: 48, notes: [], is_view: true,
  base: { shape: [3, 4], storage_offset: 0, name: "a" }, version: 0, requires_grad: true, is_leaf: false, retains_grad: false, grad: null,
  grad_fn: "SliceBackward0", grad_fn_chain: [], graph: null, cuda: null, stats: null,
};

/** Runs the page's inline script on a stand-in DOM, sends it `messages`, returns the elements' text and HTML. */
function renderPage(page: string, messages: unknown[]): Record<string, { textContent: string; innerHTML: string }> {
  const script = [...page.matchAll(/<script nonce="[0-9a-f]+">([\s\S]*?)<\/script>/g)][0][1];
  const els: Record<string, any> = {};
  const el = (id: string) => (els[id] ??= { textContent: "", innerHTML: "", className: "", style: {}, dataset: {}, clientWidth: 600, addEventListener() {}, classList: { toggle() {} } });
  let onMessage: (e: { data: unknown }) => void = () => undefined;
  const document = { getElementById: el, querySelectorAll: () => [], body: {} };
  const window = { addEventListener: (_: string, f: typeof onMessage) => (onMessage = f), stridelensPicture: { pictureView } };
  class ResizeObserver { observe() {} }
  new Function("acquireVsCodeApi", "document", "window", "ResizeObserver", script)(() => ({ postMessage() {} }), document, window, ResizeObserver);
  for (const data of messages) onMessage({ data });
  return els;
}

const model = () => buildPanelModel(proc, frame, { path: "/w/leaky.py", line: 26 }, "losses = []\nlosses.append(loss)\n");

test("the panel page in English: headings, labels and buttons", () => {
  useBundle("en", {});
  const page = panelHtml("vscode-resource:", "vscode-resource:/dist/webview.js");
  assert.match(page, /<html lang="en">/);
  const els = renderPage(page, [{ type: "model", model: model() }, { type: "detail", detail: tensorDetail("b", b) }]);
  assert.equal(els.title.textContent, "Tensor memory · leaky.py:26");
  assert.equal(els.status.textContent, "3 live tensors in 2 storages, 1.0 MiB");
  for (const s of ["<h2>Leaks</h2>", "<h2>Per device</h2>", "<h2>Biggest storages</h2>", ">Read gradients</button>", "saved by an autograd graph", "b: (2, 2) float32 strides (4, 1) offset 5 non-contiguous view of a"]) {
    assert.ok(els.content.innerHTML.includes(s), s);
  }
  assert.match(els.detail.innerHTML, /strides \(4, 1\) · offset 5 · non-contiguous/);
});

test("the panel page with the zh-cn bundle: Chinese headings, labels, buttons and facts, the bundle passed on to the picture script", () => {
  const zh = loadBundle(ROOT, "zh-CN");
  useBundle("zh-CN", zh);
  try {
    const page = panelHtml("vscode-resource:", "vscode-resource:/dist/webview.js", zh, "zh-cn");
    assert.match(page, /<html lang="zh-cn">/);
    assert.match(page, /<title>张量内存<\/title>/);
    assert.match(page, />刷新<\/button>/);
    const json = /<script type="application\/json" id="l10n-bundle">([\s\S]*?)<\/script>/.exec(page);
    assert.ok(json);
    assert.deepEqual(JSON.parse(json[1]), zh);
    const els = renderPage(page, [{ type: "model", model: model() }, { type: "detail", detail: tensorDetail("b", b) }]);
    assert.equal(els.title.textContent, "张量内存 · leaky.py:26");
    assert.equal(els.status.textContent, "3 个存活张量，位于 2 个存储中，共 1.0 MiB");
    const html = els.content.innerHTML;
    for (const s of ["<h2>泄漏</h2>", "<h2>按设备</h2>", "<h2>选中的张量</h2>", "<h2>梯度</h2>", "<h2>内存解读</h2>", "<h2>逐步对比</h2>", "<h2>最大的存储</h2>",
      "<h2>当前帧的张量（按存储分组）</h2>", ">读取梯度</button>", ">解释内存</button>", ">继续运行并对比</button>", "被计算图保存", "第 2 行",
      "<th>设备</th>", "b: (2, 2) float32 步长 (4, 1) 偏移 5 非连续 a 的视图"]) {
      assert.ok(html.includes(s), `${s} not in ${html}`);
    }
    assert.doesNotMatch(html, /<h2>(Leaks|Per device|Biggest storages)<\/h2>/);
    assert.match(els.detail.innerHTML, /步长 \(4, 1\) · 偏移 5 · 非连续/);
    assert.match(els.detail.innerHTML, /48 B 的存储，12 个元素，每个 4 B/);
    assert.match(els.detail.innerHTML, /grad_fn 链/);
    // The picture's captions (dist/webview.js configures @vscode/l10n from the page's bundle: here the same bundle is in use).
    assert.match(els["picture-head"].textContent, /^存储 12 × float32 \(48 B\)，每行 4 个；数字：该张量读取的顺序$/);
    assert.equal(els["picture-foot"].textContent, "偏移 5，步长 (4, 1)");
    // The runtime hover card.
    const card = hoverMarkdown("b", b);
    assert.match(card, /^\*\*stridelens · 运行时\*\* `b`/);
    for (const re of [/\| 形状 \| \(2, 2\) \|/, /\| 步长 \| \(4, 1\) \|/, /\| 存储偏移 \| 5 \|/, /\| 连续 \| 否（非连续） \|/, /\| 存储 \| 48 B \(cpu@3\) \|/, /\| 视图来源 \| a \(一个形状为 \(3, 4\) 的张量\) \|/, /\| autograd \| requires\\_grad，非叶子节点 \|/]) {
      assert.match(card, re);
    }
  } finally {
    useBundle("en", {});
  }
});

// ---- rows the probe grouped (issue 32) --------------------------------------------------------

import { readFileSync } from "node:fs";

// `stridelens inspect --launch examples/runtime/leaky_losses.py --break …:26 --memory --frame --top 10 --format json`
// (tests/inspector/test_grouped_rows.py holds its rows equal to a fresh run's: the grouping is the probe's).
const leaky = JSON.parse(readFileSync(join(ROOT, "test/fixtures/memory-leaky-losses.json"), "utf8")) as { memory: ProcessReport; frame: FrameReport };

test("the panel shows the probe's rows: the graphs of losses[0..7] one row, losses[0..19] one row, graph-saved explained", () => {
  useBundle("en", {});
  const m = buildPanelModel(leaky.memory, leaky.frame, { path: "/w/leaky_losses.py", line: 26 }, null);
  assert.deepEqual(m.top.map((t) => [t.human, t.label, t.saved]), [
    ["512.0 KiB", "model.0.weight.grad", ""],
    ["512.0 KiB", "model.0.weight", ""],
    ["8 × 256.0 KiB", "", "saved by losses[0..7]'s 8 graphs, from line 21"],
  ]);
  const run = m.groups.find((g) => g.count > 1);
  assert.ok(run);
  assert.equal(run.human, "10.0 KiB");
  // `loss` is `losses[19]` (one tensor): it stays selectable, on the row of the run.
  assert.deepEqual(run.tensors, [
    { name: "losses[0]", label: "losses[0..19]: 20 × () float32, 512 B each" },
    { name: "loss", label: "loss is losses[19]" },
  ]);
  assert.equal(m.groups.filter((g) => g.count > 1).length, 1);
  assert.deepEqual(m.groups.map((g) => g.tensors.map((t) => t.name)).flat().filter((n) => /^loss/.test(n)), ["losses[0]", "loss"]);
  assert.ok(m.tensors.includes("loss"));
  assert.deepEqual(m.devices.map((d) => [d.device, d.graphSaved]), [["cpu", "7.5 MiB"]]);
  assert.equal(m.graphNote, "graph-saved: storages that live autograd graphs keep for backward (0 B of them held by nothing else: no tensor object has them)");
  const html = renderPage(panelHtml("vscode-resource:", "vscode-resource:/dist/webview.js"), [{ type: "model", model: m }]).content.innerHTML;
  for (const s of ["<th class=num>graph-saved</th>", '<td class=num>8 × 256.0 KiB</td>', "saved by losses[0..7]&#39;s 8 graphs, from line 21", "losses[0..19]: 20 × () float32, 512 B each", "loss is losses[19]", '<div class="muted graph-note">graph-saved: ']) {
    assert.ok(html.includes(s), `${s} not in the page`);
  }
  assert.equal((html.match(/class="top-row"/g) ?? []).length, 3);
  assert.equal((html.match(/class="frame-group"/g) ?? []).length, 7);
  assert.doesNotMatch(html, /graph-only|unnamed|losses\[1\]/);
});

test("the probe's rows in Chinese", () => {
  const zh = loadBundle(ROOT, "zh-CN");
  useBundle("zh-CN", zh);
  try {
    const m = buildPanelModel(leaky.memory, leaky.frame, { path: "/w/leaky_losses.py", line: 26 }, null);
    assert.equal(m.top[2].saved, "由 losses[0..7] 的 8 个计算图保存，来自第 21 行");
    assert.deepEqual(m.groups.find((g) => g.count > 1)?.tensors.map((t) => t.label), ["losses[0..19]：20 × () float32，每个 512 B", "loss 即 losses[19]"]);
  } finally {
    useBundle("en", {});
  }
});
