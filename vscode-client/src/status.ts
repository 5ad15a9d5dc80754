// What the stridelens status bar item says (test/status.test.ts); no vscode import here.

export type Phase = "starting" | "ready" | "error" | "stopped";

export interface StatusState {
  phase: Phase;
  python?: string; // the interpreter's path
  pythonSource?: string; // where that choice came from
  version?: string; // stridelens
  fromBundle?: boolean;
  location?: string; // the stridelens package used
  pythonVersion?: string;
  hasTorch?: boolean; // undefined: not checked yet
  exact?: boolean; // the server's `stridelens/analyzed`; undefined: no analysis yet
  replayOff?: boolean;
  error?: string;
}

export interface StatusView {
  text: string;
  tooltip: string;
  background?: "error" | "warning";
}

/** A short name for an interpreter: the environment's folder for `<env>/bin/python`, else the path. */
export function interpreterLabel(path: string): string {
  const m = /([^\\/]+)[\\/](?:bin|Scripts)[\\/]python[\d.]*(?:\.exe)?$/i.exec(path);
  return m && !/^(usr|local|homebrew)$/i.test(m[1]) ? m[1] : path;
}

export function describeStatus(s: StatusState): StatusView {
  const lines = [`stridelens language server: ${s.phase}`];
  if (s.python) lines.push(`Python: ${s.python}${s.pythonVersion ? ` (${s.pythonVersion})` : ""}${s.pythonSource ? `, from ${s.pythonSource}` : ""}`);
  if (s.version) lines.push(`stridelens ${s.version} ${s.fromBundle ? "bundled with the extension" : `from the interpreter (${s.location ?? "?"})`}`);
  const noTorch = s.phase === "ready" && s.hasTorch === false && !s.replayOff;
  let text: string;
  let background: StatusView["background"];
  if (s.phase === "ready") {
    if (noTorch) {
      text = `$(warning) stridelens: no torch in ${interpreterLabel(s.python ?? "python")}, symbolic facts only`;
      background = "warning";
      lines.push(
        "torch is not installed in this interpreter: hovers, inlay hints and diagnostics come from the symbolic analysis; " +
          "exact shapes and strides (meta replay) and the runtime inspector need torch.",
        "Install torch into it (https://pytorch.org/get-started/locally/) or select an interpreter that has torch.",
      );
    } else {
      text = `$(pulse) stridelens${s.exact === undefined ? "" : s.exact ? " · exact" : " · static"}`;
    }
  } else {
    const icon = { starting: "$(sync~spin)", error: "$(error)", stopped: "$(circle-slash)" }[s.phase];
    text = `${icon} stridelens ${s.phase}`;
    if (s.phase === "error") background = "error";
  }
  if (!noTorch && s.exact !== undefined) {
    lines.push(s.exact ? "Facts: exact (torch-backed meta replay)" : "Facts: static (symbolic; exact facts not available yet or replay off)");
  }
  if (s.error) lines.push(`Error: ${s.error}`);
  lines.push("Click for the output channel.");
  return { text, tooltip: lines.join("\n"), background };
}
