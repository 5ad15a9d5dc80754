// The language of the extension's own messages (status bar, notifications, memory panel, runtime
// hover card): English in the code, translations in l10n/bundle.l10n.<language>.json, read through
// @vscode/l10n (the same `l10n.t(message, ...args)` keys as `vscode.l10n.t`, usable in the unit
// tests and the webview). `stridelens.locale` "auto" follows VS Code's display language (VS Code
// has then loaded the matching bundle itself: `vscode.l10n.bundle`); "en" and "zh-CN" pick one
// here. The language server gets the same setting as its `locale` key. No VS Code imports here.
import * as l10n from "@vscode/l10n";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export type Bundle = Record<string, string>;

/** The bundles under l10n/ (English is the source and has none). */
export const LANGUAGES = ["zh-cn"] as const;

/** A language tag (`zh-CN`, `zh-cn`, `zh-Hans`, `zh_CN.UTF-8`, `en-US`) as a bundle's name; undefined: English or unknown. */
export function bundleLanguage(tag: string | undefined): (typeof LANGUAGES)[number] | undefined {
  const t = (tag ?? "").trim().toLowerCase().replace(/_/g, "-").split(".")[0];
  if (t === "zh" || t === "zh-cn" || t === "zh-hans" || t === "zh-sg" || t.startsWith("zh-hans-")) return "zh-cn";
  return undefined;
}

/**
 * The language the extension speaks: the `stridelens.locale` setting unless it is "auto" (or
 * empty, or not a language stridelens knows), else VS Code's display language.
 */
export function chooseLanguage(setting: string | undefined, displayLanguage: string): string {
  const s = (setting ?? "").trim();
  if (s && s.toLowerCase() !== "auto" && (bundleLanguage(s) || /^en\b/i.test(s))) return s;
  return displayLanguage;
}

export function bundlePath(extensionRoot: string, language: string): string {
  return join(extensionRoot, "l10n", `bundle.l10n.${language}.json`);
}

/** The bundle of `language` (an empty one for English or an unknown language). */
export function loadBundle(extensionRoot: string, language: string): Bundle {
  const name = bundleLanguage(language);
  if (!name) return {};
  return JSON.parse(readFileSync(bundlePath(extensionRoot, name), "utf8")) as Bundle;
}

let current = "en";
let currentBundle: Bundle = {};

/** Makes `bundle` the one every `l10n.t()` reads from now on; `language` is what `language()` says. */
export function useBundle(language: string, bundle: Bundle): void {
  current = bundleLanguage(language) ?? "en";
  currentBundle = bundle;
  l10n.config({ contents: bundle });
}

/** The bundle in use (the memory panel's page carries it for its picture script). */
export function bundle(): Bundle {
  return currentBundle;
}

/** The extension's language now: "zh-cn" or "en" (the panel page's `lang`). */
export function language(): string {
  return current;
}
