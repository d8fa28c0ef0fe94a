// A model's manifest in the store: written at registration from the files on disk, read back at
// start and checked against the files (sizes), so nothing changed underneath is served.
import { lstat, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@ic/log";
import {
  artifactPathProblem,
  modelIdFromDirName,
  ServiceError,
  StoreManifestSchema,
  type ManifestFile,
  type ModelId,
  type StoreManifest,
} from "@ic/protocol";
import { artifactFile, readTextIfPresent, walkFiles, writeJsonAtomic } from "../paths.ts";
import { hashFilePieces, pieceBytesFor, type HashOptions } from "../pieces.ts";

/** Manifest of a registered model, inside its store directory (dotfiles are never artifacts). */
export const MANIFEST_FILE = ".ic-manifest.json";

/** One file of a manifest that is not on disk as the manifest lists it. */
export interface FileDifference {
  readonly file: string;
  /** What differs, in words: "manifest lists 1,234 bytes, disk has 5,678". */
  readonly problem: string;
}

/** What a model directory's manifest says about its files, after a cheap size check. */
export type ManifestCheck =
  | { readonly kind: "absent" }
  | { readonly kind: "invalid" }
  | { readonly kind: "ok"; readonly manifest: StoreManifest }
  | {
      readonly kind: "changed";
      readonly manifest: StoreManifest;
      readonly differences: readonly FileDifference[];
    };

/**
 * A model directory's manifest: valid when it parses, names this model, and every file it lists is
 * there with its size (only sizes: no file is read).
 */
export async function checkManifest(dir: string, id: ModelId): Promise<ManifestCheck> {
  const text = await readTextIfPresent(join(dir, MANIFEST_FILE));
  if (text === undefined) return { kind: "absent" };
  const parsed = StoreManifestSchema.safeParse(safeJson(text));
  if (!parsed.success || parsed.data.model_id !== id) return { kind: "invalid" };
  const differences = await fileDifferences(dir, parsed.data.files);
  return differences.length > 0
    ? { kind: "changed", manifest: parsed.data, differences }
    : { kind: "ok", manifest: parsed.data };
}

/**
 * Each model directory of store_path with what its manifest says (an invalid one is logged). A
 * directory whose files differ from its manifest is not served until they match again.
 */
export async function readManifests(
  storePath: string,
  log: Logger,
): Promise<Map<ModelId, ManifestCheck>> {
  const out = new Map<ModelId, ManifestCheck>();
  for (const name of (await readdir(storePath)).sort()) {
    const id = modelIdFromDirName(name);
    if (!id) continue;
    const dir = join(storePath, name);
    if (!(await stat(dir).catch(() => undefined))?.isDirectory()) continue;
    const check = await checkManifest(dir, id);
    if (check.kind === "invalid")
      log.warn(
        { modelId: id },
        "ignoring an invalid store manifest; the model is registered again",
      );
    out.set(id, check);
  }
  return out;
}

/** The files of a manifest that are not on disk with the size it lists (lstat only). */
export async function fileDifferences(
  dir: string,
  files: readonly ManifestFile[],
): Promise<FileDifference[]> {
  const out: FileDifference[] = [];
  for (const f of files) {
    const s = await lstat(artifactFile(dir, f.path)).catch(() => undefined);
    // The text only for a file that differs: every scan checks every file.
    const listed = () => `manifest lists ${BYTES.format(f.bytes)} bytes`;
    if (!s) out.push({ file: f.path, problem: `${listed()}, the file is not on disk` });
    else if (!s.isFile())
      out.push({
        file: f.path,
        problem: `${listed()}, disk has something else (a folder or link)`,
      });
    else if (s.size !== f.bytes)
      out.push({ file: f.path, problem: `${listed()}, disk has ${BYTES.format(s.size)}` });
  }
  return out;
}

/**
 * Byte counts with thousands separators: one formatter (toLocaleString made one per call, ~0.3 ms).
 */
const BYTES = new Intl.NumberFormat("en-US");

/** Bytes of the files registering a directory would hash (every non-dot file). */
export async function artifactBytes(dir: string): Promise<number> {
  return (await walkFiles(dir))
    .filter((f) => !f.path.split("/").some((s) => s.startsWith(".")))
    .reduce((sum, f) => sum + f.bytes, 0);
}

/**
 * Writes a model's manifest into its directory, which must still be there: the store host never
 * makes again the directory of a model that was removed (its hash or backfill finishing late).
 */
export async function saveManifest(
  dir: string,
  manifest: StoreManifest,
  signal?: AbortSignal,
): Promise<void> {
  signal?.throwIfAborted();
  if (!(await stat(dir).catch(() => undefined))?.isDirectory())
    throw new ServiceError("not_found", `${dir} is gone; its manifest is not written`);
  await writeJsonAtomic(join(dir, MANIFEST_FILE), manifest, false);
}

/**
 * The manifest of the files in a model's directory (every non-dot file with a valid artifact path,
 * recursively), with exact sizes and sha256 (taken from `known` where a transfer verified them),
 * written into the directory.
 */
export async function writeManifest(m: {
  readonly dir: string;
  readonly modelId: ModelId;
  readonly source: "local" | "hub";
  readonly known: ReadonlyMap<string, string>;
  readonly revision: string | undefined;
  readonly nowMs: number;
  readonly log: Logger;
  readonly pieceBytes?: number | undefined;
  readonly signal?: AbortSignal | undefined;
  readonly onProgress?: ((bytes: number) => void) | undefined;
  readonly checkpoint?: (() => Promise<void>) | undefined;
}): Promise<StoreManifest> {
  const { dir, modelId, source, known, revision, log } = m;
  const found = await walkFiles(dir);
  const files: ManifestFile[] = [];
  for (const f of found.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    if (f.path.split("/").some((s) => s.startsWith("."))) continue;
    if (artifactPathProblem(f.path) !== null) {
      log.warn(
        { modelId, path: f.path },
        "skipping a file whose name is not a valid artifact path",
      );
      continue;
    }
    const abs = join(dir, ...f.path.split("/"));
    files.push(await hashedFile(abs, { path: f.path, bytes: f.bytes }, known, m));
  }
  if (files.length === 0) {
    throw new ServiceError("not_found", `no artifact files under ${dir} for ${modelId}`);
  }
  const manifest = StoreManifestSchema.parse({
    model_id: modelId,
    files,
    total_bytes: files.reduce((s, f) => s + f.bytes, 0),
    registered_at: new Date(m.nowMs).toISOString(),
    source,
    ...(revision ? { revision } : {}),
  });
  await saveManifest(dir, manifest, m.signal);
  log.info({ modelId, files: files.length, totalBytes: manifest.total_bytes }, "registered");
  return manifest;
}

/**
 * A manifest entry with the file's sha256 and piece hashes, read from the file in one pass. A sha256
 * a transfer verified (`known`) must match what is on disk now, or the file changed since.
 */
async function hashedFile(
  abs: string,
  { path, bytes }: { path: string; bytes: number },
  known: ReadonlyMap<string, string>,
  o: HashOptions & { readonly pieceBytes?: number | undefined },
): Promise<ManifestFile> {
  if (bytes === 0) return { path, bytes, sha256: EMPTY_SHA256 };
  const h = await hashFilePieces(abs, bytes, pieceBytesFor(bytes, o.pieceBytes), o);
  const expected = known.get(path);
  if (expected !== undefined && expected !== h.sha256)
    throw new ServiceError("conflict", `${path} changed after it was verified; pull it again`);
  return { path, bytes, sha256: h.sha256, pieces: h.pieces };
}

const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/**
 * A manifest written before piece hashes existed, with them added (one read of each file), not yet
 * written. A file whose sha256 is no longer the manifest's changed underneath: it is named instead.
 */
export async function withPieces(
  dir: string,
  manifest: StoreManifest,
  o: HashOptions & { readonly pieceBytes?: number | undefined } = {},
): Promise<{ ok: true; manifest: StoreManifest } | { ok: false; difference: FileDifference }> {
  const files: ManifestFile[] = [];
  for (const f of manifest.files) {
    if (f.pieces || f.bytes === 0) {
      files.push(f);
      continue;
    }
    const abs = artifactFile(dir, f.path);
    const h = await hashFilePieces(abs, f.bytes, pieceBytesFor(f.bytes, o.pieceBytes), o);
    if (h.sha256 !== f.sha256)
      return {
        ok: false,
        difference: { file: f.path, problem: "sha256 differs from the manifest" },
      };
    files.push({ ...f, pieces: h.pieces });
  }
  return { ok: true, manifest: StoreManifestSchema.parse({ ...manifest, files }) };
}

/** Bytes a piece-hash backfill of this manifest reads (its files without piece hashes). */
export function bytesLackingPieces(manifest: StoreManifest): number {
  return manifest.files.reduce((sum, f) => sum + (f.bytes > 0 && !f.pieces ? f.bytes : 0), 0);
}

/** True when some non-empty file of the manifest has no piece hashes (written by an older version). */
export function lacksPieces(manifest: StoreManifest): boolean {
  return manifest.files.some((f) => f.bytes > 0 && !f.pieces);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
