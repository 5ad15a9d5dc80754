// The fallback debugger: a `stridelens` debug type backed by debugpy's own adapter. Launching
// the current file or attaching to a PID runs debugpy's adapter with the selected interpreter:
// `python -m debugpy.adapter` when the interpreter has debugpy (its build has the compiled
// speedups), else the pure-Python debugpy bundled in the .vsix (`python bundled/libs/debugpy/adapter`;
// the adapter starts the debuggee with its own copy, so the program needs no debugpy).
// Attaching to host:port (loopback unless `allowRemote`) talks to the adapter that
// debugpy.listen() started in the target, as the Python extension does.
import * as vscode from "vscode";
import * as l10n from "@vscode/l10n";
import { join } from "node:path";
import { bundledDebugpy, resolveInterpreter, run, TOO_OLD_EXIT } from "./interpreter";
import { connectEndpoint } from "./runtime/address";


export function registerFallbackDebugger(log: (m: string) => void): vscode.Disposable[] {
  const provider: vscode.DebugConfigurationProvider = {
    provideDebugConfigurations() {
      return [
        { type: "stridelens", request: "launch", name: "stridelens: current file", program: "${file}", console: "internalConsole" },
        { type: "stridelens", request: "attach", name: "stridelens: attach to 127.0.0.1:5678", connect: { host: "127.0.0.1", port: 5678 } },
      ];
    },
    async resolveDebugConfiguration(folder, config) {
      if (!config.type && !config.request && !config.name) {
        const ed = vscode.window.activeTextEditor;
        if (!ed || ed.document.languageId !== "python") {
          void vscode.window.showErrorMessage(l10n.t("stridelens: open a Python file to debug it."));
          return undefined;
        }
        Object.assign(config, { type: "stridelens", request: "launch", name: "stridelens: current file", program: ed.document.uri.fsPath });
      }
      config.type = "stridelens";
      if (config.request === "launch") {
        config.console ??= "internalConsole";
        config.cwd ??= folder?.uri.fsPath;
      }
      config.justMyCode ??= true;
      config.subProcess ??= false;
      if (!config.python && !(config.request === "attach" && config.connect)) { // a connect attach runs no local Python
        const res = config.program && !String(config.program).includes("${") ? vscode.Uri.file(config.program) : folder?.uri;
        config.python = (await resolveInterpreter(res)).path;
      }
      if (config.request === "attach") {
        // "connect" (host and port, loopback unless allowRemote) is checked once variables are
        // substituted, in resolveDebugConfigurationWithSubstitutedVariables.
        if (!config.connect && config.processId === undefined) {
          void vscode.window.showErrorMessage(l10n.t('stridelens: an attach configuration needs "connect": {"host", "port"} or "processId".'));
          return undefined;
        }
      }
      return config;
    },
    resolveDebugConfigurationWithSubstitutedVariables(_folder, config) {
      if (config.request === "attach" && config.connect !== undefined) {
        const ep = connectEndpoint(config.connect, config.allowRemote === true);
        if ("error" in ep) {
          void vscode.window.showErrorMessage(`stridelens: ${ep.error}.`); // (address.ts words it)
          return undefined;
        }
        config.connect = ep;
      }
      if (typeof config.processId === "string" && /^\d+$/.test(config.processId)) config.processId = Number(config.processId);
      if (config.python && typeof config.python === "string") config.python = [config.python];
      return config;
    },
  };
  const factory: vscode.DebugAdapterDescriptorFactory = {
    async createDebugAdapterDescriptor(session) {
      const cfg = session.configuration;
      if (cfg.request === "attach" && cfg.connect !== undefined) {
        // The target's debugpy.listen() started an adapter on that port: talk DAP to it. A
        // local `python -m debugpy.adapter` would not connect there; it would wait for a
        // debug server to connect to it, and time out.
        // Checked and normalised to {host, port} in resolveDebugConfigurationWithSubstitutedVariables.
        const { host, port } = cfg.connect as { host: string; port: number };
        log(`fallback debugger: attaching to the debugpy adapter at ${host}:${port}`);
        return new vscode.DebugAdapterServer(port, host);
      }
      const py = Array.isArray(session.configuration.python) ? session.configuration.python[0] : session.configuration.python;
      const python = py || (await resolveInterpreter(session.workspaceFolder?.uri)).path;
      const env = { PYDEVD_DISABLE_FILE_VALIDATION: "1" };
      const check = await run(python, ["-c", `import sys; print(sys.version_info >= (3, 8) or exit(${TOO_OLD_EXIT})); import debugpy; print(debugpy.__version__)`], 20_000);
      if (check.code === 0) {
        log(`fallback debugger: ${python} -m debugpy.adapter (the interpreter's debugpy ${check.stdout.trim().split("\n").pop()})`);
        return new vscode.DebugAdapterExecutable(python, ["-m", "debugpy.adapter"], { env });
      }
      if (/ENOENT|EACCES/.test(check.stderr)) throw new Error(l10n.t("stridelens: no Python interpreter at {0}. Select a Python 3.10 or newer.", python));
      if (check.code === TOO_OLD_EXIT) throw new Error(l10n.t("stridelens: {0} is too old for debugpy (Python 3.8 or newer).", python));
      const bundled = bundledDebugpy();
      if (!bundled) throw new Error(l10n.t("debugpy is not installed in {0}, and this build of the extension carries no bundled debugpy. Install it with: {0} -m pip install debugpy", python));
      log(`fallback debugger: ${python} ${join(bundled, "adapter")} (debugpy bundled with the extension; ${python} has none)`);
      return new vscode.DebugAdapterExecutable(python, [join(bundled, "adapter")], { env });
    },
  };
  return [
    vscode.debug.registerDebugConfigurationProvider("stridelens", provider),
    vscode.debug.registerDebugConfigurationProvider("stridelens", { provideDebugConfigurations: provider.provideDebugConfigurations }, vscode.DebugConfigurationProviderTriggerKind.Dynamic),
    vscode.debug.registerDebugAdapterDescriptorFactory("stridelens", factory),
    vscode.commands.registerCommand("stridelens.debugCurrentFile", async () => {
      const ed = vscode.window.activeTextEditor;
      if (!ed || ed.document.languageId !== "python") {
        return void vscode.window.showErrorMessage(l10n.t("stridelens: open a Python file to debug it."));
      }
      if (ed.document.isDirty) await ed.document.save();
      const folder = vscode.workspace.getWorkspaceFolder(ed.document.uri);
      await vscode.debug.startDebugging(folder, {
        type: "stridelens", request: "launch", name: `stridelens: ${ed.document.fileName.split(/[\\/]/).pop()}`,
        program: ed.document.uri.fsPath, console: "internalConsole",
      });
    }),
    vscode.commands.registerCommand("stridelens.attach", async () => {
      const target = await vscode.window.showInputBox({
        title: l10n.t("stridelens: attach"),
        prompt: l10n.t("A PID (debugpy is injected with gdb) or HOST:PORT of a process running debugpy.listen()"),
        placeHolder: "12345 or 127.0.0.1:5678",
        validateInput: (v) => (/^\d+$/.test(v.trim()) || /^[\w.\-[\]:]+:\d+$/.test(v.trim()) ? undefined : l10n.t("a PID or HOST:PORT")),
      });
      if (!target) return;
      const t = target.trim();
      const folder = vscode.workspace.workspaceFolders?.[0];
      const cfg: vscode.DebugConfiguration = /^\d+$/.test(t)
        ? { type: "stridelens", request: "attach", name: `stridelens: PID ${t}`, processId: Number(t) }
        : (() => {
            const i = t.lastIndexOf(":");
            return { type: "stridelens", request: "attach", name: `stridelens: ${t}`, connect: { host: t.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(t.slice(i + 1)) } };
          })();
      await vscode.debug.startDebugging(folder, cfg);
    }),
  ];
}
