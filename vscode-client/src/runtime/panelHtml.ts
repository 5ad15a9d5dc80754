// The memory panel's webview page (HTML, CSS and its inline script): no VS Code imports, so
// the unit tests can check that its script parses. Its words are the extension's (l10n.t, in the
// language chosen in locale.ts), put into the script as `S`; the l10n bundle itself goes along
// for dist/webview.js (the picture's captions).
import * as l10n from "@vscode/l10n";
import { randomBytes } from "node:crypto";
import type { Bundle } from "../locale";

/** The page's words, read when the page is made (raw text: the script escapes them). */
export function panelStrings() {
  return {
    title: l10n.t("Tensor memory"),
    running: l10n.t("The debuggee is running: these facts are from the last stop. Stop again and press Refresh."),
    refresh: l10n.t("Refresh"),
    loading: l10n.t("loading…"),
    totals: l10n.t("{0} live tensors in {1} storages, {2}"),
    leaks: l10n.t("Leaks"),
    noLeak: l10n.t("no leak pattern found"),
    line: l10n.t("line {0}"),
    perDevice: l10n.t("Per device"),
    device: l10n.t("device"),
    bytes: l10n.t("bytes"),
    storages: l10n.t("storages"),
    tensors: l10n.t("tensors"),
    graphSaved: l10n.t("graph-saved"),
    selected: l10n.t("Selected tensor"),
    clickTensor: l10n.t("click a tensor below"),
    gradients: l10n.t("Gradients"),
    readGrads: l10n.t("Read gradients"),
    gradsHelp: l10n.t("grad norm, grad/weight, NaN/Inf, zeros and missing grads per parameter of the frame's nn.Modules, as {0} (reads gradient and weight values)"),
    memoryExplained: l10n.t("Memory explained"),
    explainMemory: l10n.t("Explain memory"),
    cudaHelp: l10n.t("the CUDA allocator's allocated, reserved, peak, inactive split, retries and OOMs, each with what it means, and the share the live tensors account for (on a CPU-only target: the process RSS), as {0}"),
    stepDiff: l10n.t("Step diff"),
    steps: l10n.t("steps"),
    runDiff: l10n.t("Run on and diff"),
    diffHelp: l10n.t("continues the program until this line has been hit N more times, then the storages new and alive, grouped by what keeps them, with growth per step, as {0}"),
    biggest: l10n.t("Biggest storages"),
    frameTensors: l10n.t("This frame's tensors by storage"),
    noFrameTensors: l10n.t("no tensors in this frame"),
    readingGrads: l10n.t("reading gradients…"),
    runningDiff: l10n.t("running…"),
    readingAllocator: l10n.t("reading the allocator…"),
    reading: l10n.t("reading {0}…"),
    chain: l10n.t("grad_fn chain"),
    noChain: l10n.t("none (no autograd history)"),
    parameter: l10n.t("parameter"),
    shape: l10n.t("shape"),
    gradNorm: l10n.t("grad norm"),
    zeros: l10n.t("zeros"),
    grad: l10n.t("grad"),
    gradsFine: l10n.t("No collapse, explosion, NaN/Inf or missing gradient found."),
    keptBy: l10n.t("kept by"),
    kind: l10n.t("kind"),
    new: l10n.t("new"),
    bytesPerStop: l10n.t("bytes per stop"),
    perStep: l10n.t("per step"),
    value: l10n.t("value"),
    meaning: l10n.t("what it means"),
    noPicture: l10n.t("no picture for this layout"),
    readingProcess: l10n.t("reading the process…"),
    error: l10n.t("error: {0}"),
  };
}

/** JSON inside a <script>: no `</script>` can end it early. */
const scriptJson = (v: unknown): string => JSON.stringify(v).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
const escHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] as string);

/**
 * The webview's page: `cspSource` may load `pictureScript` (dist/webview.js); `bundle` is the
 * l10n bundle in use (locale.ts), `lang` its language ("zh-cn", "en").
 */
export function panelHtml(cspSource: string, pictureScript: string, bundle: Bundle = {}, lang = "en"): string {
  const nonce = randomBytes(16).toString("hex");
  const S = panelStrings();
  return `<!DOCTYPE html>
<html lang="${escHtml(lang)}"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}' ${cspSource};">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>${escHtml(S.title)}</title>
<style nonce="${nonce}">
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 12px 24px; }
h1 { font-size: 1.25em; margin: 10px 0 4px; } h2 { font-size: 1.05em; margin: 16px 0 6px; border-bottom: 1px solid var(--vscode-panel-border); }
table { border-collapse: collapse; } td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; } th { font-weight: 600; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
table.grads td.mono, table.cuda td:nth-child(-n+2), table.diff td:not(:nth-child(4)) { white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; } /* a narrow panel scrolls a wide table instead of cutting it */
#diff-n { width: 4em; }
.finding { border-left: 3px solid var(--vscode-editorWarning-foreground); padding: 4px 8px; margin: 6px 0; background: var(--vscode-textBlockQuote-background); }
.finding .name { font-weight: 700; font-family: var(--vscode-editor-font-family); }
a { color: var(--vscode-textLink-foreground); cursor: pointer; text-decoration: none; } a:hover { text-decoration: underline; }
code, .mono { font-family: var(--vscode-editor-font-family); }
.muted { color: var(--vscode-descriptionForeground); }
.banner { padding: 4px 8px; background: var(--vscode-inputValidation-infoBackground); display: none; }
.tensor { cursor: pointer; } .tensor.sel { background: var(--vscode-list-activeSelectionBackground); color: var(--vscode-list-activeSelectionForeground); }
.picture-box { margin: 6px 0; width: 100%; overflow: hidden; }
svg.picture { display: block; font-family: var(--vscode-editor-font-family); }
.pic-free { fill: var(--vscode-editorWidget-background); stroke: var(--vscode-panel-border); stroke-width: 1; }
.pic-used { fill: var(--vscode-charts-blue, #3794ff); }
.pic-spread { fill: var(--vscode-charts-blue, #3794ff); fill-opacity: 0.45; }
.pic-first { stroke: var(--vscode-charts-orange, #d18616); stroke-width: 2; }
.pic-num { fill: #fff; } .pic-dot { fill: var(--vscode-descriptionForeground); }
.pic-tick { stroke: var(--vscode-charts-orange, #d18616); stroke-width: 2; }
.pic-label { fill: var(--vscode-foreground); font-size: 11px; } .pic-muted { fill: var(--vscode-descriptionForeground); }
pre { margin: 4px 0; }
.tone-ok { color: var(--vscode-testing-iconPassed, #73c991); } .tone-bad { color: var(--vscode-errorForeground); font-weight: 600; }
.tone-warn { color: var(--vscode-editorWarning-foreground); } .tone-muted { color: var(--vscode-descriptionForeground); }
button { background: var(--vscode-button-background); color: var(--vscode-button-foreground); border: none; padding: 3px 10px; cursor: pointer; }
</style></head>
<body>
<div id="banner" class="banner">${escHtml(S.running)}</div>
<h1 id="title">${escHtml(S.title)}</h1>
<div><button id="refresh">${escHtml(S.refresh)}</button> <span id="status" class="muted">${escHtml(S.loading)}</span></div>
<div id="content"></div>
<script type="application/json" id="l10n-bundle">${scriptJson(bundle)}</script>
<script nonce="${nonce}" id="picture-script" src="${pictureScript}" defer></script>
<script nonce="${nonce}">
const vscode = acquireVsCodeApi();
const S = ${scriptJson(S)};
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
// S's "{0}" placeholders filled in (already-escaped HTML goes in as it is).
const fmt = (s, ...a) => s.replace(/\\{(\\d+)\\}/g, (m, i) => (i < a.length ? String(a[i]) : m));
$("refresh").addEventListener("click", () => vscode.postMessage({ type: "refresh" }));
let selected = null;
function render(m) {
  $("title").textContent = S.title + " · " + m.title;
  $("status").textContent = fmt(S.totals, m.totals.tensors, m.totals.storages, m.totals.human);
  let h = "";
  h += "<h2>" + esc(S.leaks) + "</h2>";
  if (!m.findings.length) h += '<div class="muted">' + esc(S.noLeak) + '</div>';
  for (const f of m.findings) {
    h += '<div class="finding" data-kind="' + esc(f.kind) + '"><span class="name">' + esc(f.title) + '</span> · ' + esc(f.human) + '<div>' + esc(f.message) + '</div>';
    if (f.refs.length) h += '<div class="refs">' + f.refs.map((r) => '<div><a class="src" data-line="' + r.line + '">' + esc(fmt(S.line, r.line)) + '</a> <code>' + esc(r.text) + '</code></div>').join("") + '</div>';
    h += "</div>";
  }
  h += "<h2>" + esc(S.perDevice) + "</h2><table><tr><th>" + esc(S.device) + "</th><th class=num>" + esc(S.bytes) + "</th><th class=num>" + esc(S.storages) + "</th><th class=num>" + esc(S.tensors) + "</th><th class=num>" + esc(S.graphSaved) + "</th></tr>";
  for (const d of m.devices) h += "<tr><td>" + esc(d.device) + "</td><td class=num>" + esc(d.human) + "</td><td class=num>" + d.storages + "</td><td class=num>" + d.tensors + "</td><td class=num>" + esc(d.graphSaved || "") + (d.cuda ? " " + esc(JSON.stringify(d.cuda)) : "") + "</td></tr>";
  h += "</table>";
  if (m.graphNote) h += '<div class="muted graph-note">' + esc(m.graphNote) + "</div>";
  h += '<h2>' + esc(S.selected) + '</h2><div id="detail" class="muted">' + esc(S.clickTensor) + '</div>';
  h += '<h2>' + esc(S.gradients) + '</h2><div id="grads"><button id="read-grads">' + esc(S.readGrads) + '</button> <span class="muted">' + fmt(esc(S.gradsHelp), "<code>inspect --grads</code>") + '</span></div>';
  h += '<h2>' + esc(S.memoryExplained) + '</h2><div id="cuda"><button id="read-cuda">' + esc(S.explainMemory) + '</button> <span class="muted">' + fmt(esc(S.cudaHelp), "<code>inspect --cuda-summary</code>") + '</span></div>';
  h += '<h2>' + esc(S.stepDiff) + '</h2><div id="diff-controls"><label>' + esc(S.steps) + ' <input id="diff-n" type="number" min="1" max="1000" value="3"></label> <button id="run-diff">' + esc(S.runDiff) + '</button> <span class="muted">' + fmt(esc(S.diffHelp), "<code>inspect --diff-steps N</code>") + '</span></div><div id="diff"></div>';
  h += "<h2>" + esc(S.biggest) + "</h2><table><tr><th class=num>" + esc(S.bytes) + "</th><th>" + esc(S.device) + "</th><th>" + esc(S.tensors) + "</th><th></th></tr>";
  for (const t of m.top.slice(0, 10)) h += '<tr class="top-row"><td class=num>' + esc(t.human) + "</td><td>" + esc(t.device) + "</td><td class=mono>" + esc(t.label) + "</td><td class=muted>" + esc(t.saved) + "</td></tr>";
  h += "</table>";
  h += "<h2>" + esc(S.frameTensors) + "</h2>";
  if (!m.groups.length) h += '<div class="muted">' + esc(S.noFrameTensors) + '</div>';
  for (const g of m.groups) {
    h += '<div class="frame-group"><b>' + esc(g.human) + '</b> ' + esc(g.device) + ' <span class="muted">' + esc(g.summary) + '</span>';
    for (const t of g.tensors) h += '<div class="tensor mono" data-name="' + esc(t.name) + '">&nbsp;&nbsp;' + esc(t.label) + '</div>';
    h += "</div>";
  }
  $("content").innerHTML = h;
  for (const a of document.querySelectorAll("a.src")) a.addEventListener("click", () => vscode.postMessage({ type: "open", line: Number(a.dataset.line) }));
  for (const t of document.querySelectorAll(".tensor")) t.addEventListener("click", () => select(t.dataset.name));
  $("read-grads").addEventListener("click", () => { $("grads").textContent = S.readingGrads; vscode.postMessage({ type: "report", kind: "grads" }); });
  $("run-diff").addEventListener("click", () => { $("diff").textContent = S.runningDiff; vscode.postMessage({ type: "report", kind: "diff-steps", n: Number($("diff-n").value) || 3 }); });
  $("read-cuda").addEventListener("click", () => { $("cuda").textContent = S.readingAllocator; vscode.postMessage({ type: "report", kind: "cuda-summary" }); });
  if (selected && m.tensors.includes(selected)) select(selected);
}
function select(name) {
  selected = name;
  for (const t of document.querySelectorAll(".tensor")) t.classList.toggle("sel", t.dataset.name === name);
  $("detail").textContent = fmt(S.reading, name);
  vscode.postMessage({ type: "select", name });
}
function renderDetail(d) {
  let h = '<div class="mono"><b>' + esc(d.name) + "</b>: " + esc(d.facts) + "</div><div>" + esc(d.storage) + "</div>";
  if (d.layout) h += '<div id="picture-head" class="muted mono"></div><div id="picture" class="picture-box"></div><div id="picture-foot" class="muted mono"></div>';
  h += "<div><b>" + esc(S.chain) + "</b></div>" + (d.chain.length ? "<pre>" + esc(d.chain.join("\\n")) + "</pre>" : '<div class="muted">' + esc(S.noChain) + '</div>');
  if (d.notes.length) h += "<ul>" + d.notes.map((n) => "<li>" + esc(n) + "</li>").join("") + "</ul>";
  $("detail").className = "";
  $("detail").innerHTML = h;
  shownLayout = d.layout;
  drawPicture();
}
function renderGrads(v) {
  let h = "";
  if (v.empty) h += '<div class="muted">' + esc(v.empty) + "</div>";
  else {
    h += '<div class="scroll"><table class="grads"><tr><th class=num>#</th><th>' + esc(S.parameter) + '</th><th>' + esc(S.shape) + '</th><th class=num>' + esc(S.gradNorm) + '</th><th class=num>grad/weight</th><th class=num>NaN</th><th class=num>Inf</th><th class=num>' + esc(S.zeros) + '</th><th>' + esc(S.grad) + '</th></tr>';
    for (const r of v.rows) h += '<tr class="grad-row" data-name="' + esc(r.name) + '"><td class=num>' + esc(r.rank) + '</td><td class=mono>' + esc(r.name) + '</td><td class=mono>' + esc(r.shape) + '</td><td class=num>' + esc(r.gradNorm) + '</td><td class=num>' + esc(r.ratio) + '</td><td class=num>' + esc(r.nan) + '</td><td class=num>' + esc(r.inf) + '</td><td class=num>' + esc(r.zeros) + '</td><td class="tone-' + r.tone + '">' + esc(r.state) + "</td></tr>";
    h += "</table></div>";
  }
  for (const f of v.findings) h += '<div class="finding grad-finding" data-kind="' + esc(f.kind) + '"><span class="name">' + esc(f.kind) + "</span>: " + esc(f.message) + "</div>";
  if (!v.empty && !v.findings.length) h += '<div class="tone-ok">' + esc(S.gradsFine) + '</div>';
  h += '<div class="muted">' + esc(v.summary) + "</div>";
  $("grads").innerHTML = h;
}
function renderDiff(v) {
  let h = '<div class="diff-head">' + esc(v.head) + '</div><div class="muted">' + esc(v.sub) + "</div>";
  if (v.empty) h += '<div class="tone-ok">' + esc(v.empty) + "</div>";
  else {
    h += '<div class="scroll"><table class="diff"><tr><th>' + esc(S.keptBy) + '</th><th>' + esc(S.kind) + '</th><th class=num>' + esc(S.new) + '</th><th>' + esc(S.bytesPerStop) + '</th><th class=num>' + esc(S.perStep) + '</th><th>' + esc(S.shape) + '</th></tr>';
    for (const r of v.rows) h += '<tr class="diff-row"><td class=mono>' + esc(r.keeper) + "</td><td>" + esc(r.kind) + "</td><td class=num>" + esc(r.added) + "</td><td>" + esc(r.curve) + "</td><td class=num>" + esc(r.perStep) + '</td><td class="tone-' + r.tone + '">' + esc(r.shape) + "</td></tr>";
    h += "</table></div>";
  }
  for (const n of v.notes) h += '<div class="diff-note">• ' + esc(n) + "</div>";
  if (v.more) h += '<div class="muted">' + esc(v.more) + "</div>";
  $("diff").innerHTML = h;
}
function renderCuda(v) {
  let h = "";
  if (v.status) h += '<div class="tone-warn cuda-status">' + esc(v.status) + "</div>";
  for (const d of v.devices) {
    h += '<div class="scroll"><table class="cuda"><tr><th>' + esc(d.device) + '</th><th class=num>' + esc(S.value) + '</th><th>' + esc(S.meaning) + '</th></tr>';
    for (const r of d.rows) h += "<tr><td>" + esc(r.name) + "</td><td class=num>" + esc(r.value) + "</td><td>" + esc(r.meaning) + "</td></tr>";
    h += "</table></div>";
  }
  h += '<div class="cuda-process">' + esc(v.process) + "</div>";
  for (const o of v.others) h += '<div class="muted">' + esc(o) + "</div>";
  $("cuda").innerHTML = h;
}
// The picture is drawn for the panel's width, and again whenever that changes.
let shownLayout = null;
function drawPicture() {
  const box = $("picture");
  if (!box || !shownLayout || !window.stridelensPicture) return;
  const v = window.stridelensPicture.pictureView(shownLayout, box.clientWidth);
  if (!v) { box.textContent = S.noPicture; return; }
  box.innerHTML = v.svg;
  $("picture-head").textContent = v.header || "";
  $("picture-foot").textContent = v.footer;
}
new ResizeObserver(() => drawPicture()).observe(document.body);
$("picture-script").addEventListener("load", () => drawPicture()); // deferred: it may come after a detail
window.addEventListener("message", (e) => {
  const m = e.data;
  if (m.type === "loading") { $("status").textContent = S.readingProcess; $("banner").style.display = "none"; }
  else if (m.type === "model") { $("banner").style.display = "none"; render(m.model); }
  else if (m.type === "error") $("status").textContent = fmt(S.error, m.message);
  else if (m.type === "running") $("banner").style.display = "block";
  else if (m.type === "detail") renderDetail(m.detail);
  else if (m.type === "detail-error") $("detail").textContent = m.name + ": " + m.message;
  else if (m.type === "report") ({ grads: renderGrads, "cuda-summary": renderCuda, "diff-steps": renderDiff })[m.kind](m.view);
  else if (m.type === "report-error" || m.type === "report-progress") {
    const box = $({ grads: "grads", "cuda-summary": "cuda", "diff-steps": "diff" }[m.kind]);
    if (box) box.textContent = (m.type === "report-error" ? m.kind + ": " : "") + m.message;
  }
});
vscode.postMessage({ type: "ready" });
</script></body></html>`;
}
