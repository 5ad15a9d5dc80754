import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { general3, GradReport, gradsView } from "../src/runtime/gradsModel";

// `stridelens inspect --launch tests/fixtures/grads/vanishing.py --break …:25 --grads --format json`
// (its "grads" key), as the panel gets it.
const vanishing: GradReport = JSON.parse(readFileSync(resolve(__dirname, "../test/fixtures/grads-vanishing.json"), "utf8"));

test("gradient rows as inspect --grads prints them", () => {
  const v = gradsView(vanishing);
  const row = (name: string) => v.rows.find((r) => r.name === name)!;
  assert.deepEqual(v.rows.map((r) => r.name).slice(0, 3), ["model.0.weight", "model.0.bias", "model.2.weight"]); // module order
  assert.deepEqual(row("model.0.weight"), {
    rank: "9", name: "model.0.weight", shape: "(16, 16)", gradNorm: "2.13e-09", ratio: "9.33e-10", nan: "0", inf: "0", zeros: "0.0%", state: "ok", tone: "ok",
  });
  assert.equal(row("model.0.bias").state, "frozen");
  assert.equal(row("model.0.bias").gradNorm, "—");
  assert.equal(row("model.4.weight").state, "collapses here");
  assert.equal(row("model.4.weight").tone, "bad");
  assert.equal(row("model.6.weight").gradNorm, "0.206");
  assert.equal(row("model.8.bias").shape, "(1,)");
  assert.equal(row("proj.weight").state, "None (not in the graph)");
  assert.equal(row("proj.weight").tone, "warn");
  assert.deepEqual(v.findings.map((f) => f.kind), ["collapse", "no_grad"]);
  assert.match(v.findings[0].message, /^gradients collapse at model\.4: /);
  assert.equal(v.summary, "12 parameters in 6 layers of 2 modules (model, proj); 1 frozen; layer grad norms span 8.7 decades (model.0 2.13e-09 … model.8 1.03)");
  assert.equal(v.empty, null);
  assert.equal(gradsView({ ...vanishing, params: [], layers: [], models: [], findings: [], span: null }).empty, "No nn.Module with parameters in this frame or its globals.");
});

test("3 significant digits as Python's .3g", () => {
  assert.equal(general3(2.1330852639778186e-09), "2.13e-09");
  assert.equal(general3(0.20612), "0.206");
  assert.equal(general3(1.0), "1");
  assert.equal(general3(1234.5), "1.23e+03");
  assert.equal(general3(0.0001), "0.0001");
  assert.equal(general3(null), "—");
});

// The same report for tests/fixtures/grads/vanishing_stack.py and dead_relu.py (issue 32's cases).
const stack: GradReport = JSON.parse(readFileSync(resolve(__dirname, "../test/fixtures/grads-vanishing-stack.json"), "utf8"));
const dead: GradReport = JSON.parse(readFileSync(resolve(__dirname, "../test/fixtures/grads-dead-relu.json"), "utf8"));

test("a vanishing stack, a dead ReLU and a ratio outlier are named on their rows", () => {
  const v = gradsView(stack);
  const row = (view: typeof v, name: string) => view.rows.find((r) => r.name === name)!;
  assert.deepEqual(v.findings.map((f) => f.kind), ["vanishing"]);
  assert.match(v.findings[0].message, /^vanishing gradients through `model\.squash\.0–5` \(Sigmoid\), ×0\.\d+ per block/);
  assert.equal(row(v, "model.squash.0.0.weight").state, "vanishing");
  assert.equal(row(v, "model.squash.5.0.bias").state, "vanishing");
  assert.equal(row(v, "model.head.weight").state, "ok");
  const d = gradsView(dead);
  assert.deepEqual(d.findings.map((f) => f.kind), ["ratio_outlier", "dead_relu"]);
  assert.equal(row(d, "model.2.weight").state, "dead ReLU");
  assert.equal(row(d, "model.0.weight").state, "dead ReLU"); // starved by it
  assert.equal(row(d, "model.4.weight").state, "ok");
  assert.equal(row(d, "enc.2.weight").state, "ratio far off");
});
