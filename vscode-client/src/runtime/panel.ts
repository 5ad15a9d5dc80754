// "stridelens: Show tensor memory": a webview of the stopped process — per-device totals,
// named leak findings linked to source lines, the biggest storages, the frame's storage
// groups, and for a selected tensor its storage strip and grad_fn chain.
import * as vscode from "vscode";
import * as fs from "node:fs";
import { randomBytes } from "node:crypto";
import type { RuntimeController, StoppedFrame } from "./controller";
import { NotStopped } from "./probeClient";
import { buildPanelModel, nameToExpression, PanelModel, tensorDetail } from "./panelModel";


export class MemoryPanel {
  static current: MemoryPanel | undefined;
  private frame: StoppedFrame | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  static async show(ctl: RuntimeController, log: (m: string) => void): Promise<void> {
    if (!ctl.isStopped()) {
      void vscode.window.showInformationMessage("stridelens: the tensor memory panel needs a Python debug session stopped at a breakpoint (or paused).");
      return;
    }
    if (!MemoryPanel.current) MemoryPanel.current = new MemoryPanel(ctl, log);
    else MemoryPanel.current.panel.reveal(vscode.ViewColumn.Beside, false);
    await MemoryPanel.current.load();
  }

  private readonly panel: vscode.WebviewPanel;

  private constructor(private readonly ctl: RuntimeController, private readonly log: (m: string) => void) {
    this.panel = vscode.window.createWebviewPanel("stridelens.memory", "Tensor memory", { viewColumn: vscode.ViewColumn.Beside, preserveFocus: false }, {
      enableScripts: true,
      retainContextWhenHidden: true,
      localResourceRoots: [],
    });
    this.panel.webview.html = html(this.panel.webview);
    this.panel.onDidDispose(() => {
      MemoryPanel.current = undefined;
      for (const d of this.disposables) d.dispose();
    });
    this.panel.webview.onDidReceiveMessage((m) => void this.onMessage(m), undefined, this.disposables);
    this.disposables.push(ctl.onDidChangeStop((f) => {
      if (!f) void this.panel.webview.postMessage({ type: "running" });
    }));
  }

  private async load(): Promise<void> {
    void this.panel.webview.postMessage({ type: "loading" });
    try {
      const frame = await this.ctl.currentFrame();
      if (!frame) throw new NotStopped();
      this.frame = frame;
      const t0 = Date.now();
      const [proc, fr] = await Promise.all([frame.client.processReport(frame.frameId), this.ctl.frameReport(frame)]);
      let source: string | null = null;
      if (frame.path) {
        const open = vscode.workspace.textDocuments.find((d) => d.uri.fsPath === frame.path);
        source = open ? open.getText() : await fs.promises.readFile(frame.path, "utf8").catch(() => null);
      }
      const model: PanelModel = buildPanelModel(proc, fr, frame.path ? { path: frame.path, line: frame.line, function: frame.name } : null, source);
      this.log(`memory report: ${proc.tensor_count} tensors, ${proc.findings.length} findings (${Date.now() - t0} ms)`);
      this.panel.title = `Tensor memory · ${model.title}`;
      void this.panel.webview.postMessage({ type: "model", model });
    } catch (e) {
      void this.panel.webview.postMessage({ type: "error", message: e instanceof Error ? e.message : String(e) });
    }
  }

  private async onMessage(m: any): Promise<void> {
    if (m?.type === "refresh") return this.load();
    if (m?.type === "open" && typeof m.line === "number" && this.frame?.path) {
      const doc = await vscode.workspace.openTextDocument(this.frame.path);
      const pos = new vscode.Position(Math.max(0, m.line - 1), 0);
      await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.One, selection: new vscode.Range(pos, pos) });
      return;
    }
    if (m?.type === "select" && typeof m.name === "string") {
      try {
        const frame = await this.ctl.currentFrame();
        if (!frame) throw new NotStopped();
        const d = await frame.client.describe(nameToExpression(m.name), frame.frameId);
        void this.panel.webview.postMessage({ type: "detail", detail: tensorDetail(m.name, d) });
      } catch (e) {
        void this.panel.webview.postMessage({ type: "detail-error", name: m.name, message: e instanceof Error ? e.message : String(e) });
      }
    }
  }
}

function html(webview: vscode.Webview): string {
  const nonce = randomBytes(16).toString("hex");
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Tensor memory</title>
<style nonce="${nonce}">
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 12px 24px; }
h1 { font-size: 1.25em; margin: 10px 0 4px; } h2 { font-size: 1.05em; margin: 16px 0 6px; border-bottom: 1px solid var(--vscode-panel-border); }
table { border-collapse: collapse; } td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; } th { font-weight: 600; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.finding { border-left: 3px solid var(--vscode-editorWarning-foreground); padding: 4px 8px; margin: 6px 0; background: var(--vscode-textBlockQuote-background); }
.finding .name { font-weight: 700; font-family: var(--vscode-editor-font-family); }
a { color: var(--vscode-textLink-foreground); cursor: pointer; text-decoration: none; } a:hover { text-decoration: underline; }
code, .mono { font-family: var(--vscode-editor-font-family); }
.muted { color: var(--vscode-descriptionForeground); }
.banner { padding: 4px 8px; background: var(--vscode-inputValidation-infoBackground); display: none; }
.tensor { cursor: pointer; } .tensor.sel { background: var(--vscode-list-activeSelectionBackground); color: var(--vscode-list-activeSelectionForeground); }
.strip { display: flex; flex-wrap: wrap; gap: 1px; margin: 6px 0; max-width: 760px; }
.cell { width: 18px; height: 18px; font-size: 8px; line-height: 18px; text-align: center; background: var(--vscode-editorWidget-background); border: 1px solid var(--vscode-panel-border); color: var(--vscode-descriptionForeground); }
.cell.read { background: var(--vscode-charts-blue, #3794ff); color: #fff; border-color: transparent; }
.cell.first { outline: 2px solid var(--vscode-charts-orange, #d18616); }
pre { margin: 4px 0; }
button { background: var(--vscode-button-background); color: var(--vscode-button-foreground); border: none; padding: 3px 10px; cursor: pointer; }
</style></head>
<body>
<div id="banner" class="banner">The debuggee is running: these facts are from the last stop. Stop again and press Refresh.</div>
<h1 id="title">Tensor memory</h1>
<div><button id="refresh">Refresh</button> <span id="status" class="muted">loading…</span></div>
<div id="content"></div>
<script nonce="${nonce}">
const vscode = acquireVsCodeApi();
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
$("refresh").addEventListener("click", () => vscode.postMessage({ type: "refresh" }));
let selected = null;
function render(m) {
  $("title").textContent = "Tensor memory · " + m.title;
  $("status").textContent = m.totals.tensors + " live tensors in " + m.totals.storages + " storages, " + m.totals.human;
  let h = "";
  h += "<h2>Leaks</h2>";
  if (!m.findings.length) h += '<div class="muted">no leak pattern found</div>';
  for (const f of m.findings) {
    h += '<div class="finding" data-kind="' + esc(f.kind) + '"><span class="name">' + esc(f.title) + '</span> · ' + esc(f.human) + '<div>' + esc(f.message) + '</div>';
    if (f.refs.length) h += '<div class="refs">' + f.refs.map((r) => '<div><a class="src" data-line="' + r.line + '">line ' + r.line + '</a> <code>' + esc(r.text) + '</code></div>').join("") + '</div>';
    h += "</div>";
  }
  h += "<h2>Per device</h2><table><tr><th>device</th><th class=num>bytes</th><th class=num>storages</th><th class=num>tensors</th><th>graph-only</th></tr>";
  for (const d of m.devices) h += "<tr><td>" + esc(d.device) + "</td><td class=num>" + esc(d.human) + "</td><td class=num>" + d.storages + "</td><td class=num>" + d.tensors + "</td><td>" + esc(d.graphOnly || "") + (d.cuda ? " " + esc(JSON.stringify(d.cuda)) : "") + "</td></tr>";
  h += "</table>";
  h += '<h2>Selected tensor</h2><div id="detail" class="muted">click a tensor below</div>';
  h += "<h2>Biggest storages</h2><table><tr><th class=num>bytes</th><th>device</th><th>tensors</th><th></th></tr>";
  for (const t of m.top.slice(0, 10)) h += "<tr><td class=num>" + esc(t.human) + "</td><td>" + esc(t.device) + "</td><td class=mono>" + esc(t.label) + "</td><td class=muted>" + (t.savedByGraph ? "saved by an autograd graph" : "") + "</td></tr>";
  h += "</table>";
  h += "<h2>This frame's tensors by storage</h2>";
  if (!m.groups.length) h += '<div class="muted">no tensors in this frame</div>';
  for (const g of m.groups) {
    h += '<div><b>' + esc(g.human) + '</b> ' + esc(g.device) + ' <span class="muted">' + esc(g.summary) + '</span>';
    for (const t of g.tensors) h += '<div class="tensor mono" data-name="' + esc(t.name) + '">&nbsp;&nbsp;' + esc(t.label) + '</div>';
    h += "</div>";
  }
  $("content").innerHTML = h;
  for (const a of document.querySelectorAll("a.src")) a.addEventListener("click", () => vscode.postMessage({ type: "open", line: Number(a.dataset.line) }));
  for (const t of document.querySelectorAll(".tensor")) t.addEventListener("click", () => select(t.dataset.name));
  if (selected && m.tensors.includes(selected)) select(selected);
}
function select(name) {
  selected = name;
  for (const t of document.querySelectorAll(".tensor")) t.classList.toggle("sel", t.dataset.name === name);
  $("detail").textContent = "reading " + name + "…";
  vscode.postMessage({ type: "select", name });
}
function renderDetail(d) {
  let h = '<div class="mono"><b>' + esc(d.name) + "</b>: " + esc(d.facts) + "</div><div>" + esc(d.storage) + "</div>";
  if (d.strip) {
    const read = new Set(d.strip.read);
    h += '<div class="muted">storage elements' + (d.strip.truncated ? " (first " + d.strip.cells + " of " + d.strip.total + ")" : "") + "; highlighted: the " + d.strip.readCount + " the view reads (offset " + d.strip.offset + ", strides (" + d.strip.strides.join(", ") + "))</div>";
    h += '<div class="strip">';
    for (let i = 0; i < d.strip.cells; i++) h += '<div class="cell' + (read.has(i) ? " read" : "") + (i === d.strip.offset ? " first" : "") + '" title="element ' + i + '">' + i + "</div>";
    h += "</div>";
  }
  h += "<div><b>grad_fn chain</b></div>" + (d.chain.length ? "<pre>" + esc(d.chain.join("\\n")) + "</pre>" : '<div class="muted">none (no autograd history)</div>');
  if (d.notes.length) h += "<ul>" + d.notes.map((n) => "<li>" + esc(n) + "</li>").join("") + "</ul>";
  $("detail").className = "";
  $("detail").innerHTML = h;
}
window.addEventListener("message", (e) => {
  const m = e.data;
  if (m.type === "loading") { $("status").textContent = "reading the process…"; $("banner").style.display = "none"; }
  else if (m.type === "model") { $("banner").style.display = "none"; render(m.model); }
  else if (m.type === "error") $("status").textContent = "error: " + m.message;
  else if (m.type === "running") $("banner").style.display = "block";
  else if (m.type === "detail") renderDetail(m.detail);
  else if (m.type === "detail-error") $("detail").textContent = m.name + ": " + m.message;
});
</script></body></html>`;
}
