// Finds the models a store directory holds and reads their facts from the GGUF headers.
// Layout: `<root>/<org>--<name>/*.gguf` (+ optional `model.json` naming companions).
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import type { z } from "zod";
import { readGgufHeader } from "@ic/gguf";
import { keepAliveMs, ModelJsonSchema, modelIdFromDirName, SPLIT_GGUF } from "@ic/protocol";
import type { ModelRecord } from "@ic/protocol";
import type { Logger } from "@ic/log";

/** Architectures whose weights llama.cpp can split by rows (Tensor sharding). */
const ROW_SPLIT_ARCHS = new Set([
  "llama",
  "mistral",
  "qwen2",
  "qwen3",
  "gemma",
  "gemma2",
  "gemma3",
  "phi3",
]);

/**
 * The GGUF the engine loads when model.json names none: the largest model in the directory, a split
 * one counted whole and loaded from its first part (llama.cpp finds the others beside it). A pull
 * keeps one quantization per model, so this is the one it chose.
 */
export function servedGguf(
  candidates: readonly string[],
  sizes: ReadonlyMap<string, number>,
): string {
  const totals = new Map<string, number>();
  for (const n of candidates) {
    const m = SPLIT_GGUF.exec(n);
    const key = m ? `${m[1]}-00001-of-${m[3]}.gguf` : n;
    totals.set(key, (totals.get(key) ?? 0) + (sizes.get(n) ?? 0));
  }
  // A split whose first part is missing cannot load: only whole names or first parts compete.
  const loadable = [...totals].filter(([name]) => candidates.includes(name));
  const pool = loadable.length > 0 ? loadable : [...totals];
  return pool.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]![0];
}

export async function readModelDir(
  root: string,
  dirName: string,
  log: Logger,
): Promise<ModelRecord | null> {
  const modelId = modelIdFromDirName(dirName);
  if (!modelId) return null;
  const dir = join(root, dirName);
  const names = (await readdir(dir)).filter((n) => !n.startsWith("."));
  let meta: z.infer<typeof ModelJsonSchema> = {};
  if (names.includes("model.json")) {
    const parsed = ModelJsonSchema.safeParse(
      JSON.parse(await readFile(join(dir, "model.json"), "utf8")),
    );
    if (!parsed.success) {
      log.warn({ model: modelId, issues: parsed.error.issues }, "ignoring invalid model.json");
    } else meta = parsed.data;
  }
  const ggufs = names.filter((n) => n.endsWith(".gguf"));
  const mmproj = ggufs.find((n) => /mmproj/i.test(n));
  const candidates = ggufs.filter((n) => n !== mmproj);
  if (candidates.length === 0) return null;
  let bytes = 0;
  const sizes = new Map<string, number>();
  for (const n of names) {
    const s = await stat(join(dir, n));
    if (s.isFile()) {
      sizes.set(n, s.size);
      bytes += s.size;
    }
  }
  const file = meta.file ?? servedGguf(candidates, sizes);
  const h = await readGgufHeader(join(dir, file));
  const f = h.facts;
  const arch = f.architecture ?? "unknown";
  return {
    model_id: modelId,
    file,
    bytes,
    architecture: arch,
    layers: f.blockCount ?? 1,
    context_length: f.contextLength ?? 0,
    embedding_length: f.embeddingLength ?? 0,
    head_count: f.headCount ?? 0,
    head_count_kv: f.headCountKv ?? 0,
    supports_tensor: ROW_SPLIT_ARCHS.has(arch) && (f.headCount ?? 0) > 0,
    ...(meta.drafter ? { drafter: meta.drafter } : {}),
    ...(meta.mtp_sidecar ? { mtp_sidecar: meta.mtp_sidecar } : {}),
    ...(mmproj ? { mmproj } : {}),
    ...(f.templateTakesTools ? { tools: true } : {}),
    ...(meta.pooling ? { pooling: meta.pooling } : {}),
    ...(meta.on_demand !== undefined ? { on_demand: meta.on_demand } : {}),
    ...(meta.keep_alive !== undefined ? { keep_alive_ms: keepAliveMs(meta.keep_alive) } : {}),
  };
}
