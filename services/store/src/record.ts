// The `.staging.json` record kept in every staged model directory: which manifest the copy follows,
// whether every file is verified, and the last-use time that orders eviction. Validated when read.
import { join } from "node:path";
import { z } from "zod";
import { ArtifactPathSchema, ModelIdSchema, Sha256Schema, type ModelId } from "@ic/protocol";
import { readTextIfPresent, writeJsonAtomic } from "./paths.ts";
import type { HubFile } from "./transfer/hub.ts";

export const RECORD_FILE = ".staging.json";

export const RecordFileSchema = z.object({
  path: ArtifactPathSchema,
  bytes: z.number().int().nonnegative(),
  sha256: Sha256Schema.optional(),
  git_oid: z
    .string()
    .regex(/^[0-9a-f]{40}$/)
    .optional(),
});
export type RecordFile = z.infer<typeof RecordFileSchema>;

export const StagingRecordSchema = z.object({
  version: z.literal(1),
  model_id: ModelIdSchema,
  /** store: copied or hardlinked from a store host; hub: direct model-hub download. */
  source: z.enum(["store", "hub"]),
  revision: z.string().optional(),
  files: z.array(RecordFileSchema),
  total_bytes: z.number().int().nonnegative(),
  /** True once every file is present under its final name and verified. */
  complete: z.boolean(),
  last_used_ms: z.number().nonnegative(),
  completed_at_ms: z.number().nonnegative().optional(),
});
export type StagingRecord = z.infer<typeof StagingRecordSchema>;

export type RecordRead =
  | { readonly kind: "ok"; readonly record: StagingRecord }
  | { readonly kind: "missing" }
  | { readonly kind: "invalid"; readonly problem: string };

export async function readRecord(
  dir: string,
  expected: ModelId,
  name: string = RECORD_FILE,
): Promise<RecordRead> {
  const text = await readTextIfPresent(join(dir, name));
  if (text === undefined) return { kind: "missing" };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return { kind: "invalid", problem: `not JSON: ${(e as Error).message}` };
  }
  const parsed = StagingRecordSchema.safeParse(json);
  if (!parsed.success) return { kind: "invalid", problem: z.prettifyError(parsed.error) };
  if (parsed.data.model_id !== expected) {
    return {
      kind: "invalid",
      problem: `record names ${parsed.data.model_id}, directory is ${expected}`,
    };
  }
  return { kind: "ok", record: parsed.data };
}

export function writeRecord(
  dir: string,
  record: StagingRecord,
  name: string = RECORD_FILE,
  createDir = true,
): Promise<void> {
  return writeJsonAtomic(join(dir, name), record, createDir);
}

/** Two descriptions of a file name the same content (same size and a shared hash). */
export function sameContent(a: RecordFile, b: RecordFile): boolean {
  if (a.path !== b.path || a.bytes !== b.bytes) return false;
  if (a.sha256 && b.sha256) return a.sha256 === b.sha256;
  if (a.git_oid && b.git_oid) return a.git_oid === b.git_oid;
  return false;
}

/** A record's entry for a file the hub listed (a pull into the store, or a direct hub download). */
export function hubRecordFile(f: HubFile): RecordFile {
  return {
    path: f.path,
    bytes: f.bytes,
    ...(f.sha256 ? { sha256: f.sha256 } : {}),
    ...(f.gitOid ? { git_oid: f.gitOid } : {}),
  };
}
