import { test } from "node:test";
import assert from "node:assert/strict";
import { expressionAt, isSafeExpression } from "../src/runtime/safety";

test("names, attributes and literal subscripts are safe", () => {
  for (const e of ["a", "b", "self.weight", "model.layers[0].weight", "x[1:, 1:3]", "x[::2]", "x[-1]", "x[0, :, None]",
    "x[...]", "d['key']", 'd["k"].grad', "x.T", "losses[0]", "émigré", "x[1:3:]", "x[0,]"]) {
    assert.ok(isSafeExpression(e), e);
  }
});

test("calls, operators and anything else are not", () => {
  for (const e of ["f()", "x.sum()", "x[i]", "x[f()]", "a + b", "a=1", "(a)", "x[0](1)", "x.__class__", "__import__",
    "x[0]]", "x[", "lambda: 0", "not x", "None", "x if y else z", "[a]", "x[a:b]", "d[f'{k}']", "d['a\\'b']",
    "x; y", "x\ny", "x.y.", ".x", "1", "x[1][2]()", "await x", "x[(1)]", "x[{}]", "a " + "x".repeat(300), "",
    "x :=1", "x[1 if a else 2]", "x[--1]", "x[1+1]", "x . y"]) {
    assert.ok(!isSafeExpression(e), e);
  }
});

test("the hovered expression is the chain ending at the hovered name", () => {
  const line = "b = a[1:, 1:3]  # explain";
  assert.deepEqual(expressionAt(line, 0), { text: "b", start: 0, end: 1 });
  assert.equal(expressionAt(line, 4)?.text, "a");
  assert.equal(expressionAt(line, 7)?.text, "a[1:, 1:3]");
  const l2 = "    y = model.layers[0].weight.T @ x";
  assert.equal(expressionAt(l2, l2.indexOf("model") + 2)?.text, "model");
  assert.equal(expressionAt(l2, l2.indexOf("layers"))?.text, "model.layers");
  assert.equal(expressionAt(l2, l2.indexOf("weight") + 3)?.text, "model.layers[0].weight");
  assert.equal(expressionAt(l2, l2.indexOf(".T") + 1)?.text, "model.layers[0].weight.T");
  assert.equal(expressionAt(l2, l2.indexOf("x", l2.indexOf("@")))?.text, "x");
});

test("positions that are not a safe expression give nothing", () => {
  assert.equal(expressionAt("x = f(a).b", 9), undefined); // attribute of a call
  assert.equal(expressionAt("x = a[i]", 7), undefined); // non-literal subscript
  assert.equal(expressionAt("x = a[i]", 6)?.text, "i");
  assert.equal(expressionAt("x = a[i].y", 9), undefined);
  assert.equal(expressionAt("x = 1.5", 5), undefined);
  assert.equal(expressionAt("if x:", 0), undefined); // keyword
  assert.equal(expressionAt("x.__dict__", 4), undefined);
  assert.equal(expressionAt("abc", 10), undefined);
  assert.equal(expressionAt("   ", 1), undefined);
});
