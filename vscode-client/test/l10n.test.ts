import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { l10nUses, placeholders } from "./l10nKeys";
import { bundleLanguage, bundlePath, chooseLanguage, LANGUAGES, loadBundle } from "../src/locale";

const ROOT = join(__dirname, ".."); // out-test/ -> vscode-client/
const readJson = (p: string) => JSON.parse(readFileSync(join(ROOT, p), "utf8")) as Record<string, string>;
const uses = l10nUses(ROOT);
const keys = [...new Set(uses.flatMap((u) => (u.key === null ? [] : [u.key])))].sort();

test("the sources' l10n.t() calls are found, each with a literal message (a bundle can only hold literals)", () => {
  assert.ok(keys.length > 150, `only ${keys.length} messages found: is the extractor still reading src/?`);
  assert.deepEqual(uses.filter((u) => u.key === null).map((u) => u.where), []);
});

for (const lang of LANGUAGES) {
  test(`every l10n.t() message has an entry in l10n/bundle.l10n.${lang}.json, with the same placeholders`, () => {
    const bundle = readJson(`l10n/bundle.l10n.${lang}.json`);
    const missing = keys.filter((k) => typeof bundle[k] !== "string" || !bundle[k].trim());
    assert.deepEqual(missing, [], `messages without a ${lang} translation:\n${missing.map((k) => JSON.stringify(k)).join(",\n")}`);
    const badPlaceholders = keys.filter((k) => placeholders(k).join() !== placeholders(bundle[k]).join());
    assert.deepEqual(badPlaceholders.map((k) => [k, bundle[k]]), []);
    const stale = Object.keys(bundle).filter((k) => !keys.includes(k));
    assert.deepEqual(stale, [], "entries no l10n.t() call uses (drop them)");
  });
}

test("package.json's %key% placeholders: every one in package.nls.json and each package.nls.<lang>.json", () => {
  const pkg = readFileSync(join(ROOT, "package.json"), "utf8");
  const used = [...new Set([...pkg.matchAll(/"%([^%"]+)%"/g)].map((m) => m[1]))].sort();
  assert.ok(used.length > 30);
  const english = readJson("package.nls.json");
  assert.deepEqual(used.filter((k) => !(k in english)), []);
  assert.deepEqual(Object.keys(english).filter((k) => !used.includes(k)), [], "package.nls.json entries package.json does not use");
  for (const lang of LANGUAGES) {
    const nls = readJson(`package.nls.${lang}.json`);
    assert.deepEqual(used.filter((k) => typeof nls[k] !== "string" || !nls[k].trim()), [], `package.nls.${lang}.json lacks these`);
    assert.deepEqual(Object.keys(nls).filter((k) => !used.includes(k)), []);
  }
  // The setting the server reads as `locale` (server/lsp/configuration.py): auto | en | zh-CN.
  const locale = JSON.parse(pkg).contributes.configuration.properties["stridelens.locale"];
  assert.deepEqual(locale.enum, ["auto", "en", "zh-CN"]);
  assert.equal(locale.default, "auto");
  // The .vsix carries the translations (.vscodeignore is a list of what goes in).
  const ignore = readFileSync(join(ROOT, ".vscodeignore"), "utf8").split("\n");
  for (const line of ["!package.nls.json", "!package.nls.*.json", "!l10n/*.json"]) assert.ok(ignore.includes(line), line);
  assert.equal(JSON.parse(pkg).l10n, "./l10n");
});

test("the zh-CN texts use the glossary's terms (docs/glossary.zh-CN.md)", () => {
  const zh = readJson("l10n/bundle.l10n.zh-cn.json");
  const term: [string, RegExp][] = [
    ["storage", /存储/], ["view", /视图/], ["strides", /步长/], ["storage offset", /存储偏移/], ["contiguous", /连续/],
    ["non-contiguous", /非连续/], ["leaf", /叶子节点/], ["non-leaf", /非叶子节点/], ["graph", /计算图/],
  ];
  for (const [en, re] of term) assert.match(zh[en], re, en);
  // code names stay English
  for (const k of keys.filter((k) => /grad_fn|requires_grad/.test(k))) assert.match(zh[k], /grad_fn|requires_grad/, k);
});

test("which language: the setting unless auto, else VS Code's display language", () => {
  assert.equal(chooseLanguage("auto", "zh-cn"), "zh-cn");
  assert.equal(chooseLanguage("", "de"), "de");
  assert.equal(chooseLanguage("zh-CN", "en"), "zh-CN");
  assert.equal(chooseLanguage("en", "zh-cn"), "en");
  assert.equal(chooseLanguage("klingon", "zh-cn"), "zh-cn");
  for (const t of ["zh-CN", "zh-cn", "zh_CN.UTF-8", "zh-Hans", "zh"]) assert.equal(bundleLanguage(t), "zh-cn", t);
  for (const t of ["en", "en-US", "de", "zh-tw", undefined]) assert.equal(bundleLanguage(t), undefined, String(t));
  assert.deepEqual(loadBundle(ROOT, "en"), {});
  assert.ok(existsSync(bundlePath(ROOT, "zh-cn")));
  assert.equal(loadBundle(ROOT, "zh-CN")["Tensor memory"], readJson("l10n/bundle.l10n.zh-cn.json")["Tensor memory"]);
});
