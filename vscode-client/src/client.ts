// The language client: `python -m stridelens serve` over stdio (vscode-languageclient appends
// `--stdio`), a status bar item, and settings passed through as the server's keys.
import * as os from "os";
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions, State, TransportKind } from "vscode-languageclient/node";
import { checkStridelens, Interpreter, pipCommand, resolveInterpreter, StridelensInfo } from "./interpreter";

/** The `stridelens` settings the server reads (server/lsp/configuration.py). */
export const SERVER_KEYS = ["select", "ignore", "severity", "inlayHints", "replay", "debounceMs"] as const;

export function serverSettings(resource?: vscode.Uri): Record<string, unknown> {
  const cfg = vscode.workspace.getConfiguration("stridelens", resource);
  const out: Record<string, unknown> = {};
  for (const k of SERVER_KEYS) {
    const v = cfg.get(k);
    if (v !== undefined && v !== null) out[k] = v;
  }
  return out;
}

type Phase = "starting" | "ready" | "error" | "stopped";

export class ServerManager implements vscode.Disposable {
  client: LanguageClient | undefined;
  interpreter: Interpreter | undefined;
  info: StridelensInfo | undefined;
  private phase: Phase = "stopped";
  private exact: boolean | undefined;
  private error: string | undefined;
  private readonly status: vscode.StatusBarItem;
  private starting: Promise<void> | undefined;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(readonly output: vscode.OutputChannel) {
    this.status = vscode.window.createStatusBarItem("stridelens.status", vscode.StatusBarAlignment.Right, 100);
    this.status.name = "stridelens";
    this.status.command = "stridelens.showOutput";
    this.disposables.push(this.status);
    this.render();
    this.status.show();
  }

  private render(): void {
    const facts = this.exact === undefined ? "" : this.exact ? " · exact" : " · static";
    const icon = { starting: "$(sync~spin)", ready: "$(pulse)", error: "$(error)", stopped: "$(circle-slash)" }[this.phase];
    this.status.text = `${icon} stridelens${this.phase === "ready" ? facts : this.phase === "starting" ? " starting" : this.phase === "error" ? " error" : " stopped"}`;
    const lines = [`stridelens language server: ${this.phase}`];
    if (this.interpreter) lines.push(`Python: ${this.interpreter.path} (from ${this.interpreter.source})`);
    if (this.info) lines.push(`stridelens ${this.info.version}${this.info.torch ? ", torch available" : ", torch not installed"}`);
    if (this.exact !== undefined) {
      lines.push(this.exact ? "Facts: exact (torch-backed meta replay)" : "Facts: static (symbolic; exact facts not available yet or replay off)");
    }
    if (this.error) lines.push(`Error: ${this.error}`);
    lines.push("Click for the output channel.");
    this.status.tooltip = lines.join("\n");
    this.status.backgroundColor = this.phase === "error" ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  }

  private set(phase: Phase, error?: string): void {
    this.phase = phase;
    this.error = error;
    this.render();
  }

  start(): Promise<void> {
    if (!this.starting) this.starting = this.doStart().finally(() => (this.starting = undefined));
    return this.starting;
  }

  private async doStart(): Promise<void> {
    this.set("starting");
    this.exact = undefined;
    const resource = vscode.window.activeTextEditor?.document.uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
    this.interpreter = await resolveInterpreter(resource);
    const python = this.interpreter.path;
    this.output.appendLine(`Using ${python} (from ${this.interpreter.source})`);
    try {
      this.info = await checkStridelens(python);
      this.output.appendLine(`stridelens ${this.info.version} at ${this.info.probeFile}; torch: ${this.info.torch ?? "not installed"}; debugpy: ${this.info.debugpy ?? "not installed"}`);
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      this.output.appendLine(msg);
      this.set("error", msg.split("\n")[0]);
      // Not awaited: the notification stays open until the user acts on it, and restart()
      // waits for a start in progress, so fixing the interpreter setting would do nothing
      // while it is open.
      void vscode.window.showErrorMessage(msg.split("\n")[0], "Copy install command", "Open settings", "Show output").then(async (choice) => {
        if (choice === "Copy install command") await vscode.env.clipboard.writeText(pipCommand(python));
        else if (choice === "Open settings") await vscode.commands.executeCommand("workbench.action.openSettings", "stridelens.interpreter");
        else if (choice === "Show output") this.output.show();
      });
      return;
    }
    if (!vscode.workspace.getConfiguration("stridelens").get<boolean>("replay", true)) this.exact = false;
    const serverOptions: ServerOptions = {
      command: python,
      args: ["-m", "stridelens", "serve"],
      transport: TransportKind.stdio,
      // Not the workspace as working directory: `python -m` puts it first on sys.path, so a
      // workspace folder named `stridelens/` (or `torch/`) would shadow the real packages.
      options: { cwd: os.tmpdir(), env: { ...process.env, PYTHONUNBUFFERED: "1" } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
      ],
      outputChannel: this.output,
      initializationOptions: serverSettings(resource),
      synchronize: { configurationSection: "stridelens" },
      middleware: {
        workspace: {
          // Only the keys the server knows: the client-side ones would be "unknown setting".
          configuration: (params) =>
            params.items.map((item) => {
              const uri = item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined;
              if (!item.section || item.section === "stridelens") return serverSettings(uri);
              return vscode.workspace.getConfiguration(undefined, uri).get(item.section) ?? null;
            }),
        },
      },
    };
    const client = new LanguageClient("stridelens", "stridelens", serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((e) => {
      if (client !== this.client) return;
      if (e.newState === State.Running) this.set("ready");
      else if (e.newState === State.Starting) this.set("starting");
      else if (e.newState === State.Stopped && this.phase !== "error") this.set("stopped");
    });
    try {
      await client.start();
      client.onNotification("stridelens/analyzed", (p: { exact?: boolean }) => {
        if (typeof p?.exact === "boolean" && this.exact !== p.exact && (p.exact || this.exact === undefined)) {
          this.exact = p.exact;
          this.render();
        }
      });
      this.set("ready");
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      this.output.appendLine(`The language server failed to start: ${msg}`);
      this.set("error", msg);
      void vscode.window.showErrorMessage(`stridelens: the language server failed to start (${msg}). See the output channel.`, "Show output").then((c) => c && this.output.show());
    }
  }

  async stop(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    if (c) {
      try {
        await c.stop(4000);
      } catch {
        /* already gone */
      }
    }
    this.set("stopped");
  }

  async restart(): Promise<void> {
    await this.starting?.catch(() => undefined);
    await this.stop();
    await this.start();
  }

  dispose(): void {
    void this.stop();
    for (const d of this.disposables) d.dispose();
  }
}
