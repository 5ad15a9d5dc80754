// "stridelens: Show tensor memory": a webview of the stopped process — per-device totals,
// named leak findings linked to source lines, the biggest storages, the frame's storage
// groups, gradient health on request (as `inspect --grads`), and for a selected tensor its storage picture (dist/webview.js draws it as SVG for
// the panel's width: the grid numbered by reading element, or the to-scale bar) and grad_fn chain.
import * as vscode from "vscode";
import * as l10n from "@vscode/l10n";
import * as fs from "node:fs";
import { panelHtml } from "./panelHtml";
import { bundle, language } from "../locale";
import type { RuntimeController, StoppedFrame } from "./controller";
import { NotStopped } from "./probeClient";
import { buildPanelModel, nameToExpression, PanelModel, tensorDetail } from "./panelModel";
import { GradReport, gradsView } from "./gradsModel";
import { CudaReport, cudaView } from "./cudaModel";
import { DiffReport, diffView } from "./diffModel";
import type { ReportKind } from "./reports";

export interface PanelDeps {
  extensionUri: vscode.Uri; // dist/webview.js lies there
  report: (frame: StoppedFrame, kind: Exclude<ReportKind, "diff-steps">) => Promise<unknown>; // `inspect --grads` / `--cuda-summary` of the stopped frame
  stepDiff: (frame: StoppedFrame, n: number, progress: (m: string) => void) => Promise<unknown>; // `inspect --diff-steps n` from the stopped frame
  fromTarget: (texts: string[]) => Promise<string[]>; // the probe's English texts (findings, notes) in the extension's language
}


export class MemoryPanel {
  static current: MemoryPanel | undefined;
  private frame: StoppedFrame | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  static async show(ctl: RuntimeController, log: (m: string) => void, deps: PanelDeps): Promise<void> {
    if (!ctl.isStopped()) {
      void vscode.window.showInformationMessage(l10n.t("stridelens: the tensor memory panel needs a Python debug session stopped at a breakpoint (or paused)."));
      return;
    }
    if (!MemoryPanel.current) MemoryPanel.current = new MemoryPanel(ctl, log, deps);
    else MemoryPanel.current.panel.reveal(vscode.ViewColumn.Beside, false);
    await MemoryPanel.current.load();
  }

  private readonly panel: vscode.WebviewPanel;
  private setReady: () => void = () => undefined;
  private wasReady = false;
  private readonly ready = new Promise<void>((resolve) => (this.setReady = resolve));

  private constructor(private readonly ctl: RuntimeController, private readonly log: (m: string) => void, private readonly deps: PanelDeps) {
    const dist = vscode.Uri.joinPath(deps.extensionUri, "dist");
    this.panel = vscode.window.createWebviewPanel("stridelens.memory", l10n.t("Tensor memory"), { viewColumn: vscode.ViewColumn.Beside, preserveFocus: false }, {
      enableScripts: true,
      retainContextWhenHidden: true,
      localResourceRoots: [dist],
    });
    this.render();
    this.panel.onDidDispose(() => {
      MemoryPanel.current = undefined;
      for (const d of this.disposables) d.dispose();
    });
    this.panel.webview.onDidReceiveMessage((m) => void this.onMessage(m), undefined, this.disposables);
    this.disposables.push(ctl.onDidChangeStop((f) => {
      if (!f) void this.panel.webview.postMessage({ type: "running" });
    }));
  }

  /** The page, in the extension's language now. */
  private render(): void {
    const script = this.panel.webview.asWebviewUri(vscode.Uri.joinPath(this.deps.extensionUri, "dist", "webview.js")).toString();
    this.panel.webview.html = panelHtml(this.panel.webview.cspSource, script, bundle(), language());
  }

  /** `stridelens.locale` changed: the page again in the new language (it says "ready" again and reads the process anew). */
  static relocalize(): void {
    const p = MemoryPanel.current;
    if (!p) return;
    p.panel.title = l10n.t("Tensor memory");
    p.render();
  }

  private async load(): Promise<void> {
    // Messages posted before the page's script listens are lost: wait for its "ready".
    await this.ready;
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
      // What the probe wrote (leak findings, storage group summaries) is English: as `inspect` shows it.
      const texts = await this.deps.fromTarget([...model.findings.map((f) => f.message), ...model.groups.map((g) => g.summary)]);
      model.findings.forEach((f, i) => (f.message = texts[i] ?? f.message));
      model.groups.forEach((g, i) => (g.summary = texts[model.findings.length + i] ?? g.summary));
      this.log(`memory report: ${proc.tensor_count} tensors, ${proc.findings.length} findings (${Date.now() - t0} ms)`);
      this.panel.title = `${l10n.t("Tensor memory")} · ${model.title}`;
      void this.panel.webview.postMessage({ type: "model", model });
    } catch (e) {
      void this.panel.webview.postMessage({ type: "error", message: e instanceof Error ? e.message : String(e) });
    }
  }

  private async onMessage(m: any): Promise<void> {
    if (m?.type === "ready") {
      // Again: the page was loaded anew (its state is gone): read the process again.
      if (this.wasReady) return this.load();
      this.wasReady = true;
      return this.setReady();
    }
    if (m?.type === "refresh") return this.load();
    if (m?.type === "open" && typeof m.line === "number" && this.frame?.path) {
      const doc = await vscode.workspace.openTextDocument(this.frame.path);
      const pos = new vscode.Position(Math.max(0, m.line - 1), 0);
      await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.One, selection: new vscode.Range(pos, pos) });
      return;
    }
    if (m?.type === "report" && m.kind === "diff-steps" && Number.isInteger(m.n) && m.n >= 1 && m.n <= 1000) {
      // Runs the program on: the breakpoint's line hit n more times; then the panel is of that stop.
      try {
        const frame = await this.ctl.currentFrame();
        if (!frame) throw new NotStopped();
        const t0 = Date.now();
        const r = await this.deps.stepDiff(frame, m.n, (message) => void this.panel.webview.postMessage({ type: "report-progress", kind: "diff-steps", message }));
        this.log(`step diff over ${m.n} steps (${Date.now() - t0} ms)`);
        await this.load();
        void this.panel.webview.postMessage({ type: "report", kind: "diff-steps", view: diffView(r as DiffReport) });
      } catch (e) {
        void this.panel.webview.postMessage({ type: "report-error", kind: "diff-steps", message: e instanceof Error ? e.message : String(e) });
      }
      return;
    }
    if (m?.type === "report" && (m.kind === "grads" || m.kind === "cuda-summary")) {
      // On the user's request only: --grads reads gradient and weight values.
      const kind: Exclude<ReportKind, "diff-steps"> = m.kind;
      try {
        const frame = await this.ctl.currentFrame();
        if (!frame) throw new NotStopped();
        const t0 = Date.now();
        const r = await this.deps.report(frame, kind);
        // why there are no CUDA numbers: the probe's words (English), as `inspect` shows them
        if (kind === "cuda-summary" && (r as CudaReport).cuda_message) (r as CudaReport).cuda_message = (await this.deps.fromTarget([(r as CudaReport).cuda_message!]))[0];
        this.log(`${kind} report (${Date.now() - t0} ms)`);
        const view = kind === "grads" ? gradsView(r as GradReport) : cudaView(r as CudaReport);
        void this.panel.webview.postMessage({ type: "report", kind, view });
      } catch (e) {
        void this.panel.webview.postMessage({ type: "report-error", kind, message: e instanceof Error ? e.message : String(e) });
      }
      return;
    }
    if (m?.type === "select" && typeof m.name === "string") {
      try {
        const frame = await this.ctl.currentFrame();
        if (!frame) throw new NotStopped();
        const d = await frame.client.describe(nameToExpression(m.name), frame.frameId);
        const detail = tensorDetail(m.name, d);
        detail.notes = await this.deps.fromTarget(detail.notes);
        void this.panel.webview.postMessage({ type: "detail", detail });
      } catch (e) {
        void this.panel.webview.postMessage({ type: "detail-error", name: m.name, message: e instanceof Error ? e.message : String(e) });
      }
    }
  }
}

