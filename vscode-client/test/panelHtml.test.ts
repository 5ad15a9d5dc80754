import { test } from "node:test";
import assert from "node:assert/strict";
import { panelHtml } from "../src/runtime/panelHtml";

test("the panel page: its scripts parse, the picture bundle is allowed by the CSP", () => {
  const page = panelHtml("vscode-resource:", "vscode-resource:/dist/webview.js");
  const scripts = [...page.matchAll(/<script nonce="([0-9a-f]+)"( id="picture-script" src="[^"]+" defer)?>([\s\S]*?)<\/script>/g)];
  assert.equal(scripts.length, 2);
  assert.equal(scripts[0][2], ' id="picture-script" src="vscode-resource:/dist/webview.js" defer');
  const nonce = scripts[0][1];
  assert.match(page, new RegExp(`script-src 'nonce-${nonce}' vscode-resource:;`));
  // A syntax error here leaves the panel empty (the e2e would only time out): parse it.
  assert.doesNotThrow(() => new Function(scripts[1][3]));
  assert.match(scripts[1][3], /vscode\.postMessage\(\{ type: "ready" \}\);\s*$/); // the host waits for it
});
