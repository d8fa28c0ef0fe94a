// Schemas of the model store: the artifact manifest a store host serves, the storage report of
// GET /store/storage, and the POST /store/purge-staging body. Field names are snake_case on the wire.
import { z } from "zod";
import { ModelIdSchema } from "./ids.ts";

const ARTIFACT_SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._+-]{0,199}$/;

/** Why a manifest path is unsafe or not an artifact path, or null when it is fine. */
export function artifactPathProblem(path: string): string | null {
  if (path.length === 0 || path.length > 1024) return "artifact path must be 1-1024 characters";
  const segments = path.split("/");
  if (segments.length > 8) return "artifact path is nested too deeply (at most 8 segments)";
  for (const s of segments) {
    if (!ARTIFACT_SEGMENT.test(s) || s.includes("..")) {
      return "artifact path segments must start with a letter, digit or '_' and contain only letters, digits, '.', '_', '+' or '-' (no '..')";
    }
  }
  return null;
}

/** A relative, forward-slash path inside a model directory; never absolute, never a dotfile, never `..`. */
export const ArtifactPathSchema = z.string().superRefine((v, ctx) => {
  const problem = artifactPathProblem(v);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});

export const Sha256Schema = z.string().regex(/^[0-9a-f]{64}$/, "expected a lowercase hex sha256");

/** Most pieces one file is cut into; the store host picks a piece size that keeps to it. */
export const MAX_PIECES_PER_FILE = 65_536;
/** Most piece hashes in one manifest (about 17 MB of JSON at most). */
export const MAX_PIECES_PER_MANIFEST = 262_144;

/**
 * A file's pieces: consecutive `bytes`-sized ranges (the last one shorter) with the sha256 of each,
 * so a copy can be fetched from several sources at once and checked piece by piece.
 */
export const FilePiecesSchema = z.object({
  bytes: z
    .number()
    .int()
    .min(64 * 1024)
    .max(2 ** 40),
  sha256: z.array(Sha256Schema).max(MAX_PIECES_PER_FILE),
});
export type FilePieces = z.infer<typeof FilePiecesSchema>;

/** Number of pieces of a file of `fileBytes` cut into `pieceBytes` pieces (0 for an empty file). */
export function pieceCount(fileBytes: number, pieceBytes: number): number {
  return Math.ceil(fileBytes / pieceBytes);
}

export const ManifestFileSchema = z
  .object({
    path: ArtifactPathSchema,
    bytes: z.number().int().nonnegative(),
    sha256: Sha256Schema,
    /**
     * Per-piece hashes (the store host adds them at registration; a manifest written by an older
     * version has none, and its files are then fetched whole from the store host only).
     */
    pieces: FilePiecesSchema.optional(),
  })
  .superRefine((f, ctx) => {
    if (f.pieces && f.pieces.sha256.length !== pieceCount(f.bytes, f.pieces.bytes)) {
      ctx.addIssue({
        code: "custom",
        path: ["pieces", "sha256"],
        message: `${f.path}: ${f.pieces.sha256.length} piece hashes for ${pieceCount(f.bytes, f.pieces.bytes)} pieces`,
      });
    }
  });
export type ManifestFile = z.infer<typeof ManifestFileSchema>;

/** The exact registered artifact set of one model in the store. */
export const StoreManifestSchema = z
  .object({
    model_id: ModelIdSchema,
    files: z.array(ManifestFileSchema).max(10_000),
    /** Sum of every file's bytes: the exact registered artifact total. */
    total_bytes: z.number().int().nonnegative(),
    registered_at: z.iso.datetime(),
    /** Where the store got the files: a local registration or a model-hub download. */
    source: z.enum(["local", "hub"]),
    /** Hub revision the files came from (source "hub" only). */
    revision: z.string().optional(),
  })
  .superRefine((m, ctx) => {
    const sum = m.files.reduce((s, f) => s + f.bytes, 0);
    if (sum !== m.total_bytes) {
      ctx.addIssue({
        code: "custom",
        path: ["total_bytes"],
        message: `total_bytes ${m.total_bytes} differs from the sum of file sizes ${sum}`,
      });
    }
    const pieces = m.files.reduce((s, f) => s + (f.pieces?.sha256.length ?? 0), 0);
    if (pieces > MAX_PIECES_PER_MANIFEST) {
      ctx.addIssue({
        code: "custom",
        path: ["files"],
        message: `${pieces} piece hashes in one manifest (at most ${MAX_PIECES_PER_MANIFEST})`,
      });
    }
    const seen = new Set<string>();
    for (const f of m.files) {
      const key = f.path.toLowerCase();
      if (seen.has(key)) {
        ctx.addIssue({ code: "custom", path: ["files"], message: `duplicate file ${f.path}` });
      }
      seen.add(key);
    }
  });
export type StoreManifest = z.infer<typeof StoreManifestSchema>;

/**
 * GET /store/staged/{org}/{name}/pieces on a node: the pieces of a model it can serve to peers now,
 * from a complete staged copy ("all") or one being staged (a bitmap of verified pieces). Peers take
 * only what matches the store host's manifest (path, size, sha256 and piece size).
 */
export const PeerPiecesSchema = z.object({
  model_id: ModelIdSchema,
  files: z
    .array(
      z.object({
        path: ArtifactPathSchema,
        bytes: z.number().int().nonnegative(),
        sha256: Sha256Schema,
        /** The piece size the bitmap counts in (with a bitmap only). */
        piece_bytes: z.number().int().positive().optional(),
        /** "all", or base64 of a bitmap (bit i of byte i>>3, least significant first) of verified pieces. */
        have: z.union([z.literal("all"), z.base64().max(12_000)]),
        /**
         * Pieces it is fetching from the store host right now (same bitmap form): a peer staging the
         * same model waits for them rather than asking the store host for them too.
         */
        fetching: z.base64().max(12_000).optional(),
      }),
    )
    .max(10_000),
});
export type PeerPieces = z.infer<typeof PeerPiecesSchema>;

/** GET /store/models on a store host. */
export const StoreModelListSchema = z.object({
  models: z.array(
    z.object({
      model_id: ModelIdSchema,
      total_bytes: z.number().int().nonnegative(),
      files: z.number().int().nonnegative(),
    }),
  ),
});
export type StoreModelList = z.infer<typeof StoreModelListSchema>;

/** One staged model in the storage report. */
export const StagedModelReportSchema = z.object({
  model_id: ModelIdSchema,
  /** Absolute path of the model directory under node_cache_path. */
  path: z.string(),
  /** Bytes on disk, complete files plus resumable partials. */
  size_bytes: z.number().int().nonnegative(),
  /** Last-use time (ISO 8601); orders recency eviction. */
  last_used_at: z.iso.datetime(),
  /** A live runner names the model, or it is a companion of an active model. */
  in_use: z.boolean(),
  /** Every manifest file is present and verified. */
  complete: z.boolean(),
  /** A transfer into this copy is running now. */
  downloading: z.boolean(),
});
export type StagedModelReport = z.infer<typeof StagedModelReportSchema>;

/** GET /store/storage: the local node's storage report. */
export const StorageReportSchema = z.object({
  node_cache_path: z.string(),
  staged_models: z.array(StagedModelReportSchema),
  /** Sum of size_bytes over staged_models. */
  staged_bytes: z.number().int().nonnegative(),
  /** Bytes the durable event log occupies on disk. */
  event_log_bytes: z.number().int().nonnegative(),
  /** The filesystem holding node_cache_path. */
  models_volume: z.object({
    path: z.string(),
    free_bytes: z.number().int().nonnegative(),
    total_bytes: z.number().int().nonnegative(),
  }),
  staging: z.object({
    cleanup_on_deactivate: z.boolean(),
    staging_keep_recent_bytes: z.number().int().nonnegative(),
    headroom_bytes: z.number().int().nonnegative(),
  }),
  generated_at: z.iso.datetime(),
});
export type StorageReport = z.infer<typeof StorageReportSchema>;

/** GET /store/storage/cluster: every live node's storage report, and the nodes that did not answer. */
export const ClusterStorageSchema = z.object({
  nodes: z.array(z.object({ name: z.string(), report: StorageReportSchema })),
  unreachable: z.array(z.object({ node: z.string(), error: z.string() })),
});
export type ClusterStorage = z.infer<typeof ClusterStorageSchema>;

/** POST /store/purge-staging body: `{}` (every not-in-use copy) or `{ "modelId": ... }`. */
export const PurgeStagingBodySchema = z.object({ modelId: ModelIdSchema.optional() }).strict();
export type PurgeStagingBody = z.infer<typeof PurgeStagingBodySchema>;

// ---- model pulls: store-side downloads from the model hub (POST/GET/DELETE /store/pulls) ----

export const PULL_STATES = ["queued", "running", "done", "failed", "cancelled"] as const;

/** Why a pull failed: no room for the manifest plus the reserve, the hub, the transfer, a hash. */
const PULL_ERROR_CODES = ["no_fit", "hub_error", "transfer", "integrity"] as const;
export type PullErrorCode = (typeof PULL_ERROR_CODES)[number];

/**
 * A hub revision: a branch, a tag or a commit. Letters, digits, `.`, `_`, `-` in `/`-separated
 * segments, no `..` (it travels in a URL path to the hub).
 */
const RevisionSchema = z
  .string()
  .min(1)
  .max(200)
  .regex(
    /^[A-Za-z0-9_][A-Za-z0-9._-]*(\/[A-Za-z0-9_][A-Za-z0-9._-]*)*$/,
    "revision must be a branch, tag or commit: letters, digits, '.', '_', '-' in '/'-separated segments",
  )
  .refine((v) => !v.includes(".."), "revision must not contain '..'");

/**
 * A quantization selector (`Q4_K_M`, `q8_0`, `F16`, `UD-Q4_K_XL`...), matched case-insensitively
 * against the quant tags of a repo's GGUF files.
 */
export const QuantSchema = z
  .string()
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/,
    "quant must be a quantization tag such as Q4_K_M, Q8_0 or F16",
  );

/** One model pull, as the store host reports it (GET /store/pulls, /state `pulls`). */
export const PullSchema = z.object({
  model_id: ModelIdSchema,
  /** The revision asked for (`main` when none was): a branch, a tag or a commit. */
  revision: z.string(),
  /**
   * The quantization asked for, replaced by the one chosen once the hub listed the repo (without a
   * selector: Q4_K_M when present, else the smallest). Absent for a repo without GGUF weights.
   */
  quant: z.string().optional(),
  /** The GGUF the engine will load (the first part of a split), once chosen. */
  served_file: z.string().optional(),
  state: z.enum(PULL_STATES),
  /** Bytes of the selected files on the store volume so far (resumed and linked bytes included). */
  bytes_done: z.number().int().nonnegative(),
  /** The selected manifest's total, once the hub listed it. */
  bytes_total: z.number().int().nonnegative().nullable(),
  /** Selected files complete on the store volume (already present ones included). */
  files_done: z.number().int().nonnegative(),
  /** How many files the selected manifest has, once the hub listed it. */
  files_total: z.number().int().nonnegative().nullable(),
  started_at: z.string(),
  updated_at: z.string(),
  /** Why a pull failed (only on `failed`). */
  error: z.object({ code: z.enum(PULL_ERROR_CODES), message: z.string() }).optional(),
});
export type Pull = z.infer<typeof PullSchema>;

export const PullBodySchema = z
  .object({
    model_id: ModelIdSchema,
    revision: RevisionSchema.optional(),
    quant: QuantSchema.optional(),
  })
  .strict();
export type PullBody = z.infer<typeof PullBodySchema>;

/**
 * `org/repo[:QUANT][@revision]`, the way `ic pull` and `npm start -- --model` name a hub model (as
 * `llama-server -hf` and Ollama users type it), as a pull body.
 */
export function parseModelRef(ref: string): PullBody {
  const m = /^([^:@]+)(?::([^@]+))?(?:@(.+))?$/.exec(ref.trim());
  return PullBodySchema.parse({
    model_id: m?.[1] ?? ref,
    ...(m?.[2] !== undefined ? { quant: m[2] } : {}),
    ...(m?.[3] !== undefined ? { revision: m[3] } : {}),
  });
}

/** Bus request to the store host: start (or resume), cancel, or list its pulls; remove a model. */
export const PullRequestSchema = z.discriminatedUnion("op", [
  z.object({
    op: z.literal("start"),
    model_id: ModelIdSchema,
    revision: RevisionSchema.optional(),
    quant: QuantSchema.optional(),
  }),
  z.object({ op: z.literal("cancel"), model_id: ModelIdSchema }),
  z.object({ op: z.literal("list") }),
  /** Which node is the store host, and its API (uploads go there directly). */
  z.object({ op: z.literal("locate") }),
  /** Delete the model's files from the store (after the registry let it go). */
  z.object({
    op: z.literal("remove"),
    model_id: ModelIdSchema,
    /** Only say whether the store would remove it now (no pull of it running), remove nothing. */
    check_only: z.boolean().optional(),
  }),
]);
export type PullRequest = z.infer<typeof PullRequestSchema>;
