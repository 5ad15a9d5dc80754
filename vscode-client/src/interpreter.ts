// Which Python runs the server, the probe source and the fallback debugger: the Python
// extension's selected interpreter when installed, else `stridelens.interpreter`, else python3.
import * as vscode from "vscode";
import { execFile } from "node:child_process";

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

export interface StridelensInfo {
  version: string;
  python: string; // sys.executable
  probeFile: string;
  debugpy: string | null;
  torch: string | null;
}

const CHECK = [
  "import json, sys, importlib.util as u",
  "import stridelens, stridelens.inspector.probe as p",
  "d = u.find_spec('debugpy')",
  "t = u.find_spec('torch')",
  "print(json.dumps({'version': getattr(stridelens, '__version__', '?'), 'python': sys.executable, 'probeFile': p.__file__, 'debugpy': d.origin if d else None, 'torch': t.origin if t else None}))",
].join("; ");

export function run(python: string, args: string[], timeoutMs = 60_000, cwd?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(python, args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, cwd, env: { ...process.env, PYTHONNOUSERSITE: process.env.PYTHONNOUSERSITE ?? "" } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as any).code === "number" ? (err as any).code : -1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) || (err && !stderr ? String(err.message) : "") });
    });
  });
}

/** What the interpreter has; throws an Error whose message says how to fix it. */
export async function checkStridelens(python: string): Promise<StridelensInfo> {
  const r = await run(python, ["-c", CHECK], 30_000);
  if (r.code === 0) {
    const line = r.stdout.trim().split(/\n/).pop() ?? "";
    return JSON.parse(line) as StridelensInfo;
  }
  if (/ENOENT|not found|No such file/i.test(r.stderr) && !/ModuleNotFoundError/.test(r.stderr)) {
    throw new Error(`Python interpreter not found: ${python}. Set "stridelens.interpreter" to a Python that has stridelens installed.`);
  }
  throw new Error(
    `stridelens is not installed in ${python}. Install it with: ${pipCommand(python)}` +
      (r.stderr ? `\n${r.stderr.trim().split("\n").slice(-3).join("\n")}` : ""),
  );
}

export function pipCommand(python: string): string {
  const q = /\s/.test(python) ? `"${python}"` : python;
  return `${q} -m pip install stridelens`;
}
