// Reads safetensors metadata of a hub repo without downloading weights: the index JSON, then each
// needed shard's header through two Range reads (the 8-byte length, then the JSON header).
import { z } from "zod";
import type { HubClient } from "./hub-client.ts";
import type { RepoId } from "./model-ref.ts";
import { headerLength, parseHeader, SafetensorsFormatError } from "./safetensors.ts";
import type { ShardHeader } from "./safetensors.ts";

const MAX_INDEX_BYTES = 64 * 1024 * 1024;
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

const IndexSchema = z.object({ weight_map: z.record(z.string(), z.string()) });

export interface WeightIndex {
  /** Weight files in index order (first appearance). */
  readonly files: readonly string[];
  /** Tensor name -> weight file. */
  readonly weightMap: ReadonlyMap<string, string>;
  /** Headers already read while building the map (single-file checkpoints). */
  readonly headers: ReadonlyMap<string, ShardHeader>;
}

function safeRelative(file: string): boolean {
  return (
    file !== "" &&
    !file.startsWith("/") &&
    !file.split("/").some((s) => s === ".." || s === "." || s === "")
  );
}

export async function readShardHeader(
  hub: HubClient,
  id: RepoId,
  file: string,
  signal?: AbortSignal,
): Promise<ShardHeader> {
  const remote = await hub.open(id, file, signal);
  if (!remote) throw new Error(`${id}: weight file ${file} is missing on the hub`);
  const length = headerLength(await remote.read(0, 8), file);
  if (8 + length > remote.size)
    throw new SafetensorsFormatError(`${file}: header runs past the end of the file`);
  const json = await remote.read(8, 8 + length);
  return { file, header: parseHeader(json, length, file, remote.size) };
}

/** The tensor -> file map of a repo's safetensors weights, or null when it has none. */
export async function readWeightIndex(
  hub: HubClient,
  id: RepoId,
  repoFiles: readonly string[],
  signal?: AbortSignal,
): Promise<WeightIndex | null> {
  const rootFiles = repoFiles.filter((f) => !f.includes("/"));
  const indexFile = rootFiles.includes("model.safetensors.index.json")
    ? "model.safetensors.index.json"
    : rootFiles.find((f) => f.endsWith(".safetensors.index.json"));
  if (indexFile) {
    const text = await hub.readText(id, indexFile, MAX_INDEX_BYTES, signal);
    if (text === null) throw new Error(`${id}: ${indexFile} is listed but cannot be read`);
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      throw new SafetensorsFormatError(`${id}: ${indexFile} is not valid JSON`);
    }
    const parsed = IndexSchema.safeParse(raw);
    if (!parsed.success)
      throw new SafetensorsFormatError(`${id}: ${indexFile} has no valid weight_map`);
    const weightMap = new Map(Object.entries(parsed.data.weight_map));
    const files = [...new Set(weightMap.values())];
    const unsafe = files.find((f) => !safeRelative(f));
    if (unsafe !== undefined)
      throw new SafetensorsFormatError(`${id}: unsafe shard name in weight_map: ${unsafe}`);
    return { files, weightMap, headers: new Map() };
  }
  const singles = rootFiles.filter((f) => f.endsWith(".safetensors")).sort();
  if (singles.length === 0) return null;
  const weightMap = new Map<string, string>();
  const headers = new Map<string, ShardHeader>();
  for (const file of singles) {
    const shard = await readShardHeader(hub, id, file, signal);
    headers.set(file, shard);
    for (const name of shard.header.tensors.keys())
      if (!weightMap.has(name)) weightMap.set(name, file);
  }
  return { files: singles, weightMap, headers };
}

/** Shards to read the headers of: `files`, of the repo's `index` (its read headers reused). */
export interface ShardSelection {
  readonly index: WeightIndex;
  readonly files: readonly string[];
}

/** Headers of the given files, reusing ones already read; in the order given. */
export async function readShardHeaders(
  hub: HubClient,
  id: RepoId,
  { index, files }: ShardSelection,
  signal?: AbortSignal,
): Promise<ShardHeader[]> {
  const out: ShardHeader[] = [];
  for (const file of files)
    out.push(index.headers.get(file) ?? (await readShardHeader(hub, id, file, signal)));
  return out;
}

/** config.json as an object, or null when the repo has none or it is not a JSON object. */
export async function readConfig(
  hub: HubClient,
  id: RepoId,
  signal?: AbortSignal,
): Promise<Record<string, unknown> | null> {
  const text = await hub.readText(id, "config.json", MAX_CONFIG_BYTES, signal);
  if (text === null) return null;
  try {
    const v: unknown = JSON.parse(text);
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Shard files holding the given tensors, in index order. */
export function shardsFor(index: WeightIndex, keys: readonly string[]): string[] {
  const needed = new Set(
    keys.map((k) => index.weightMap.get(k)).filter((f): f is string => f !== undefined),
  );
  return index.files.filter((f) => needed.has(f));
}
