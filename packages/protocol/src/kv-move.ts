// Moving a conversation's KV cache between nodes (issue 50, docs/api.md "Stream migration"): a
// gateway asks the source node to save the slot that served a stream (`kvSave`), then asks the target
// node to fetch that file over the node API, check it and restore it into a free slot (`kvRestore`).
// Both go to one node (suffix: its peer key); the file itself never crosses the bus.
import { z } from "zod";
import { InstanceIdSchema, ModelIdSchema } from "./ids.ts";
import { WireErrorSchema } from "./errors.ts";

/** A slot file's name: made by the saving node, random, with nothing a path could hide in it. */
export const KvFileNameSchema = z.string().regex(/^kv-[0-9a-f]{32}\.bin$/, "not a slot file name");

/**
 * What a saved cache holds and what it can be restored into: the same model file, the same slot
 * context and the same engine flags that shape the cache (its types, flash attention). A target
 * that differs in any of them refuses it.
 */
export const KvCacheShapeSchema = z.object({
  model_id: ModelIdSchema,
  /** The size of the model file the engine loaded (a different quantization differs). */
  model_bytes: z.number().int().nonnegative(),
  /** The context of one slot (`n_ctx` of the engine's /slots). */
  slot_ctx: z.number().int().positive(),
  /** sha256 of the engine's extra arguments (cache types and the like), hex. */
  engine_flags: z.string().regex(/^[0-9a-f]{64}$/),
});
export type KvCacheShape = z.infer<typeof KvCacheShapeSchema>;

export const KvSaveRequestSchema = z.object({
  instance_id: InstanceIdSchema,
  /** The stream's `seed`, which the gateway set: it names the slot that served the stream. */
  seed: z.number().int().nonnegative(),
  /** Longest the save may take (the engine saves a slot once its task has stopped). */
  timeout_ms: z.number().int().positive().max(600_000),
});
export type KvSaveRequest = z.infer<typeof KvSaveRequestSchema>;

/** A saved slot, ready to be fetched from `api_url` (`GET /kv/files/{file}`) by the target. */
export const KvSavedSchema = z.object({
  file: KvFileNameSchema,
  bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  /** Tokens the engine wrote (its `n_saved`). */
  tokens: z.number().int().nonnegative(),
  /** The saving node's API base URL. */
  api_url: z.string().url(),
  shape: KvCacheShapeSchema,
  /** How long the engine took to write it. */
  save_ms: z.number().nonnegative(),
});
export type KvSaved = z.infer<typeof KvSavedSchema>;

export const KvSaveReplySchema = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), saved: KvSavedSchema }),
  z.object({ ok: z.literal(false), error: WireErrorSchema }),
]);
export type KvSaveReply = z.infer<typeof KvSaveReplySchema>;

export const KvRestoreRequestSchema = z.object({
  instance_id: InstanceIdSchema,
  saved: KvSavedSchema,
  timeout_ms: z.number().int().positive().max(600_000),
});
export type KvRestoreRequest = z.infer<typeof KvRestoreRequestSchema>;

/** The cache restored into `slot` of the target's engine: the continuation names it (`id_slot`). */
export const KvRestoredSchema = z.object({
  slot: z.number().int().nonnegative(),
  /** The target engine's slots in all (how many caches it can hold at once). */
  slots: z.number().int().positive(),
  tokens: z.number().int().nonnegative(),
  fetch_ms: z.number().nonnegative(),
  restore_ms: z.number().nonnegative(),
});
export type KvRestored = z.infer<typeof KvRestoredSchema>;

export const KvRestoreReplySchema = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), restored: KvRestoredSchema }),
  z.object({ ok: z.literal(false), error: WireErrorSchema }),
]);
export type KvRestoreReply = z.infer<typeof KvRestoreReplySchema>;
