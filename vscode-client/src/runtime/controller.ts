// Runtime facts while a Python debug session (debugpy, python, stridelens) is stopped:
// inline decorations for tensor variables, the hover card, and the state the memory panel
// uses. Tracks stop/resume from the adapter's own messages; nothing is evaluated while the
// debuggee runs.
import * as vscode from "vscode";
import * as l10n from "@vscode/l10n";
import * as fs from "node:fs";
import type { Describe, FrameReport, Member, StaticFacts } from "./facts";
import { containerText, factName, hoverMarkdown, inlineText, joinInline } from "./format";
import { NotStopped, ProbeClient, ProbePart, StopState } from "./probeClient";
import { expressionAt } from "./safety";
import { placeBindings } from "./scope";

export const DEBUG_TYPES = ["debugpy", "python", "stridelens"];
const RESUMING = new Set(["continue", "next", "stepIn", "stepOut", "stepBack", "reverseContinue", "goto", "restartFrame", "restart", "disconnect", "terminate"]);

export interface StoppedFrame {
  client: ProbeClient;
  frameId: number;
  path: string | undefined;
  line: number; // 1-based
  name: string | undefined;
  epoch: number;
}

interface Tracked {
  session: vscode.DebugSession;
  state: StopState;
  client: ProbeClient;
  frame?: StoppedFrame;
  frameReport?: { epoch: number; frameId: number; report: Promise<FrameReport> };
  waiters: ((stopped: boolean) => void)[]; // continueToSameLine: told of the next stop, or the end
}

export interface ControllerDeps {
  log: (msg: string) => void;
  probeSource: () => Promise<ProbePart[]>;
  staticFacts: (path: string, positions: { line: number; character: number }[]) => Promise<(StaticFacts | null)[] | undefined>;
  fromTarget: (texts: string[]) => Promise<string[]>; // the probe's English notes in the extension's language
}

export class RuntimeController implements vscode.Disposable {
  private readonly sessions = new Map<string, Tracked>();
  private readonly disposables: vscode.Disposable[] = [];
  private readonly factsDeco = vscode.window.createTextEditorDecorationType({
    after: { margin: "0 0 0 2.5em", color: new vscode.ThemeColor("editorCodeLens.foreground"), fontStyle: "italic" },
    rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
  });
  private readonly mismatchDeco = vscode.window.createTextEditorDecorationType({
    after: { margin: "0 0 0 2.5em", color: new vscode.ThemeColor("editorWarning.foreground"), fontStyle: "italic" },
    rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
  });
  private refreshTimer: NodeJS.Timeout | undefined;
  private readonly onStopEmitter = new vscode.EventEmitter<StoppedFrame | undefined>();
  readonly onDidChangeStop = this.onStopEmitter.event;

  constructor(private readonly deps: ControllerDeps) {
    const tracker: vscode.DebugAdapterTrackerFactory = {
      createDebugAdapterTracker: (session) => this.track(session),
    };
    for (const t of DEBUG_TYPES) this.disposables.push(vscode.debug.registerDebugAdapterTrackerFactory(t, tracker));
    this.disposables.push(
      vscode.debug.onDidChangeActiveStackItem(() => this.scheduleRefresh(50)),
      vscode.debug.onDidTerminateDebugSession((s) => this.forget(s.id)),
      vscode.window.onDidChangeVisibleTextEditors(() => this.scheduleRefresh(50)),
      vscode.window.onDidChangeTextEditorVisibleRanges(() => this.scheduleRefresh(150)),
      vscode.workspace.onDidChangeConfiguration((e) => e.affectsConfiguration("stridelens.runtime") && this.scheduleRefresh(0)),
      this.factsDeco,
      this.mismatchDeco,
      this.onStopEmitter,
    );
  }

  dispose(): void {
    clearTimeout(this.refreshTimer);
    this.hoverRegistration?.dispose();
    for (const d of this.disposables) d.dispose();
  }

  private hoverRegistration: vscode.Disposable | undefined;

  /**
   * Registered when a session starts (and dropped when the last one ends): hover providers
   * registered later are asked first, so the runtime card comes above the static one.
   */
  private registerHover(): void {
    this.hoverRegistration?.dispose();
    this.hoverRegistration = vscode.languages.registerHoverProvider({ language: "python" }, { provideHover: (doc, pos, tok) => this.hover(doc, pos, tok) });
  }

  private track(session: vscode.DebugSession): vscode.DebugAdapterTracker {
    this.registerHover();
    const state: StopState = { stopped: false, epoch: 0 };
    const client = new ProbeClient(session, state, this.deps.probeSource, (m) => this.deps.log(`[${session.name}] ${m}`));
    const t: Tracked = { session, state, client, waiters: [] };
    const wake = (stopped: boolean) => {
      for (const w of t.waiters.splice(0)) w(stopped);
    };
    this.sessions.set(session.id, t);
    const resumed = () => {
      if (state.stopped) {
        state.stopped = false;
        state.epoch++;
        t.frame = undefined;
        t.frameReport = undefined;
        this.clearDecorations();
        this.setContext();
        this.onStopEmitter.fire(undefined);
      }
    };
    return {
      onWillReceiveMessage: (m: any) => {
        if (m?.type === "request" && RESUMING.has(m.command)) resumed();
      },
      onDidSendMessage: (m: any) => {
        if (m?.type !== "event") return;
        if (m.event === "stopped") {
          state.stopped = true;
          state.epoch++;
          state.threadId = m.body?.threadId;
          this.deps.log(`[${session.name}] stopped (${m.body?.reason ?? "?"}), thread ${state.threadId}`);
          t.frame = undefined;
          t.frameReport = undefined;
          this.setContext();
          this.scheduleRefresh(200);
          wake(true);
        } else if (m.event === "continued") {
          resumed();
        } else if (m.event === "terminated" || m.event === "exited") {
          resumed();
          wake(false);
        }
      },
      onExit: () => this.forget(session.id),
      onError: () => undefined,
    };
  }

  private forget(id: string): void {
    const t = this.sessions.get(id);
    if (!t) return;
    t.state.stopped = false;
    t.state.epoch++;
    for (const w of t.waiters.splice(0)) w(false);
    this.sessions.delete(id);
    if (!this.sessions.size) {
      this.hoverRegistration?.dispose();
      this.hoverRegistration = undefined;
    }
    this.clearDecorations();
    this.setContext();
    this.onStopEmitter.fire(undefined);
  }

  private setContext(): void {
    void vscode.commands.executeCommand("setContext", "stridelens.stopped", [...this.sessions.values()].some((t) => t.state.stopped));
  }

  /** The stopped session to use: the active one if stopped, else any stopped one. */
  private stoppedTracked(): Tracked | undefined {
    const active = vscode.debug.activeDebugSession;
    const a = active && this.sessions.get(active.id);
    if (a?.state.stopped) return a;
    return [...this.sessions.values()].find((t) => t.state.stopped);
  }

  /** The selected (or top) frame of the stopped session, with its source. */
  async currentFrame(): Promise<StoppedFrame | undefined> {
    const t = this.stoppedTracked();
    if (!t) return undefined;
    const epoch = t.state.epoch;
    const item = vscode.debug.activeStackItem;
    let frameId: number | undefined;
    let threadId = t.state.threadId;
    if (item && item.session.id === t.session.id && item instanceof vscode.DebugStackFrame) {
      frameId = item.frameId;
      threadId = item.threadId;
    }
    if (t.frame && t.frame.epoch === epoch && (frameId === undefined || t.frame.frameId === frameId)) return t.frame;
    if (threadId === undefined) {
      const th = await t.session.customRequest("threads");
      threadId = th?.threads?.[0]?.id;
    }
    if (!t.state.stopped || t.state.epoch !== epoch || threadId === undefined) return undefined;
    const st = await t.session.customRequest("stackTrace", { threadId, startFrame: 0, levels: 50 });
    const frames: any[] = st?.stackFrames ?? [];
    const f = (frameId !== undefined ? frames.find((x) => x.id === frameId) : undefined) ?? frames[0];
    if (!f || !t.state.stopped || t.state.epoch !== epoch) return undefined;
    t.frame = { client: t.client, frameId: f.id, path: sourcePath(f.source?.path), line: f.line, name: f.name, epoch };
    this.onStopEmitter.fire(t.frame);
    return t.frame;
  }

  /**
   * Continue the session `frame` is stopped in until it stops again at the same file and line
   * (one step of a step diff; stops elsewhere are continued through). Undefined when the
   * program ends first; throws after `timeoutMs` without such a stop.
   */
  async continueToSameLine(frame: StoppedFrame, timeoutMs: number): Promise<StoppedFrame | undefined> {
    const t = [...this.sessions.values()].find((x) => x.client === frame.client);
    if (!t || !t.state.stopped) throw new Error(l10n.t("the debuggee is not stopped"));
    const end = Date.now() + timeoutMs;
    for (;;) {
      const next = new Promise<boolean>((resolve) => t.waiters.push(resolve));
      await t.session.customRequest("continue", { threadId: t.state.threadId ?? 0 });
      let timer: NodeJS.Timeout | undefined;
      const stopped = await Promise.race([next, new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), Math.max(0, end - Date.now()))))]);
      clearTimeout(timer);
      if (stopped === "timeout") throw new Error(l10n.t("no stop at line {0} within {1} s", frame.line, Math.round(timeoutMs / 1000)));
      if (!stopped) return undefined;
      const f = await this.currentFrame();
      if (f && f.path === frame.path && f.line === frame.line) return f;
      if (!f) return undefined;
    }
  }

  isStopped(): boolean {
    return !!this.stoppedTracked();
  }

  frameReport(frame: StoppedFrame): Promise<FrameReport> {
    const t = [...this.sessions.values()].find((x) => x.client === frame.client);
    if (t && t.frameReport && t.frameReport.epoch === frame.epoch && t.frameReport.frameId === frame.frameId) return t.frameReport.report;
    const report = frame.client.frameReport(frame.frameId);
    if (t) {
      t.frameReport = { epoch: frame.epoch, frameId: frame.frameId, report };
      report.catch(() => t.frameReport === undefined || (t.frameReport.report === report && (t.frameReport = undefined)));
    }
    return report;
  }

  scheduleRefresh(delay: number): void {
    if (!this.isStopped()) return;
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => void this.refresh().catch((e) => this.report(e)), delay);
  }

  private report(e: unknown): void {
    if (e instanceof NotStopped) return;
    this.deps.log(`runtime facts: ${e instanceof Error ? e.message : String(e)}`);
  }

  private clearDecorations(): void {
    for (const ed of vscode.window.visibleTextEditors) {
      ed.setDecorations(this.factsDeco, []);
      ed.setDecorations(this.mismatchDeco, []);
    }
  }

  async refresh(): Promise<void> {
    const cfg = vscode.workspace.getConfiguration("stridelens");
    if (!cfg.get<boolean>("runtime.inlineFacts", true)) return this.clearDecorations();
    const frame = await this.currentFrame();
    if (!frame || !frame.path) {
      this.deps.log(`runtime facts: no stopped frame with a source${frame ? ` (${frame.name})` : ""}`);
      return this.clearDecorations();
    }
    const editors = vscode.window.visibleTextEditors.filter((e) => e.document.uri.scheme === "file" && samePath(e.document.uri.fsPath, frame.path!));
    for (const ed of vscode.window.visibleTextEditors) {
      if (!editors.includes(ed)) {
        ed.setDecorations(this.factsDeco, []);
        ed.setDecorations(this.mismatchDeco, []);
      }
    }
    if (!editors.length) return void this.deps.log(`runtime facts: ${frame.path} is not in a visible editor`);
    const t0 = Date.now();
    const report = await this.frameReport(frame);
    this.deps.log(`frame ${frame.name} ${frame.path}:${frame.line}: ${report.tensor_count} tensors (${Date.now() - t0} ms)`);
    const byName = new Map<string, { m: Member; device: string }>();
    const containers = new Map<string, Member[]>();
    for (const g of report.groups) {
      for (const m of g.tensors) {
        byName.set(m.name, { m, device: g.device });
        const c = /^([\p{L}_][\p{L}\p{N}_]*)\[/u.exec(m.name);
        if (c) containers.set(c[1], [...(containers.get(c[1]) ?? []), m]);
      }
    }
    for (const ed of editors) {
      const doc = ed.document;
      const lines = doc.getText().split(/\r?\n/);
      const win: [number, number] = [
        Math.min(...ed.visibleRanges.map((r) => r.start.line), frame.line - 1),
        Math.max(...ed.visibleRanges.map((r) => r.end.line), frame.line - 1),
      ];
      const placed = placeBindings(lines, frame.line - 1, frame.name, win).filter((b) => byName.has(b.name) || containers.has(b.name));
      const render = (statics: Map<string, StaticFacts | null> | undefined) => {
        const perLine = new Map<number, { texts: string[]; mismatch: string[] }>();
        for (const b of placed) {
          const entry = perLine.get(b.line) ?? { texts: [], mismatch: [] };
          const hit = byName.get(b.name);
          if (hit) {
            // Static expectations hold for the binding line the debuggee has passed.
            const st = b.line <= frame.line - 1 ? statics?.get(`${b.line}:${b.character}`) : undefined;
            const { text, mismatches } = inlineText(b.name, hit.m, hit.device, st);
            entry.texts.push(text);
            for (const mm of mismatches) entry.mismatch.push(l10n.t("{0}: {1} is {2} at run time; the static analysis expected {3}", b.name, factName(mm.fact), mm.runtime, mm.expected));
          } else {
            entry.texts.push(containerText(b.name, containers.get(b.name)!));
          }
          perLine.set(b.line, entry);
        }
        const plain: vscode.DecorationOptions[] = [];
        const marked: vscode.DecorationOptions[] = [];
        for (const [line, e] of perLine) {
          if (line >= doc.lineCount) continue;
          const end = doc.lineAt(line).range.end;
          const opt: vscode.DecorationOptions = {
            range: new vscode.Range(end, end),
            renderOptions: { after: { contentText: joinInline(e.texts) } },
            hoverMessage: e.mismatch.length ? new vscode.MarkdownString(e.mismatch.map((s) => `- ${s}`).join("\n")) : undefined,
          };
          (e.mismatch.length ? marked : plain).push(opt);
        }
        if (!frame.client.state.stopped || frame.client.state.epoch !== frame.epoch) return;
        ed.setDecorations(this.factsDeco, plain);
        ed.setDecorations(this.mismatchDeco, marked);
      };
      render(undefined);
      if (cfg.get<boolean>("runtime.compareWithStatic", true) && !doc.isDirty) {
        const positions = placed.filter((b) => byName.has(b.name) && b.line <= frame.line - 1);
        if (positions.length) {
          void this.deps.staticFacts(doc.uri.fsPath, positions).then((res) => {
            if (!res) return;
            const m = new Map<string, StaticFacts | null>();
            positions.forEach((p, i) => m.set(`${p.line}:${p.character}`, res[i] ?? null));
            render(m);
          }, (e) => this.report(e));
        }
      }
    }
  }

  private async hover(doc: vscode.TextDocument, pos: vscode.Position, token: vscode.CancellationToken): Promise<vscode.Hover | undefined> {
    if (!vscode.workspace.getConfiguration("stridelens").get<boolean>("runtime.hover", true)) return undefined;
    if (!this.isStopped()) return undefined;
    const span = expressionAt(doc.lineAt(pos.line).text, pos.character);
    if (!span) return undefined;
    try {
      const frame = await this.currentFrame();
      if (!frame || token.isCancellationRequested) return undefined;
      let d: Describe = await frame.client.describe(span.text, frame.frameId);
      if (d.notes.length) d = { ...d, notes: await this.deps.fromTarget(d.notes) };
      if (token.isCancellationRequested) return undefined;
      const md = new vscode.MarkdownString(hoverMarkdown(span.text, d));
      md.supportHtml = false;
      return new vscode.Hover(md, new vscode.Range(pos.line, span.start, pos.line, span.end));
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      if (!(e instanceof NotStopped) && !/^not a tensor/.test(msg)) this.deps.log(`hover ${span.text}: ${msg}`);
      return undefined;
    }
  }
}

/** A DAP source path; remote workbenches (code-server) hand them back as URIs. */
export function sourcePath(p: string | undefined): string | undefined {
  if (!p) return undefined;
  return /^[a-z][\w+.-]+:\/\//i.test(p) ? vscode.Uri.parse(p).fsPath : p;
}

export function samePath(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return fs.realpathSync(a) === fs.realpathSync(b);
  } catch {
    return false;
  }
}
