import { test } from "node:test";
import assert from "node:assert/strict";
import { parseProbeAnswer, pythonString, unquotePythonRepr } from "../src/runtime/pyliteral";

test("Python reprs are undone", () => {
  assert.equal(unquotePythonRepr(`'{"ok": true}'`), '{"ok": true}');
  assert.equal(unquotePythonRepr(`'it\\'s \\\\ \\n \\x41 \\u00e9'`), "it's \\ \n A é");
  assert.equal(unquotePythonRepr("plain"), "plain");
});

test("probe answers: raw, repr'd, errors, garbage", () => {
  assert.deepEqual(parseProbeAnswer('{"ok": true, "result": {"a": 1}}'), { ok: true, result: { a: 1 } });
  assert.deepEqual(parseProbeAnswer(`'{"ok": true, "result": [1]}'`), { ok: true, result: [1] });
  assert.deepEqual(parseProbeAnswer('{"ok": false, "error": "not a tensor"}'), { ok: false, error: "not a tensor" });
  const bad = parseProbeAnswer("Traceback (most recent call last)");
  assert.equal(bad.ok, false);
});

test("JS strings become valid Python literals", () => {
  assert.equal(pythonString('a"b\\c\n'), '"a\\"b\\\\c\\n"');
});
