// The memory panel's "Memory explained" section: the report of `stridelens inspect
// --cuda-summary` (inspector/cuda_report.analyze over inspector/allocator_probe.summary) as
// the rows and lines the webview renders, worded as the CLI prints them. Pure, unit-tested.
import * as l10n from "@vscode/l10n";
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
  if (r.cuda !== "ok") status = l10n.t("No CUDA numbers: {0}.", r.cuda_message ?? "?");
  else if (!r.devices.length) status = l10n.t("CUDA is initialized but no device has memory reserved.");
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
    process = l10n.t("process RSS {0} (peak {1}): the resident memory of the whole process (Python, torch's libraries, allocator caches); live CPU tensors hold {2}, {3} of it", exact(p.rss), humanBytes(p.peak_rss ?? 0), exact(cpu), pct(r.cpu_tensor_share_of_rss));
  } else if (p.peak_rss !== null) {
    process = l10n.t("process peak RSS {0} (current RSS not readable here); live CPU tensors hold {1}", exact(p.peak_rss), exact(cpu));
  } else {
    process = l10n.t("process RSS not readable on this platform; live CPU tensors hold {0}", exact(cpu));
  }
  const others = Object.entries(r.tensors)
    .filter(([dev]) => dev !== "cpu" && !dev.startsWith("cuda"))
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([dev, v]) => (v.storages === 1 ? l10n.t("{0} tensors: {1} in {2} storage", dev, exact(v.bytes), grouped(v.storages)) : l10n.t("{0} tensors: {1} in {2} storages", dev, exact(v.bytes), grouped(v.storages))));
  return { status, devices, process, others };
}
