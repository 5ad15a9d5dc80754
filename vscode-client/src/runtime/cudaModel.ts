// The memory panel's "Memory explained" section: the report of `stridelens inspect
// --cuda-summary` (inspector/cuda_report.analyze over inspector/allocator_probe.summary) as
// the rows and lines the webview renders, worded as the CLI prints them. Pure, unit-tested.
import { humanBytes } from "./format";
import { general2, grouped } from "./storagePicture";

export interface CudaReport {
  cuda: string; // ok | not_built | unavailable | not_initialized
  cuda_message: string | null;
  allocator_backend: string | null;
  devices: { device: string; explained: { name: string; bytes?: number; count?: number; meaning: string }[] }[];
  process: { rss: number | null; peak_rss: number | null; source: string | null };
  tensors: Record<string, { bytes: number; storages: number }>;
  cpu_tensor_bytes: number;
  cpu_tensor_share_of_rss: number | null;
}

export interface CudaView {
  status: string | null; // why there are no CUDA numbers
  devices: { device: string; rows: { name: string; value: string; meaning: string }[] }[];
  process: string;
  others: string[];
}

const exact = (n: number): string => `${humanBytes(n)} (${grouped(n)} B)`;

/** cuda_report._pct: one decimal, or two significant digits below 1%. */
function pct(x: number | null): string {
  if (x === null) return "—";
  if (x >= 0.01) return `${(100 * x).toFixed(1)}%`;
  return `${general2(100 * x)}%`;
}

export function cudaView(r: CudaReport): CudaView {
  let status: string | null = null;
  if (r.cuda !== "ok") status = `No CUDA numbers: ${r.cuda_message}.`;
  else if (!r.devices.length) status = "CUDA is initialized but no device has memory reserved.";
  const devices = r.devices.map((d) => ({
    device: d.device,
    rows: d.explained.map((e) => ({
      name: e.name.replace(/_/g, " "),
      value: e.bytes !== undefined ? exact(e.bytes) : e.count !== undefined ? String(e.count) : "",
      meaning: e.meaning,
    })),
  }));
  const p = r.process;
  const cpu = r.cpu_tensor_bytes;
  let process: string;
  if (p.rss !== null) {
    process = `process RSS ${exact(p.rss)} (peak ${humanBytes(p.peak_rss ?? 0)}): the resident memory of the whole process (Python, torch's libraries, allocator caches); live CPU tensors hold ${exact(cpu)}, ${pct(r.cpu_tensor_share_of_rss)} of it`;
  } else if (p.peak_rss !== null) {
    process = `process peak RSS ${exact(p.peak_rss)} (current RSS not readable here); live CPU tensors hold ${exact(cpu)}`;
  } else {
    process = `process RSS not readable on this platform; live CPU tensors hold ${exact(cpu)}`;
  }
  const others = Object.entries(r.tensors)
    .filter(([dev]) => dev !== "cpu" && !dev.startsWith("cuda"))
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([dev, v]) => `${dev} tensors: ${exact(v.bytes)} in ${grouped(v.storages)} storage${v.storages === 1 ? "" : "s"}`);
  return { status, devices, process, others };
}
