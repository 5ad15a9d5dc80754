import { test } from "node:test";
import assert from "node:assert/strict";
import { bindingsOf, placeBindings, scopeOf } from "../src/runtime/scope";

test("bindings of a line", () => {
  assert.deepEqual(bindingsOf("b = a[1:, 1:3]  # x = 1", 3), [{ name: "b", line: 3, character: 0 }]);
  assert.deepEqual(bindingsOf("q, k, v = t.chunk(3)", 0).map((b) => b.name), ["q", "k", "v"]);
  assert.deepEqual(bindingsOf("    x += 1", 0).map((b) => [b.name, b.character]), [["x", 4]]);
  assert.deepEqual(bindingsOf("for step, (x, y) in enumerate(d):", 0).map((b) => b.name), []);
  assert.deepEqual(bindingsOf("for step in range(20):", 0).map((b) => b.name), ["step"]);
  assert.deepEqual(bindingsOf("y: torch.Tensor = f(x)", 0).map((b) => b.name), ["y"]);
  assert.deepEqual(bindingsOf("if a == b:", 0), []);
  assert.deepEqual(bindingsOf("f(x=1)", 0), []);
  assert.deepEqual(bindingsOf("with torch.no_grad() as g:", 0).map((b) => b.name), ["g"]);
});

const SRC = `import torch
a = torch.zeros(3)
def f(x):
    y = x * 2
    def g():
        y = 1
    return y
b = a + 1
for i in range(3):
    b = b + i
c = b
`.split("\n");

test("scope of a stop: a function body, nested defs skipped", () => {
  assert.deepEqual(scopeOf(SRC, 3, "f"), { first: 2, last: 6, skip: [[4, 5]] });
  const mod = scopeOf(SRC, 9, "<module>");
  assert.deepEqual(mod.skip, [[2, 6]]);
});

test("each name is placed once: last binding before the stop, else the first after", () => {
  const placed = placeBindings(SRC, 9, "<module>", [0, SRC.length - 1]);
  assert.deepEqual(placed.map((b) => [b.name, b.line]), [["a", 1], ["i", 8], ["b", 9], ["c", 10]]);
  const inF = placeBindings(SRC, 6, "f", [0, SRC.length - 1]);
  assert.deepEqual(inF.map((b) => [b.name, b.line]), [["y", 3]]);
  const windowed = placeBindings(SRC, 9, "<module>", [7, 8]);
  assert.deepEqual(windowed.map((b) => [b.name, b.line]), [["b", 7], ["i", 8]]);
});
