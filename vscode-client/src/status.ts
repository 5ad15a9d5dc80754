// What the stridelens status bar item says (test/status.test.ts); no vscode import here.
import * as l10n from "@vscode/l10n";

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
  const phaseText = { starting: l10n.t("starting"), ready: l10n.t("ready"), error: l10n.t("error"), stopped: l10n.t("stopped") }[s.phase];
  const lines = [l10n.t("stridelens language server: {0}", phaseText)];
  if (s.python) {
    const version = s.pythonVersion ? ` (${s.pythonVersion})` : "";
    lines.push(s.pythonSource ? l10n.t("Python: {0}{1}, from {2}", s.python, version, s.pythonSource) : l10n.t("Python: {0}{1}", s.python, version));
  }
  if (s.version) lines.push(s.fromBundle ? l10n.t("stridelens {0} bundled with the extension", s.version) : l10n.t("stridelens {0} from the interpreter ({1})", s.version, s.location ?? "?"));
  const noTorch = s.phase === "ready" && s.hasTorch === false && !s.replayOff;
  let text: string;
  let background: StatusView["background"];
  if (s.phase === "ready") {
    if (noTorch) {
      text = `$(warning) ${l10n.t("stridelens: no torch in {0}, symbolic facts only", interpreterLabel(s.python ?? "python"))}`;
      background = "warning";
      lines.push(
        l10n.t("torch is not installed in this interpreter: hovers, inlay hints and diagnostics come from the symbolic analysis; exact shapes and strides (meta replay) and the runtime inspector need torch."),
        l10n.t("Install torch into it (https://pytorch.org/get-started/locally/) or select an interpreter that has torch."),
      );
    } else {
      text = `$(pulse) stridelens${s.exact === undefined ? "" : s.exact ? ` · ${l10n.t("exact")}` : ` · ${l10n.t("static")}`}`;
    }
  } else {
    const icon = { starting: "$(sync~spin)", error: "$(error)", stopped: "$(circle-slash)" }[s.phase];
    text = `${icon} stridelens ${phaseText}`;
    if (s.phase === "error") background = "error";
  }
  if (!noTorch && s.exact !== undefined) {
    lines.push(s.exact ? l10n.t("Facts: exact (torch-backed meta replay)") : l10n.t("Facts: static (symbolic; exact facts not available yet or replay off)"));
  }
  if (s.error) lines.push(l10n.t("Error: {0}", s.error));
  lines.push(l10n.t("Click for the output channel."));
  return { text, tooltip: lines.join("\n"), background };
}
