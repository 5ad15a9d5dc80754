import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { CudaReport, cudaView } from "../src/runtime/cudaModel";

const fixture = (name: string): CudaReport => JSON.parse(readFileSync(resolve(__dirname, `../test/fixtures/${name}`), "utf8"));

test("memory explained on a CPU-only target: says so, RSS next to the tensor totals", () => {
  // `stridelens inspect --launch examples/runtime/leaky_losses.py --break …:26 --cuda-summary --format json`
  const v = cudaView(fixture("cuda-summary-cpu.json"));
  assert.equal(v.status, "No CUDA numbers: torch 2.13.0+cpu is built without CUDA: a CPU-only target.");
  assert.deepEqual(v.devices, []);
  assert.equal(v.process, "process RSS 333.1 MiB (349,286,400 B) (peak 333.1 MiB): the resident memory of the whole process (Python, torch's libraries, allocator caches); live CPU tensors hold 8.5 MiB (8,951,816 B), 2.6% of it");
});

test("memory explained on a CUDA device: every number with its meaning, as inspect --cuda-summary prints", () => {
  // cuda_report.analyze over allocator numbers of one device (written by hand: no GPU here)
  const v = cudaView(fixture("cuda-summary-gpu.json"));
  assert.equal(v.status, null);
  assert.equal(v.devices.length, 1);
  const rows = v.devices[0].rows;
  assert.deepEqual(rows.map((r) => r.name), ["allocated", "reserved", "peak", "inactive split", "alloc retries", "ooms", "tensor share"]);
  assert.deepEqual(rows[1], {
    name: "reserved", value: "824.0 MiB (864,026,624 B)",
    meaning: "824.0 MiB is taken from the driver by the caching allocator; 412.0 MiB of it is cached and reusable: not a leak; torch.cuda.empty_cache() returns it to the driver",
  });
  assert.equal(rows[4].value, "0");
  assert.match(rows[6].meaning, /hold 400\.0 MiB, 97\.1% of allocated/);
  assert.match(v.process, /live CPU tensors hold 1\.0 KiB \(1,024 B\), 4\.8e-05% of it$/);
  assert.deepEqual(v.others, ["meta tensors: 0 B (0 B) in 1 storage"]);
});
