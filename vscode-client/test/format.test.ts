import { test } from "node:test";
import assert from "node:assert/strict";
import { compareWithStatic, containerText, factParts, hoverMarkdown, humanBytes, inlineText, joinInline, tuple } from "../src/runtime/format";
import type { Describe, Member } from "../src/runtime/facts";

const b: Member = {
  name: "b", shape: [2, 2], dtype: "float32", strides: [4, 1], storage_offset: 5, contiguous: false,
  nbytes: 16, requires_grad: false, grad_fn: null, version: 0, is_view: true, view_of: "a",
};

test("tuples print like Python", () => {
  assert.equal(tuple([2, 2]), "(2, 2)");
  assert.equal(tuple([12]), "(12,)");
  assert.equal(tuple([]), "()");
  assert.equal(tuple(null), "?");
});

test("bytes are human", () => {
  assert.equal(humanBytes(512), "512 B");
  assert.equal(humanBytes(7884800), "7.5 MiB");
  assert.equal(humanBytes(null), "?");
});

test("inline text leads with the shape, in the documented order", () => {
  const { text, mismatches } = inlineText("b", b, "cpu");
  assert.equal(text, "b: (2, 2) · float32 · cpu · strides (4, 1) · offset 5 · non-contiguous · view of a");
  assert.deepEqual(mismatches, []);
  const t = inlineText("t", { ...b, view_of: null, shares_storage_of: "a" }, "cpu").text;
  assert.equal(t, "t: (2, 2) · float32 · cpu · strides (4, 1) · offset 5 · non-contiguous · view, shares the storage of a");
});

test("grad_fn comes last", () => {
  const parts = factParts({ ...b, view_of: null, is_view: false, contiguous: true, grad_fn: "MulBackward0", device: "cuda:0" });
  assert.deepEqual(parts, ["(2, 2)", "float32", "cuda:0", "strides (4, 1)", "offset 5", "contiguous", "grad_fn MulBackward0"]);
});

test("facts that differ from the static analysis are marked", () => {
  const st = { shape: [2, 2], dtype: "float32", device: "cpu", strides: [1, 4], storage_offset: 5, contiguous: true };
  const { text, mismatches } = inlineText("b", b, "cpu", st);
  assert.deepEqual(mismatches.map((m) => m.fact), ["strides", "contiguous"]);
  assert.match(text, /⚠strides \(4, 1\) \(static: \(1, 4\)\)/);
  assert.match(text, /⚠non-contiguous \(static: contiguous\)/);
  assert.ok(!text.includes("⚠(2, 2)"));
});

test("unknown or symbolic static facts never count as differences", () => {
  assert.deepEqual(compareWithStatic({ ...b, device: "cpu" }, { shape: ["B", 2], dtype: null, device: null, strides: null, storage_offset: null, contiguous: null }), []);
  assert.deepEqual(compareWithStatic({ ...b, device: "cuda:1" }, { shape: null, dtype: null, device: "cuda", strides: null, storage_offset: null, contiguous: null }), []);
  assert.deepEqual(compareWithStatic({ ...b, device: "cpu" }, null), []);
  assert.equal(compareWithStatic({ ...b, device: "cpu" }, { shape: [3, 2], dtype: null, device: null, strides: null, storage_offset: null, contiguous: null }).length, 1);
});

test("long lines are cut", () => {
  const s = joinInline(["x".repeat(200), "y".repeat(200)], 100);
  assert.equal(s.length, 100);
  assert.ok(s.endsWith("…"));
});

test("hover card has the facts, the chain and the notes", () => {
  const d: Describe = {
    type: "Tensor", shape: [], dtype: "float32", device: "cpu", layout: "strided", memory_format: "contiguous",
    strides: [], storage_offset: 0, contiguous: true, numel: 1, element_size: 4, nbytes: 4,
    storage_key: "cpu@0x1", storage_bytes: 512, notes: ["a | note"], is_view: false, base: null, version: 0,
    requires_grad: true, is_leaf: false, retains_grad: false, grad: null, grad_fn: "MseLossBackward0",
    grad_fn_chain: [{ name: "MseLossBackward0", depth: 0, next: ["AddmmBackward0"] }, { name: "AddmmBackward0", depth: 1, next: [] }],
    graph: { nodes: 6, saved_tensors: 5, saved_storages: 4, saved_bytes: 394240, problems: [] }, cuda: null, stats: null,
  };
  const m = hoverMarkdown("losses[0]", d);
  assert.match(m, /\*\*stridelens · runtime\*\* `losses\[0\]`/);
  assert.match(m, /\| shape \| \(\) \|/);
  assert.match(m, /\| grad_fn \| MseLossBackward0 \|/);
  assert.match(m, /MseLossBackward0 → AddmmBackward0\n  AddmmBackward0/);
  assert.match(m, /385\.0 KiB saved/);
  assert.match(m, /- a \\\| note/);
});

test("hover card names the base of a view when the frame has it", () => {
  const d: Describe = {
    type: "Tensor", shape: [4, 3], dtype: "float32", device: "cpu", layout: "strided", memory_format: null,
    strides: [1, 4], storage_offset: 0, contiguous: false, numel: 12, element_size: 4, nbytes: 48,
    storage_key: "cpu@0x2", storage_bytes: 48, notes: [], is_view: true, base: { shape: [12], storage_offset: 0, name: "grid" },
    version: 0, requires_grad: false, is_leaf: true, retains_grad: false, grad: null, grad_fn: null,
    grad_fn_chain: [], graph: null, cuda: null, stats: null,
  };
  assert.match(hoverMarkdown("grid.t()", d), /\| view of \| grid \(a tensor of shape \(12,\)\) \|/);
  assert.match(hoverMarkdown("grid.t()", { ...d, base: { shape: [12], storage_offset: 0 } }), /\| view of \| a tensor of shape \(12,\) \|/);
  // `t = a.t()` of `a = arange(12).reshape(3, 4)`: the base is the unnamed arange result, not `a`.
  const shared = hoverMarkdown("t", { ...d, base: { shape: [12], storage_offset: 0, name: null, shares_with: "a" } });
  assert.match(shared, /\| view of \| an unnamed tensor of shape \(12,\); shares the storage of a \|/);
  assert.doesNotMatch(shared, /\| view of \| a \(/);
  // The storage picture, as `stridelens explain` and the static hover draw it (64 columns).
  const m = hoverMarkdown("grid.t()", d);
  assert.ok(m.includes("```text\nstorage 12 × float32 (48 B) in rows of 4\n    0  3  6  9\n    1  4  7 10\n    2  5  8 11\noffset 0, strides (1, 4)\n```"), m);
});

test("containers of tensors are summarised", () => {
  const loss: Member = { ...b, name: "losses[0]", shape: [], strides: [], storage_offset: 0, contiguous: true, view_of: null, is_view: false, grad_fn: "MseLossBackward0" };
  assert.equal(containerText("losses", [loss, { ...loss, name: "losses[1]" }]), "losses: 2 tensors · each () float32 · grad_fn MseLossBackward0");
  assert.equal(containerText("xs", [loss, b]), "xs: 2 tensors · 32 B");
});
