// Bundles the extension (dist/extension.js) or the unit tests (out-test/*.test.js).
import * as esbuild from "esbuild";
import { readdirSync, rmSync } from "node:fs";

const args = new Set(process.argv.slice(2));
const production = args.has("--production");

if (args.has("--tests")) {
  rmSync("out-test", { recursive: true, force: true });
  await esbuild.build({
    entryPoints: readdirSync("test").filter((f) => f.endsWith(".test.ts")).map((f) => `test/${f}`),
    outdir: "out-test",
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node20",
    sourcemap: "inline",
    external: ["vscode", "typescript"], // typescript: test/l10n.test.ts reads the sources' l10n.t() calls with it
    logLevel: "warning",
  });
} else {
  // The memory panel's webview script (the storage picture as SVG), loaded by panel.ts.
  const webview = await esbuild.context({
    entryPoints: ["src/runtime/webview/main.ts"],
    outfile: "dist/webview.js",
    bundle: true,
    platform: "browser",
    format: "iife",
    target: "es2020",
    minify: production,
    sourcemap: false,
    logLevel: "warning",
  });
  const ctx = await esbuild.context({
    entryPoints: ["src/extension.ts"],
    outfile: "dist/extension.js",
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node18",
    external: ["vscode"],
    minify: production,
    sourcemap: !production,
    logLevel: "warning",
  });
  if (args.has("--watch")) {
    await Promise.all([ctx.watch(), webview.watch()]);
  } else {
    await Promise.all([ctx.rebuild(), webview.rebuild()]);
    await Promise.all([ctx.dispose(), webview.dispose()]);
  }
}
