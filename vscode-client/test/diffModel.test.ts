import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { DiffReport, diffView } from "../src/runtime/diffModel";

// `stridelens inspect --launch tests/fixtures/steps/grow_vs_cache.py --break …:13 --diff-steps 3 --format json`
const report: DiffReport = JSON.parse(readFileSync(resolve(__dirname, "../test/fixtures/diff-steps-grow-vs-cache.json"), "utf8"));

test("step diff as inspect --diff-steps prints it: the growing list is the linear one", () => {
  const v = diffView(report);
  assert.equal(v.head, "Step diff over 3 steps (the breakpoint hit 3 more times): live storages 10.3 KiB → 137.1 KiB (+126.9 KiB, 42.3 KiB per step; grows, not linearly)");
  assert.equal(v.sub, "23 storages new and alive at the second stop (126.9 KiB); 0 storages of the first stop freed (0 B)");
  assert.deepEqual(v.rows[0], { keeper: "history", kind: "container", added: "3 (24.0 KiB)", curve: "0 B → 8.0 KiB … 24.0 KiB", perStep: "+8.0 KiB", shape: "linear", tone: "bad" });
  assert.deepEqual(v.rows[1], { keeper: "cache", kind: "container", added: "1 (32.0 KiB)", curve: "0 B → 32.0 KiB … 32.0 KiB", perStep: "+32.0 KiB once", shape: "once (first step)", tone: "warn" });
  assert.equal(v.rows.find((r) => r.keeper === "opt")?.kind, "optimizer state");
  assert.deepEqual(v.notes, ["history: a leak: 8.0 KiB more every step", "opt: optimizer state created by the first step(): expected once, not a leak"]);
  assert.equal(v.rows.length, 10);
  assert.equal(v.empty, null);
  assert.equal(v.more, null);
});
