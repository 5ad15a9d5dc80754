// The `stridelens inspect` reports the memory panel shows on request: which inspector modules
// each one injects into the stopped debuggee (after the probe), the call that reads it, and
// the analysis that turns the answer into the report's JSON, which stays stridelens' own
// Python (`launch.py --analyze KIND`, the same function `inspect` uses).
import * as l10n from "@vscode/l10n";
import type { RuntimeController, StoppedFrame } from "./controller";

export type ReportKind = "grads" | "cuda-summary" | "diff-steps";

interface ModuleFile {
  name: string; // the module's PRIVATE_NAME
  filename: string; // its FILENAME (what tracebacks show)
  file: string; // in stridelens/inspector/
}

const DIFF_PROBE: ModuleFile = { name: "_stridelens_diff", filename: "<stridelens-diff-probe>", file: "diff_probe.py" };

export const REPORTS: Record<Exclude<ReportKind, "diff-steps">, { modules: ModuleFile[]; call: string }> = {
  // inspect --grads: reads gradient and weight values (grads_probe.py).
  grads: { modules: [{ name: "_stridelens_grads", filename: "<stridelens-grads-probe>", file: "grads_probe.py" }], call: "grads_json(globals(), locals())" },
  // inspect --cuda-summary: the allocator's host-side counters and the live storages' totals (allocator_probe.py on diff_probe.py's walk).
  "cuda-summary": {
    modules: [DIFF_PROBE, { name: "_stridelens_allocator", filename: "<stridelens-allocator-probe>", file: "allocator_probe.py" }],
    call: "summary_json(locals())",
  },
};

/** Read report `kind` of the stopped frame: the probe's answer, analysed. */
export async function readReport(
  frame: StoppedFrame,
  kind: Exclude<ReportKind, "diff-steps">,
  inspectorSource: (file: string) => Promise<string>,
  analyze: (kind: ReportKind, raw: unknown) => Promise<unknown>,
): Promise<unknown> {
  const spec = REPORTS[kind];
  const modules = spec.modules.map((m) => ({ name: m.name, filename: m.filename, source: () => inspectorSource(m.file) }));
  return analyze(kind, await frame.client.callModule<unknown>(frame.frameId, modules, spec.call));
}

const STEP_TIMEOUT_MS = 120_000; // one step: from one hit of the breakpoint to the next

/**
 * `inspect --diff-steps n` at this stop: record it, continue until the breakpoint's line has
 * been hit `n` more times (recording each), and diff the last stop against the first. The
 * debuggee is left stopped at the last hit.
 */
export async function readStepDiff(
  ctl: RuntimeController,
  frame: StoppedFrame,
  n: number,
  inspectorSource: (file: string) => Promise<string>,
  analyze: (kind: ReportKind, raw: unknown) => Promise<unknown>,
  progress: (message: string) => void,
): Promise<unknown> {
  const modules = [{ name: DIFF_PROBE.name, filename: DIFF_PROBE.filename, source: () => inspectorSource(DIFF_PROBE.file) }];
  await frame.client.callModule(frame.frameId, modules, "begin_json(locals())");
  let f = frame;
  for (let hit = 1; hit <= n; hit++) {
    progress(l10n.t("running to hit {0} of {1} of line {2}…", hit, n, frame.line));
    const next = await ctl.continueToSameLine(f, STEP_TIMEOUT_MS);
    if (!next) throw new Error(l10n.t("the program ended after {0} of {1} steps", hit - 1, n));
    f = next;
    if (hit < n) await f.client.callModule(f.frameId, modules, "sample_json(locals())");
  }
  return analyze("diff-steps", await f.client.callModule(f.frameId, modules, "end_json(locals())"));
}
