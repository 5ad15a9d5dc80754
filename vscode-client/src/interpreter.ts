// Which Python runs the server, the probe source and the fallback debugger: the Python
// extension's selected interpreter when installed, else `stridelens.interpreter`, else python3.
import * as vscode from "vscode";
import * as l10n from "@vscode/l10n";
import { language } from "./locale";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

export interface Interpreter {
  path: string;
  source: "python-extension" | "setting" | "PATH";
}

export async function resolveInterpreter(resource?: vscode.Uri): Promise<Interpreter> {
  const cfg = vscode.workspace.getConfiguration("stridelens", resource);
  if (cfg.get<boolean>("useInterpreterFromPythonExtension", true)) {
    const fromExt = await fromPythonExtension(resource);
    if (fromExt) return { path: fromExt, source: "python-extension" };
  }
  const setting = (cfg.get<string>("interpreter") ?? "").trim();
  if (setting) return { path: substitute(setting, resource), source: "setting" };
  return { path: "python3", source: "PATH" };
}

function substitute(p: string, resource?: vscode.Uri): string {
  const folder = (resource && vscode.workspace.getWorkspaceFolder(resource)) ?? vscode.workspace.workspaceFolders?.[0];
  return p.replace(/\$\{workspaceFolder\}/g, folder?.uri.fsPath ?? "").replace(/^~(?=\/|$)/, process.env.HOME ?? "~");
}

async function fromPythonExtension(resource?: vscode.Uri): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension("ms-python.python");
  if (!ext) return undefined;
  try {
    const api: any = ext.isActive ? ext.exports : await ext.activate();
    const envs = api?.environments;
    if (envs?.getActiveEnvironmentPath) {
      const active = envs.getActiveEnvironmentPath(resource);
      const resolved = await envs.resolveEnvironment?.(active);
      const exe = resolved?.executable?.uri?.fsPath ?? active?.path;
      if (exe) return exe;
    }
    const details = api?.settings?.getExecutionDetails?.(resource);
    const cmd: string[] | undefined = details?.execCommand;
    if (cmd && cmd.length === 1) return cmd[0];
  } catch {
    /* the Python extension failed: fall back */
  }
  return undefined;
}

/** What `bundled/tool/launch.py --info` reports of an interpreter (see that file). */
export interface StridelensInfo {
  version: string;
  python: string; // sys.executable
  pythonVersion: string;
  location: string; // the stridelens package used
  fromBundle: boolean; // the copy carried in the .vsix (bundled/libs), not the interpreter's own
  bundle: string | null;
  importStrategy: string;
  probeFile: string;
  probeParts?: [string, string][]; // the probe's (file, filename in the debuggee), in running order
  torch: string | null; // the interpreter's torch (never bundled)
  debugpy: string | null; // the interpreter's own debugpy
  bundledDebugpy: string | null;
}

export type ImportStrategy = "useBundled" | "fromEnvironment";

/** The extension's folder (set on activation): bundled/ lies there. */
let extensionRoot = "";
export function setExtensionRoot(p: string): void {
  extensionRoot = p;
}
export const launcher = (): string => join(extensionRoot, "bundled", "tool", "launch.py");
/** The bundled debugpy package folder, when the .vsix carries one. */
export const bundledDebugpy = (): string | undefined => {
  const d = join(extensionRoot, "bundled", "libs", "debugpy");
  return existsSync(join(d, "adapter")) ? d : undefined;
};

export function importStrategy(resource?: vscode.Uri): ImportStrategy {
  const v = vscode.workspace.getConfiguration("stridelens", resource).get<string>("importStrategy");
  return v === "fromEnvironment" ? "fromEnvironment" : "useBundled";
}

/**
 * The environment stridelens runs in: the launcher reads the import strategy from it, and the
 * language of the reports it analyses (`--analyze`, `--from-target`: the extension's language).
 */
export const stridelensEnv = (resource?: vscode.Uri): Record<string, string> => ({ STRIDELENS_IMPORT_STRATEGY: importStrategy(resource), STRIDELENS_LANG: language() });

export function run(python: string, args: string[], timeoutMs = 60_000, cwd?: string, env: Record<string, string> = {}, input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(python, args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, cwd, env: { ...process.env, PYTHONNOUSERSITE: process.env.PYTHONNOUSERSITE ?? "", ...env } }, (err, stdout, stderr) => {
      const e = err as (Error & { code?: number | string }) | null;
      const code = e ? (typeof e.code === "number" ? e.code : -1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) || (e && !stderr ? (e.code === "ENOENT" ? `ENOENT: ${python}` : String(e.message)) : "") });
    });
    child.stdin?.on("error", () => undefined); // a Python that is gone: the exit callback says so
    child.stdin?.end(input ?? "");
  });
}

/** `python -m stridelens ARGS` through the launcher (the bundled copy on sys.path). */
export function runStridelens(python: string, args: string[], timeoutMs = 60_000, resource?: vscode.Uri, input?: string) {
  return run(python, [launcher(), ...args], timeoutMs, undefined, stridelensEnv(resource), input);
}

/** Why an interpreter cannot run stridelens; `kind` picks what the notification offers. */
export class InterpreterProblem extends Error {
  constructor(message: string, readonly kind: "not-found" | "too-old" | "not-importable", readonly python: string) {
    super(message);
  }
}

export const TOO_OLD_EXIT = 3; // bundled/tool/launch.py: Python older than 3.10

/** What the interpreter has; throws an InterpreterProblem whose message says how to fix it. */
export async function checkStridelens(python: string, resource?: vscode.Uri): Promise<StridelensInfo> {
  const r = await runStridelens(python, ["--info"], 30_000, resource);
  const line = r.stdout.trim().split(/\n/).pop() ?? "";
  if (r.code === 0) return JSON.parse(line) as StridelensInfo;
  if (r.code === TOO_OLD_EXIT && /needs Python 3\.10/.test(r.stderr)) {
    const m = /; (.+) is Python (\S+)\s*$/.exec(r.stderr.trim().split("\n").pop()!);
    const said = m ? l10n.t("needs Python 3.10 or newer; {0} is Python {1}", m[1], m[2]) : r.stderr.trim().split("\n").pop()!.replace(/^stridelens /, "");
    throw new InterpreterProblem(l10n.t("stridelens: {0}. Select a Python 3.10 or newer.", said), "too-old", python);
  }
  if (/ENOENT|not found|No such file|EACCES/i.test(r.stderr) && !line.startsWith("{")) {
    throw new InterpreterProblem(l10n.t("stridelens: no Python interpreter at {0}. Select a Python 3.10 or newer (torch in it gives exact facts).", python), "not-found", python);
  }
  let why = r.stderr.trim().split("\n").slice(-3).join("\n");
  try {
    why = (JSON.parse(line) as { error?: string }).error ?? why;
  } catch {
    /* not the launcher's JSON */
  }
  throw new InterpreterProblem(
    (why ? l10n.t("stridelens could not be started with {0}: {1}", python, why) : l10n.t("stridelens could not be started with {0}", python)) +
      (existsSync(join(extensionRoot, "bundled", "libs", "stridelens")) ? "" : l10n.t(" (this build of the extension carries no bundled stridelens: build it with `npm run package`)")),
    "not-importable",
    python,
  );
}
