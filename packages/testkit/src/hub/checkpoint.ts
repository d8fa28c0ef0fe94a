// Generates a small sharded safetensors checkpoint with MTP (multi-token-prediction) tensors on disk.
// Deterministic bytes per tensor, streamed to disk, so a few-hundred-MB checkpoint costs no memory.
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fnv1a } from "@ic/protocol";
import { modelCard } from "./front-matter.ts";
import { safetensorsHeader, tensorBytes } from "./safetensors.ts";
import type { TensorSpec } from "./safetensors.ts";

/**
 * - `nextn-layers`: DeepSeek-V3 style, MTP heads are `model.layers.N.*` for N >= num_hidden_layers
 *   (config `num_nextn_predict_layers`).
 * - `mtp-prefix`: Qwen3-Next style, MTP heads live under `mtp.*`.
 * - `none`: no MTP heads (a Gemma-type model).
 */
export type MtpStyle = "nextn-layers" | "mtp-prefix" | "none";

export interface MtpCheckpointOptions {
  /** Output directory; a fresh temp dir when absent. */
  readonly dir?: string;
  readonly style?: MtpStyle;
  readonly numHiddenLayers?: number;
  /** Number of MTP layers; ignored for style `none`. */
  readonly numNextnPredictLayers?: number;
  readonly hiddenSize?: number;
  readonly intermediateSize?: number;
  readonly vocabSize?: number;
  /** 1 writes a single `model.safetensors` without an index. */
  readonly shards?: number;
  readonly dtype?: "BF16" | "F32";
  /** Written as `base_model` into the README front matter. */
  readonly baseModel?: string;
  readonly seed?: number;
}

export interface MtpCheckpoint {
  readonly dir: string;
  /** Relative paths of every file written (weights, index, config.json, README.md). */
  readonly files: readonly string[];
  /** Names of the MTP tensors, sorted. */
  readonly mtpKeys: readonly string[];
  readonly tensorNames: readonly string[];
  /** sha256 (hex) of each tensor's data bytes, to check extractions byte for byte. */
  readonly tensorSha256: Readonly<Record<string, string>>;
  /** Which weight file holds each tensor. */
  readonly shardOf: Readonly<Record<string, string>>;
  /** Bytes of tensor data over all shards. */
  readonly tensorDataBytes: number;
  readonly config: Readonly<Record<string, unknown>>;
  /** The files as `addRepo` sources (streamed from disk). */
  repoFiles(): Record<string, { fromPath: string }>;
  cleanup(): Promise<void>;
}

/** Deterministic pseudo-random bytes for one tensor, in chunks of at most 1 MiB. */
function* tensorChunks(name: string, bytes: number, seed: number): Generator<Uint8Array> {
  let x = (fnv1a(name) ^ seed) >>> 0 || 1;
  const CHUNK = 1024 * 1024;
  for (let done = 0; done < bytes; done += CHUNK) {
    const n = Math.min(CHUNK, bytes - done);
    const words = new Uint32Array(Math.ceil(n / 4));
    for (let i = 0; i < words.length; i++) {
      x ^= x << 13;
      x >>>= 0;
      x ^= x >>> 17;
      x ^= x << 5;
      x >>>= 0;
      words[i] = x;
    }
    yield new Uint8Array(words.buffer, 0, n);
  }
}

function layerTensors(prefix: string, h: number, inter: number, dtype: string): TensorSpec[] {
  return [
    { name: `${prefix}input_layernorm.weight`, dtype, shape: [h] },
    { name: `${prefix}self_attn.q_proj.weight`, dtype, shape: [h, h] },
    { name: `${prefix}self_attn.k_proj.weight`, dtype, shape: [h, h] },
    { name: `${prefix}self_attn.v_proj.weight`, dtype, shape: [h, h] },
    { name: `${prefix}self_attn.o_proj.weight`, dtype, shape: [h, h] },
    { name: `${prefix}post_attention_layernorm.weight`, dtype, shape: [h] },
    { name: `${prefix}mlp.gate_proj.weight`, dtype, shape: [inter, h] },
    { name: `${prefix}mlp.up_proj.weight`, dtype, shape: [inter, h] },
    { name: `${prefix}mlp.down_proj.weight`, dtype, shape: [h, inter] },
  ];
}

/** The options with their defaults filled in: the model's shape and how it is written. */
interface Shape {
  readonly style: MtpStyle;
  readonly layers: number;
  readonly nextn: number;
  readonly h: number;
  readonly inter: number;
  readonly vocab: number;
  readonly shardCount: number;
  readonly dtype: "BF16" | "F32";
  readonly seed: number;
}

function shapeOf(opts: MtpCheckpointOptions): Shape {
  const style = opts.style ?? "nextn-layers";
  const h = opts.hiddenSize ?? 16;
  return {
    style,
    layers: opts.numHiddenLayers ?? 2,
    nextn: style === "none" ? 0 : (opts.numNextnPredictLayers ?? 1),
    h,
    inter: opts.intermediateSize ?? 2 * h,
    vocab: opts.vocabSize ?? 64,
    shardCount: Math.max(1, opts.shards ?? 3),
    dtype: opts.dtype ?? "BF16",
    seed: opts.seed ?? 7,
  };
}

/** Embeddings, the decoder layers, the final norm and the LM head. */
function mainTensors({ layers, h, inter, vocab, dtype }: Shape): TensorSpec[] {
  const main: TensorSpec[] = [{ name: "model.embed_tokens.weight", dtype, shape: [vocab, h] }];
  for (let i = 0; i < layers; i++)
    main.push(...layerTensors(`model.layers.${i}.`, h, inter, dtype));
  main.push(
    { name: "model.norm.weight", dtype, shape: [h] },
    { name: "lm_head.weight", dtype, shape: [vocab, h] },
  );
  return main;
}

/** The MTP heads, named as `style` names them (none for `none`). */
function mtpTensors({ style, layers, nextn, h, inter, dtype }: Shape): TensorSpec[] {
  const mtp: TensorSpec[] = [];
  if (style === "nextn-layers") {
    for (let j = 0; j < nextn; j++) {
      const p = `model.layers.${layers + j}.`;
      mtp.push(
        { name: `${p}enorm.weight`, dtype, shape: [h] },
        { name: `${p}hnorm.weight`, dtype, shape: [h] },
        { name: `${p}eh_proj.weight`, dtype, shape: [h, 2 * h] },
        ...layerTensors(p, h, inter, dtype),
        { name: `${p}shared_head.norm.weight`, dtype, shape: [h] },
      );
    }
  } else if (style === "mtp-prefix" && nextn > 0) {
    mtp.push(
      { name: "mtp.fc.weight", dtype, shape: [h, 2 * h] },
      { name: "mtp.pre_fc_norm_embedding.weight", dtype, shape: [h] },
      { name: "mtp.pre_fc_norm_hidden.weight", dtype, shape: [h] },
      { name: "mtp.norm.weight", dtype, shape: [h] },
    );
    for (let j = 0; j < nextn; j++) mtp.push(...layerTensors(`mtp.layers.${j}.`, h, inter, dtype));
  }
  return mtp;
}

/** Splits the tensors sequentially by bytes into at most `shardCount` groups, none empty. */
function shardGroups(
  all: readonly TensorSpec[],
  total: number,
  shardCount: number,
): TensorSpec[][] {
  const groups: TensorSpec[][] = [];
  const target = total / shardCount;
  let current: TensorSpec[] = [];
  let acc = 0;
  for (const [i, t] of all.entries()) {
    current.push(t);
    acc += tensorBytes(t);
    const remainingTensors = all.length - i - 1;
    const remainingShards = shardCount - groups.length - 1;
    if (
      remainingShards > 0 &&
      (acc >= target * (groups.length + 1) || remainingTensors === remainingShards)
    ) {
      groups.push(current);
      current = [];
    }
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

/** Writes one safetensors file per group; returns the file names and each tensor's sha256 and file. */
async function writeShards(
  dir: string,
  groups: readonly TensorSpec[][],
  seed: number,
): Promise<{
  files: string[];
  tensorSha256: Record<string, string>;
  shardOf: Record<string, string>;
}> {
  const files: string[] = [];
  const tensorSha256: Record<string, string> = {};
  const shardOf: Record<string, string> = {};
  const names = (n: number, i: number): string =>
    n === 1
      ? "model.safetensors"
      : `model-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`;

  for (const [i, group] of groups.entries()) {
    const file = names(groups.length, i);
    const out = createWriteStream(join(dir, file));
    const write = async (chunk: Uint8Array): Promise<void> => {
      if (!out.write(chunk)) await once(out, "drain");
    };
    await write(safetensorsHeader(group, { format: "pt" }));
    for (const t of group) {
      const sha = createHash("sha256");
      for (const chunk of tensorChunks(t.name, tensorBytes(t), seed)) {
        sha.update(chunk);
        await write(chunk);
      }
      tensorSha256[t.name] = sha.digest("hex");
      shardOf[t.name] = file;
    }
    out.end();
    await once(out, "finish");
    files.push(file);
  }
  return { files, tensorSha256, shardOf };
}

/** config.json of the model family `style` stands for, with the shape. */
function checkpointConfig({
  style,
  layers,
  nextn,
  h,
  inter,
  vocab,
  dtype,
}: Shape): Record<string, unknown> {
  const config: Record<string, unknown> =
    style === "none"
      ? { architectures: ["Gemma3ForCausalLM"], model_type: "gemma3", num_hidden_layers: layers }
      : style === "mtp-prefix"
        ? {
            architectures: ["Qwen3NextForCausalLM"],
            model_type: "qwen3_next",
            num_hidden_layers: layers,
            mtp_num_hidden_layers: nextn,
          }
        : {
            architectures: ["DeepseekV3ForCausalLM"],
            model_type: "deepseek_v3",
            num_hidden_layers: layers,
            num_nextn_predict_layers: nextn,
          };
  Object.assign(config, {
    hidden_size: h,
    intermediate_size: inter,
    vocab_size: vocab,
    torch_dtype: dtype === "BF16" ? "bfloat16" : "float32",
  });
  return config;
}

export async function generateMtpCheckpoint(
  opts: MtpCheckpointOptions = {},
): Promise<MtpCheckpoint> {
  const shape = shapeOf(opts);
  const dir = opts.dir ?? (await mkdtemp(join(tmpdir(), "mtp-checkpoint-")));
  await mkdir(dir, { recursive: true });

  const mtp = mtpTensors(shape);
  const all = [...mainTensors(shape), ...mtp];
  const total = all.reduce((a, t) => a + tensorBytes(t), 0);

  // Split sequentially by bytes; MTP tensors come last, as in real checkpoints.
  const groups = shardGroups(all, total, shape.shardCount);
  const { files, tensorSha256, shardOf } = await writeShards(dir, groups, shape.seed);

  if (groups.length > 1) {
    const index = {
      metadata: { total_size: total },
      weight_map: Object.fromEntries(all.map((t) => [t.name, shardOf[t.name]])),
    };
    await writeFile(join(dir, "model.safetensors.index.json"), JSON.stringify(index, null, 2));
    files.push("model.safetensors.index.json");
  }

  const config = checkpointConfig(shape);
  await writeFile(join(dir, "config.json"), JSON.stringify(config, null, 2));
  files.push("config.json");

  const card: Record<string, string | string[]> = {
    library_name: "transformers",
    tags: ["test-fixture"],
  };
  if (opts.baseModel) card["base_model"] = opts.baseModel;
  await writeFile(join(dir, "README.md"), modelCard(card, "Generated test checkpoint.\n"));
  files.push("README.md");

  return {
    dir,
    files,
    mtpKeys: mtp.map((t) => t.name).sort(),
    tensorNames: all.map((t) => t.name),
    tensorSha256,
    shardOf,
    tensorDataBytes: total,
    config,
    repoFiles: () => Object.fromEntries(files.map((f) => [f, { fromPath: join(dir, f) }])),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}
