// The language client: `python bundled/tool/launch.py serve` (= `python -m stridelens serve` with
// the bundled stridelens on sys.path) over stdio (vscode-languageclient appends `--stdio`), a
// status bar item, and settings passed through as the server's keys.
import * as os from "os";
import * as vscode from "vscode";
import * as l10n from "@vscode/l10n";
import { LanguageClient, LanguageClientOptions, ServerOptions, State, TransportKind } from "vscode-languageclient/node";
import { checkStridelens, Interpreter, InterpreterProblem, launcher, resolveInterpreter, StridelensInfo, stridelensEnv } from "./interpreter";
import { ClientLifecycle } from "./lifecycle";
import { describeStatus, Phase } from "./status";

/** The `stridelens` settings the server reads (server/lsp/configuration.py). */
/** (`locale`: "auto" lets the server follow initialize's `locale`, VS Code's display language.) */
export const SERVER_KEYS = ["select", "ignore", "severity", "inlayHints", "recordedHints", "replay", "debounceMs", "locale"] as const;

export function serverSettings(resource?: vscode.Uri): Record<string, unknown> {
  const cfg = vscode.workspace.getConfiguration("stridelens", resource);
  const out: Record<string, unknown> = {};
  for (const k of SERVER_KEYS) {
    const v = cfg.get(k);
    if (v !== undefined && v !== null) out[k] = v;
  }
  return out;
}

/**
 * Errors of a client go to the output channel only, except while it is the current one and runs:
 * a failed start is reported once by ServerManager, and what fails while a client is stopped for
 * a restart (a request or notification caught in between) is no news to the user.
 */
class QuietClient extends LanguageClient {
  loud = false;

  override error(message: string, data?: unknown, showNotification: boolean | "force" = true): void {
    super.error(message, data, this.loud && showNotification);
  }

  override stop(timeout?: number): Promise<void> {
    this.loud = false;
    return super.stop(timeout);
  }
}

export class ServerManager implements vscode.Disposable {
  interpreter: Interpreter | undefined;
  info: StridelensInfo | undefined;
  private phase: Phase = "stopped";
  private exact: boolean | undefined;
  private error: string | undefined;
  private readonly status: vscode.StatusBarItem;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly life = new ClientLifecycle<QuietClient>({
    prepare: () => this.prepare(),
    ready: (client) => {
      client.loud = true;
      this.set("ready");
    },
    failed: (e) => this.failed(e),
  });

  constructor(readonly output: vscode.OutputChannel) {
    this.status = vscode.window.createStatusBarItem("stridelens.status", vscode.StatusBarAlignment.Right, 100);
    this.status.name = "stridelens";
    this.status.command = "stridelens.showOutput";
    this.disposables.push(this.status);
    this.render();
    this.status.show();
  }

  /** The client while one is starting or running; undefined while no server can run. */
  get client(): LanguageClient | undefined {
    return this.life.client;
  }

  /** The status bar item again (its language changed). */
  refresh(): void {
    this.render();
  }

  private render(): void {
    const v = describeStatus({
      phase: this.phase,
      python: this.info?.python ?? this.interpreter?.path,
      pythonSource: this.interpreter?.source,
      pythonVersion: this.info?.pythonVersion,
      version: this.info?.version,
      fromBundle: this.info?.fromBundle,
      location: this.info?.location,
      hasTorch: this.info ? this.info.torch !== null : undefined,
      exact: this.exact,
      replayOff: !vscode.workspace.getConfiguration("stridelens").get<boolean>("replay", true),
      error: this.error,
    });
    this.status.text = v.text;
    this.status.tooltip = v.tooltip;
    this.status.backgroundColor = v.background ? new vscode.ThemeColor(`statusBarItem.${v.background}Background`) : undefined;
  }

  private set(phase: Phase, error?: string): void {
    this.phase = phase;
    this.error = error;
    this.render();
  }

  start(): Promise<void> {
    this.set("starting");
    return this.life.start();
  }

  /** Stops the server; the client stops before this first awaits (see lifecycle.ts). */
  async stop(): Promise<void> {
    const stopping = this.life.stop();
    this.set("stopped");
    await stopping;
  }

  restart(): Promise<void> {
    this.set("starting");
    return this.life.restart();
  }

  /** Resolves and checks the interpreter, then makes the client; throws when no server can run. */
  private async prepare(): Promise<QuietClient> {
    this.exact = undefined;
    this.info = undefined;
    const resource = vscode.window.activeTextEditor?.document.uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
    this.interpreter = await resolveInterpreter(resource);
    const python = this.interpreter.path;
    this.output.appendLine(`Using ${python} (from ${this.interpreter.source})`);
    this.info = await checkStridelens(python, resource);
    const i = this.info;
    this.output.appendLine(
      `stridelens ${i.version} (${i.fromBundle ? "bundled" : "the interpreter's"}, importStrategy ${i.importStrategy}) at ${i.location}; ` +
        `Python ${i.pythonVersion}; torch: ${i.torch ?? "not installed (symbolic facts only)"}; debugpy: ${i.debugpy ?? `not installed (the debugger uses the bundled copy${i.bundledDebugpy ? "" : ", absent from this build"})`}`,
    );
    if (!vscode.workspace.getConfiguration("stridelens").get<boolean>("replay", true)) this.exact = false;
    const serverOptions: ServerOptions = {
      command: python,
      args: [launcher(), "serve"],
      transport: TransportKind.stdio,
      // Not the workspace as working directory: a workspace folder named `torch/` must not be
      // what `import torch` finds (the launcher takes its own folder off sys.path).
      options: { cwd: os.tmpdir(), env: { ...process.env, PYTHONUNBUFFERED: "1", ...stridelensEnv(resource) } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
        // Python cells of any notebook (.ipynb in VS Code's notebook editor): hover, hints and
        // quick fixes are asked for them. The cells' text reaches the server through the LSP
        // 3.17 notebook sync the server announces (notebookDocumentSync), not as documents.
        { notebook: "*", language: "python" },
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
    const client = new QuietClient("stridelens", "stridelens", serverOptions, clientOptions);
    client.onDidChangeState((e) => {
      if (client !== this.life.client) return;
      if (e.newState === State.Running) this.set("ready");
      else if (e.newState === State.Starting) this.set("starting");
      else if (e.newState === State.Stopped && this.phase !== "error") this.set("stopped");
    });
    client.onNotification("stridelens/analyzed", (p: { exact?: boolean }) => {
      if (typeof p?.exact === "boolean" && this.exact !== p.exact && (p.exact || this.exact === undefined)) {
        this.exact = p.exact;
        this.render();
      }
    });
    return client;
  }

  private failed(e: Error): void {
    const first = e.message.split("\n")[0];
    this.set("error", first);
    if (e instanceof InterpreterProblem) {
      this.output.appendLine(e.message);
      // What works: another interpreter (stridelens itself is bundled, so a Python 3.10+ is all
      // the server needs). Not awaited: the notification stays open until the user acts on it
      // (VS Code has no way to close it for us), and a restart must not wait for it.
      const pyExt = vscode.extensions.getExtension("ms-python.python") !== undefined;
      const select = l10n.t("Select interpreter");
      const set = l10n.t("Set stridelens.interpreter");
      const show = l10n.t("Show output");
      void vscode.window.showErrorMessage(first, pyExt ? select : set, show).then(async (choice) => {
        if (choice === select) await vscode.commands.executeCommand("python.setInterpreter");
        else if (choice === set) await vscode.commands.executeCommand("workbench.action.openSettings", "stridelens.interpreter");
        else if (choice === show) this.output.show();
      });
      return;
    }
    this.output.appendLine(`The language server failed to start: ${e.message}`);
    void vscode.window.showErrorMessage(l10n.t("stridelens: the language server failed to start ({0}). See the output channel.", first), l10n.t("Show output")).then((c) => c && this.output.show());
  }

  dispose(): void {
    void this.stop();
    for (const d of this.disposables) d.dispose();
  }
}
