// Shapes of the JSON the probe (inspector/probe.py) and `stridelens explain` return.

export interface ChainNode {
  name: string;
  depth: number;
  next: string[];
}

/** probe.describe(): one tensor. */
export interface Describe {
  type: string;
  shape: number[] | null;
  dtype: string;
  device: string;
  layout: string;
  memory_format: string | null;
  strides: number[] | null;
  storage_offset: number | null;
  contiguous: boolean | null;
  numel: number;
  element_size: number;
  nbytes: number;
  storage_key: string | null;
  storage_bytes: number | null;
  notes: string[];
  is_view: boolean;
  base: { shape: number[]; storage_offset: number | null; name?: string | null; shares_with?: string | null } | null;
  version: number | null;
  requires_grad: boolean;
  is_leaf: boolean;
  retains_grad: boolean;
  grad: { shape: number[]; dtype: string; nbytes: number } | null;
  grad_fn: string | null;
  grad_fn_chain: ChainNode[];
  graph: { nodes: number; saved_tensors: number; saved_storages: number; saved_bytes: number; problems: string[] } | null;
  cuda: Record<string, unknown> | null;
  stats: Record<string, unknown> | null;
}

/** One tensor of probe.frame_report(). */
export interface Member {
  name: string;
  shape: number[] | null;
  dtype: string;
  strides: number[] | null;
  storage_offset: number | null;
  contiguous: boolean | null;
  nbytes: number;
  requires_grad: boolean;
  grad_fn: string | null;
  version: number | null;
  is_view: boolean;
  view_of: string | null; // the base itself has this name (`t._base is a`)
  shares_storage_of?: string | null; // the base has no name; this tensor of the frame shares its storage
}

export interface FrameGroup {
  storage_key: string;
  device: string;
  storage_bytes: number;
  tensors: Member[];
  summary: string;
}

/** A row of the frame table, as the probe grouped them (probe_report._item_rows). */
export interface FrameRow {
  at: number; // index into groups
  count: number; // alike groups in the row (`losses[0..19]`: 20)
  name: string | null; // the row's name when it is several (`losses[0..19]`)
  aliases?: [string, string][]; // other names of its items: [["loss", "losses[19]"]]
}

export interface FrameReport {
  groups: FrameGroup[];
  rows?: FrameRow[];
  no_storage: { name: string; layout: string; note: string }[];
  tensor_count: number;
  total_bytes: number;
}

export interface Finding {
  kind: string;
  message: string;
  bytes?: number;
  container?: string;
  container_type?: string;
  length?: number;
  tensor?: string;
  device?: string;
  used_bytes?: number;
}

export interface ProcessReport {
  tensor_count: number;
  storage_count: number;
  no_storage_count?: number;
  graph_roots?: number;
  graph_nodes?: number;
  devices: { device: string | null; storages: number; tensors: number; bytes: number; graph_only_bytes?: number; graph_saved_bytes?: number; cuda?: Record<string, unknown> | null }[];
  top: { storage_key: string; device: string; bytes: number; tensors: number; names: string[]; unnamed: number; used_bytes?: number; saved_by_graph?: boolean; graph_root?: string | null; graph_line?: number | null }[];
  top_rows?: TopRow[];
  findings: Finding[];
}

/** A row of the largest-storages table, as the probe grouped them (probe_report._top_rows). */
export interface TopRow {
  at: number; // index into top
  count: number; // alike entries in the row
  graph_root: string | null; // the root of the graph(s) that saved them: `loss`, `losses[0..7]`
  graphs: number; // how many graphs
}

/** `stridelens explain --format json`: what the static analysis expects (null: unknown). */
export interface StaticFacts {
  expr?: string;
  shape: (number | string)[] | null;
  dtype: string | null;
  device: string | null;
  strides: (number | string)[] | null;
  storage_offset: number | string | null;
  contiguous: boolean | null;
  is_view?: boolean | null;
  view_of?: string | null;
  requires_grad?: boolean | null;
  notes?: string[];
}
