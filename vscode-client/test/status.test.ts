import { test } from "node:test";
import assert from "node:assert/strict";
import { describeStatus, interpreterLabel } from "../src/status";

const ready = { phase: "ready" as const, python: "/home/u/proj/.venv/bin/python", version: "0.1.0", fromBundle: true };

test("an interpreter without torch: the status bar says what is missing and what still works", () => {
  const v = describeStatus({ ...ready, python: "/home/u/envs/notorch/bin/python3.11", hasTorch: false, exact: false });
  assert.equal(v.text, "$(warning) stridelens: no torch in notorch, symbolic facts only");
  assert.equal(v.background, "warning");
  assert.match(v.tooltip, /Python: \/home\/u\/envs\/notorch\/bin\/python3\.11/);
  assert.match(v.tooltip, /torch is not installed in this interpreter/);
  assert.match(v.tooltip, /stridelens 0\.1\.0 bundled with the extension/);
});

test("with torch: exact or static facts, no warning", () => {
  assert.equal(describeStatus({ ...ready, hasTorch: true, exact: true }).text, "$(pulse) stridelens · exact");
  assert.equal(describeStatus({ ...ready, hasTorch: true, exact: false }).text, "$(pulse) stridelens · static");
  assert.equal(describeStatus({ ...ready, hasTorch: true }).text, "$(pulse) stridelens");
  assert.equal(describeStatus({ ...ready, hasTorch: true, exact: true }).background, undefined);
});

test("replay switched off is the user's choice, not a missing torch", () => {
  const v = describeStatus({ ...ready, hasTorch: false, exact: false, replayOff: true });
  assert.equal(v.text, "$(pulse) stridelens · static");
  assert.equal(v.background, undefined);
});

test("the interpreter's own stridelens is named in the tooltip", () => {
  const v = describeStatus({ ...ready, hasTorch: true, fromBundle: false, location: "/home/u/proj/.venv/lib/python3.11/site-packages/stridelens" });
  assert.match(v.tooltip, /stridelens 0\.1\.0 from the interpreter \(\/home\/u\/proj\/\.venv\/lib/);
});

test("starting, error and stopped", () => {
  assert.equal(describeStatus({ phase: "starting" }).text, "$(sync~spin) stridelens starting");
  const e = describeStatus({ phase: "error", python: "/nope/python", error: "stridelens: no Python interpreter at /nope/python." });
  assert.equal(e.text, "$(error) stridelens error");
  assert.equal(e.background, "error");
  assert.match(e.tooltip, /Error: stridelens: no Python interpreter at \/nope\/python/);
  assert.equal(describeStatus({ phase: "stopped" }).text, "$(circle-slash) stridelens stopped");
});

test("interpreter labels", () => {
  assert.equal(interpreterLabel("/a/b/.venv/bin/python"), ".venv");
  assert.equal(interpreterLabel("C:\\proj\\env\\Scripts\\python.exe"), "env");
  assert.equal(interpreterLabel("python3"), "python3");
  assert.equal(interpreterLabel("/usr/bin/python3"), "/usr/bin/python3");
});
