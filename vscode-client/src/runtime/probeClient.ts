// The probe inside a stopped debuggee: injected once per debuggee through DAP `evaluate`
// (one `exec(compile(...))` into the private module `_stridelens_probe`, as
// stridelens.inspector.session does), then called by short expressions. Never evaluates
// while the debuggee runs: every call checks the session's stopped state (and its epoch).
import * as l10n from "@vscode/l10n";
import * as vscode from "vscode";
import { createHash } from "node:crypto";
import type { Describe, FrameReport, ProcessReport } from "./facts";
import { parseProbeAnswer, pythonString, unquotePythonRepr } from "./pyliteral";
import { isSafeExpression } from "./safety";

export const PRIVATE_NAME = "_stridelens_probe";
/** An inspector module evaluated into the debuggee as `sys.modules[name]` (its PRIVATE_NAME and FILENAME). */
export interface InspectorModule {
  name: string;
  filename: string;
  source: () => Promise<string>;
}
/** One file of the probe: its source and the filename its code runs under in the debuggee. */
export interface ProbePart {
  source: string;
  filename: string;
}
export const PIN_MIN_BYTES = 1 << 20;

export class NotStopped extends Error {
  constructor() {
    super(l10n.t("the debuggee is running: runtime facts are read only while it is stopped"));
  }
}

export interface StopState {
  stopped: boolean;
  epoch: number; // bumped on every resume: answers from an older stop are dropped
  threadId?: number;
}

export class ProbeClient {
  private injected: Promise<void> | undefined;
  private readonly modules = new Map<string, Promise<void>>(); // injected inspector modules by private name
  target: Record<string, unknown> | undefined;

  constructor(
    readonly session: vscode.DebugSession,
    readonly state: StopState,
    private readonly probeSource: () => Promise<ProbePart[]>,
    private readonly log: (msg: string) => void,
  ) {}

  private async evaluate(expression: string, frameId: number, epoch: number): Promise<string> {
    if (!this.state.stopped || this.state.epoch !== epoch) throw new NotStopped();
    const body = await this.session.customRequest("evaluate", {
      expression,
      frameId,
      context: "repl",
      format: { rawString: true },
    });
    if (!this.state.stopped || this.state.epoch !== epoch) throw new NotStopped();
    return String(body?.result ?? "");
  }

  /** Inject once per debuggee: a probe already there with the same source id is reused. */
  ensure(frameId: number, epoch: number): Promise<void> {
    if (!this.injected) {
      this.injected = this.inject(frameId, epoch).catch((e) => {
        this.injected = undefined;
        throw e;
      });
    }
    return this.injected;
  }

  private async inject(frameId: number, epoch: number): Promise<void> {
    await this.injectParts(PRIVATE_NAME, await this.probeSource(), frameId, epoch);
    this.target = await this.callRaw<Record<string, unknown>>("setup_json()", frameId, epoch);
    this.log(`debuggee: ${JSON.stringify(this.target)}`);
  }

  /**
   * Evaluate each part, in order, into the one module `sys.modules[name]` of the debuggee, unless
   * those exact sources are there (as stridelens.inspector.session.inject_parts: the same id).
   */
  private async injectParts(name: string, parts: ProbePart[], frameId: number, epoch: number): Promise<void> {
    const digest = createHash("sha1").update(parts.map((p) => p.source).join("\0"), "utf8").digest("hex").slice(0, 16);
    const have = unquotePythonRepr(
      await this.evaluate(`getattr(__import__('sys').modules.get(${pythonString(name)}), 'SOURCE_ID', None)`, frameId, epoch),
    );
    if (have === digest) return;
    // The id goes in last: a part that fails leaves the module without it, so the next inject retries.
    const last = parts.length - 1;
    const items = parts.map((p, i) =>
      `(${pythonString(i === last ? `${p.source}\nSOURCE_ID = ${pythonString(digest)}\n` : p.source)}, ${pythonString(p.filename)})`);
    const t0 = Date.now();
    // One expression: a multi-statement snippet would leave temporaries in the user's globals.
    await this.evaluate(
      `[exec(compile(src, filename, 'exec'), d) for d in [__import__('sys').modules.setdefault(${pythonString(name)}, ` +
        `__import__('types').ModuleType(${pythonString(name)})).__dict__] for src, filename in [${items.join(", ")}]] and None`,
      frameId,
      epoch,
    );
    this.log(`${parts.map((p) => p.filename).join(", ")} injected into the debuggee (${Date.now() - t0} ms)`);
  }

  /**
   * A call into an inspector module that builds on the probe (the gradient probe, the
   * allocator probe, ...): each of `modules` is injected once, in order, after the probe.
   */
  async callModule<T>(frameId: number, modules: InspectorModule[], call: string): Promise<T> {
    const epoch = this.state.epoch;
    await this.ensure(frameId, epoch);
    for (const m of modules) {
      let done = this.modules.get(m.name);
      if (!done) {
        done = (async () => this.injectParts(m.name, [{ source: await m.source(), filename: m.filename }], frameId, epoch))();
        done.catch(() => this.modules.delete(m.name));
        this.modules.set(m.name, done);
      }
      await done;
    }
    return this.callRaw<T>(call, frameId, epoch, modules[modules.length - 1].name);
  }

  private async callRaw<T>(call: string, frameId: number, epoch: number, module = PRIVATE_NAME): Promise<T> {
    const raw = await this.evaluate(`__import__('sys').modules[${pythonString(module)}].${call}`, frameId, epoch);
    const ans = parseProbeAnswer<T>(raw);
    if (!ans.ok) throw new Error(ans.error);
    return ans.result;
  }

  async call<T>(call: string, frameId: number): Promise<T> {
    const epoch = this.state.epoch;
    await this.ensure(frameId, epoch);
    return this.callRaw<T>(call, frameId, epoch);
  }

  frameReport(frameId: number): Promise<FrameReport> {
    return this.call<FrameReport>("frame_report_json(locals())", frameId);
  }

  processReport(frameId: number, top = 20): Promise<ProcessReport> {
    return this.call<ProcessReport>(`process_report_json(${top | 0}, ${PIN_MIN_BYTES}, locals())`, frameId);
  }

  /** Only side-effect-free expressions (names, attributes, literal subscripts). */
  describe(expr: string, frameId: number): Promise<Describe> {
    if (!isSafeExpression(expr)) return Promise.reject(new Error(l10n.t("not evaluated (not a plain name/attribute/subscript): {0}", expr)));
    return this.call<Describe>(`describe_expr_json(${pythonString(expr)}, globals(), locals())`, frameId);
  }
}
