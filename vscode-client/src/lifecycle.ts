// Which language client is current, apart from VS Code (test/lifecycle.test.ts). Two rules keep
// VS Code's features from talking to a server that is not there:
//  - a client is made only once `prepare` has found an interpreter that can run the server;
//  - a client being replaced is stopped at once, before restart() first awaits. The restart on a
//    changed `stridelens.interpreter` runs in a configuration listener registered before the
//    client's own (`synchronize.configurationSection`); stopping the client there clears that
//    listener before it runs, instead of it sending workspace/didChangeConfiguration to a client
//    stopped under it ("Starting server failed").

export interface ManagedClient {
  start(): Promise<void>;
  stop(timeoutMs?: number): Promise<void>;
}

export interface LifecycleSteps<C extends ManagedClient> {
  /** Checks the interpreter and makes a client for it (not started); throws, saying why, when no server can run. */
  prepare(): Promise<C>;
  /** The current client runs. */
  ready(client: C): void;
  /** No server runs: the reason, and the client that failed to start when one was made. Not called for starts a restart superseded. */
  failed(error: Error, client?: C): void;
}

const asError = (e: unknown): Error => (e instanceof Error ? e : new Error(String(e)));

export class ClientLifecycle<C extends ManagedClient> {
  private current: C | undefined;
  private starting: Promise<void> | undefined;
  private generation = 0;

  constructor(private readonly steps: LifecycleSteps<C>, private readonly stopTimeoutMs = 4000) {}

  /** The client that is starting or running; undefined while no server can run. */
  get client(): C | undefined {
    return this.current;
  }

  /** Starts a client unless a start is in progress; never rejects (failures go to `steps.failed`). */
  start(): Promise<void> {
    this.starting ??= this.run(this.generation).finally(() => (this.starting = undefined));
    return this.starting;
  }

  private async run(generation: number): Promise<void> {
    let client: C;
    try {
      client = await this.steps.prepare();
    } catch (e) {
      if (generation === this.generation) this.steps.failed(asError(e));
      return;
    }
    if (generation !== this.generation) return; // a restart or stop came meanwhile: never started
    this.current = client;
    try {
      await client.start();
    } catch (e) {
      if (client === this.current) {
        this.current = undefined;
        this.steps.failed(asError(e), client);
      }
      return;
    }
    if (client === this.current) this.steps.ready(client);
    else await client.stop(this.stopTimeoutMs).catch(() => undefined); // replaced while starting
  }

  /** Detaches the current client; its stop begins before this returns (see the header). */
  stop(): Promise<void> {
    this.generation++;
    const c = this.current;
    this.current = undefined;
    // A client still starting rejects stop(): run() stops it once it has started.
    return c ? c.stop(this.stopTimeoutMs).catch(() => undefined) : Promise.resolve();
  }

  async restart(): Promise<void> {
    const stopping = this.stop();
    await this.starting;
    await stopping;
    await this.start();
  }
}
