import * as vscode from "vscode";
import * as l10n from "@vscode/l10n";
import * as fs from "node:fs";
import * as nodePath from "node:path";
import { ServerManager } from "./client";
import { registerFallbackDebugger } from "./debug";
import { checkStridelens, resolveInterpreter, runStridelens, setExtensionRoot } from "./interpreter";
import { RuntimeController, StoppedFrame } from "./runtime/controller";
import type { ProbePart } from "./runtime/probeClient";
import { readReport, readStepDiff, ReportKind } from "./runtime/reports";
import type { StaticFacts } from "./runtime/facts";
import { MemoryPanel } from "./runtime/panel";
import { Bundle, chooseLanguage, language, loadBundle, useBundle } from "./locale";

let manager: ServerManager | undefined;

/**
 * The language of the extension's messages: `stridelens.locale`, or with "auto" VS Code's display
 * language, whose bundle VS Code has loaded (package.json "l10n"). Returns what went wrong, if anything.
 */
function applyLanguage(extensionPath: string): string | undefined {
  const setting = vscode.workspace.getConfiguration("stridelens").get<string>("locale", "auto");
  const lang = chooseLanguage(setting, vscode.env.language);
  let b: Bundle = {};
  let problem: string | undefined;
  if (lang === vscode.env.language && vscode.l10n.bundle) b = vscode.l10n.bundle;
  else {
    try {
      b = loadBundle(extensionPath, lang);
    } catch (e) {
      problem = `no messages for ${lang}: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
  useBundle(lang, b);
  return problem;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  setExtensionRoot(context.extensionPath);
  const languageProblem = applyLanguage(context.extensionPath);
  const output = vscode.window.createOutputChannel("stridelens");
  const log = (m: string) => output.appendLine(`[${new Date().toISOString().slice(11, 23)}] ${m}`);
  if (languageProblem) log(languageProblem);
  manager = new ServerManager(output);
  context.subscriptions.push(output, manager);

  // The probe source comes from the stridelens the server runs (bundled or the interpreter's,
  // never duplicated here); read once per interpreter.
  const probeCache = new Map<string, Promise<string>>();
  const inspectorSource = async (file: string): Promise<string> => {
    const python = manager?.interpreter?.path ?? (await resolveInterpreter()).path;
    let p = probeCache.get(`${python}\n${file}`);
    if (!p) {
      p = (async () => {
        const info = manager?.info && manager.interpreter?.path === python ? manager.info : await checkStridelens(python);
        return fs.promises.readFile(file === "probe.py" ? info.probeFile : nodePath.join(nodePath.dirname(info.probeFile), file), "utf8");
      })();
      p.catch(() => probeCache.delete(`${python}\n${file}`));
      probeCache.set(`${python}\n${file}`, p);
    }
    return p;
  };
  // The probe's parts, injected in this order into one module (stridelens.inspector.probe_parts).
  const probeSource = async (): Promise<ProbePart[]> => {
    const python = manager?.interpreter?.path ?? (await resolveInterpreter()).path;
    const info = manager?.info && manager.interpreter?.path === python ? manager.info : await checkStridelens(python);
    const parts = info.probeParts ?? [[info.probeFile, "<stridelens-probe>"]];
    return Promise.all(parts.map(async ([file, filename]) => ({ filename, source: await inspectorSource(nodePath.basename(file)) })));
  };
  // The memory panel's report sections, analysed by the same code as `stridelens inspect`
  // (through the launcher; no torch import there).
  const analyze = async (kind: ReportKind, raw: unknown): Promise<unknown> => {
    const python = manager?.interpreter?.path ?? (await resolveInterpreter()).path;
    const r = await runStridelens(python, ["--analyze", kind], 60_000, undefined, JSON.stringify(raw));
    if (r.code !== 0) throw new Error(l10n.t("analysing the {0} report failed: {1}", kind, r.stderr.trim().split("\n").slice(-2).join(" / ") || `exit ${r.code}`));
    return JSON.parse(r.stdout);
  };
  // The probe writes English (it runs in the debuggee, stdlib only): its findings and notes in the
  // extension's language, as `inspect` shows them (launch.py --from-target); cached per text.
  const translated = new Map<string, string>();
  const fromTarget = async (texts: string[]): Promise<string[]> => {
    const lang = language();
    if (lang === "en" || !texts.length) return texts;
    const key = (t: string) => `${lang}\n${t}`;
    const todo = [...new Set(texts.filter((t) => !translated.has(key(t))))];
    if (todo.length) {
      const python = manager?.interpreter?.path ?? (await resolveInterpreter()).path;
      const r = await runStridelens(python, ["--from-target"], 30_000, undefined, JSON.stringify(todo));
      let out: unknown[] | undefined;
      try {
        out = r.code === 0 ? (JSON.parse(r.stdout) as unknown[]) : undefined;
      } catch {
        out = undefined;
      }
      if (!out) log(`the probe's texts stay English: ${r.stderr.trim().split("\n").slice(-2).join(" / ") || `exit ${r.code}`}`);
      if (translated.size > 4000) translated.clear();
      todo.forEach((t, i) => translated.set(key(t), typeof out?.[i] === "string" ? (out[i] as string) : t));
    }
    return texts.map((t) => translated.get(key(t)) ?? t);
  };
  const report = (frame: StoppedFrame, kind: Exclude<ReportKind, "diff-steps">) => readReport(frame, kind, inspectorSource, analyze);
  const stepDiff = (frame: StoppedFrame, n: number, progress: (m: string) => void) => readStepDiff(runtime, frame, n, inspectorSource, analyze, progress);

  // What the static analysis expects at binding sites. Asked of the running server
  // (`stridelens/explain`, instant) when the file is open there, else of
  // `stridelens explain --format json` (a process per file state, cached).
  const explainCache = new Map<string, Promise<(StaticFacts | null)[] | undefined>>();
  const staticFacts = async (path: string, positions: { line: number; character: number }[]) => {
    const client = manager?.client;
    const uri = vscode.Uri.file(path).toString();
    const open = vscode.workspace.textDocuments.some((d) => d.uri.toString() === uri);
    if (client && client.isRunning() && open) {
      try {
        return (await client.sendRequest("stridelens/explain", { textDocument: { uri }, positions })) as (StaticFacts | null)[];
      } catch (err) {
        log(`stridelens/explain request failed, falling back to the CLI: ${err}`);
      }
    }
    const st = await fs.promises.stat(path).catch(() => undefined);
    if (!st) return undefined;
    const specs = positions.map((p) => `${path}:${p.line + 1}:${p.character + 1}`);
    const key = `${st.mtimeMs}|${specs.join(",")}`;
    let p = explainCache.get(key);
    if (!p) {
      p = (async () => {
        const python = manager?.interpreter?.path ?? (await resolveInterpreter()).path;
        const t0 = Date.now();
        const r = await runStridelens(python, ["explain", ...specs, "--format", "json"], 120_000, vscode.Uri.file(path));
        try {
          const out = JSON.parse(r.stdout);
          const arr = Array.isArray(out) ? out : [out];
          log(`static expectations for ${specs.length} names (${Date.now() - t0} ms)`);
          return arr as (StaticFacts | null)[];
        } catch {
          log(`stridelens explain failed: ${r.stderr.trim().split("\n").slice(-2).join(" / ")}`);
          return undefined;
        }
      })();
      if (explainCache.size > 32) explainCache.clear();
      explainCache.set(key, p);
    }
    return p;
  };

  const runtime = new RuntimeController({ log, probeSource, staticFacts, fromTarget });
  context.subscriptions.push(runtime, ...registerFallbackDebugger(log));

  context.subscriptions.push(
    vscode.commands.registerCommand("stridelens.restartServer", () => manager?.restart()),
    vscode.commands.registerCommand("stridelens.showOutput", () => output.show(true)),
    vscode.commands.registerCommand("stridelens.showTensorMemory", () => MemoryPanel.show(runtime, log, { extensionUri: context.extensionUri, report, stepDiff, fromTarget })),
    vscode.commands.registerCommand("stridelens.refreshRuntimeFacts", () => runtime.scheduleRefresh(0)),
    vscode.commands.registerCommand("stridelens.applyAllFixes", async () => {
      const ed = vscode.window.activeTextEditor;
      const client = manager?.client;
      if (!ed) return;
      if (!client) {
        void vscode.window.showWarningMessage(l10n.t("stridelens: the language server is not running (see the status bar); no fixes applied."));
        return;
      }
      await client.sendRequest("workspace/executeCommand", { command: "stridelens.fixAll", arguments: [ed.document.uri.toString()] });
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("stridelens.locale")) {
        // The server hears of it itself (workspace/didChangeConfiguration, then its `locale` key).
        const problem = applyLanguage(context.extensionPath);
        if (problem) log(problem);
        manager?.refresh();
        MemoryPanel.relocalize();
        runtime.scheduleRefresh(0);
      }
      if (["interpreter", "useInterpreterFromPythonExtension", "importStrategy"].some((k) => e.affectsConfiguration(`stridelens.${k}`))) {
        void manager?.restart();
      }
    }),
  );
  const py = vscode.extensions.getExtension("ms-python.python");
  const api: any = py?.isActive ? py.exports : undefined;
  if (api?.environments?.onDidChangeActiveEnvironmentPath) {
    context.subscriptions.push(api.environments.onDidChangeActiveEnvironmentPath(() => manager?.restart()));
  }
  void manager.start();
}

export async function deactivate(): Promise<void> {
  await manager?.stop();
}
