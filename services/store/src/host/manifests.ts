// A model's manifest in the store: written at registration from the files on disk, read back at
// start (and dropped when the files no longer match it, so nothing changed underneath is served).
import { lstat, readdir, readFile } from "node:fs/promises";
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
import { artifactFile, isErrno, walkFiles, writeJsonAtomic } from "../paths.ts";
import { hashFilePieces, pieceBytesFor } from "../pieces.ts";

/** Manifest of a registered model, inside its store directory (dotfiles are never artifacts). */
export const MANIFEST_FILE = ".ic-manifest.json";

/**
 * The manifests already in store_path: each model directory's manifest, when it is valid, names its
 * own model and every file it lists is still there with its size (otherwise it is logged and left
 * out: not served until registered again).
 */
export async function readManifests(
  storePath: string,
  log: Logger,
): Promise<Map<ModelId, StoreManifest>> {
  const manifests = new Map<ModelId, StoreManifest>();
  for (const name of await readdir(storePath)) {
    const id = modelIdFromDirName(name);
    if (!id) continue;
    const dir = join(storePath, name);
    let text: string;
    try {
      text = await readFile(join(dir, MANIFEST_FILE), "utf8");
    } catch (e) {
      if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) continue;
      throw e;
    }
    const parsed = StoreManifestSchema.safeParse(safeJson(text));
    if (!parsed.success || parsed.data.model_id !== id) {
      log.warn({ modelId: id }, "ignoring an invalid store manifest; register the model again");
      continue;
    }
    const changed = await changedFiles(dir, parsed.data.files);
    if (changed.length > 0) {
      log.warn(
        { modelId: id, changed },
        "store files differ from their manifest; not served until registered again",
      );
      continue;
    }
    manifests.set(id, parsed.data);
  }
  return manifests;
}

async function changedFiles(dir: string, files: readonly ManifestFile[]): Promise<string[]> {
  const changed: string[] = [];
  for (const f of files) {
    try {
      const s = await lstat(artifactFile(dir, f.path));
      if (!s.isFile() || s.size !== f.bytes) changed.push(f.path);
    } catch {
      changed.push(f.path);
    }
  }
  return changed;
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
    files.push(await hashedFile(abs, f.path, f.bytes, known, m.pieceBytes));
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
  await writeJsonAtomic(join(dir, MANIFEST_FILE), manifest);
  log.info({ modelId, files: files.length, totalBytes: manifest.total_bytes }, "registered");
  return manifest;
}

/**
 * A manifest entry with the file's sha256 and piece hashes, read from the file in one pass. A sha256
 * a transfer verified (`known`) must match what is on disk now, or the file changed since.
 */
async function hashedFile(
  abs: string,
  path: string,
  bytes: number,
  known: ReadonlyMap<string, string>,
  pieceBytes: number | undefined,
): Promise<ManifestFile> {
  if (bytes === 0) return { path, bytes, sha256: EMPTY_SHA256 };
  const h = await hashFilePieces(abs, bytes, pieceBytesFor(bytes, pieceBytes));
  const expected = known.get(path);
  if (expected !== undefined && expected !== h.sha256)
    throw new ServiceError("conflict", `${path} changed after it was verified; pull it again`);
  return { path, bytes, sha256: h.sha256, pieces: h.pieces };
}

const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/**
 * A manifest written before piece hashes existed, with them added (one read of each file). Null when
 * a file no longer has the sha256 the manifest lists: it changed underneath and is not served.
 */
export async function withPieces(
  dir: string,
  manifest: StoreManifest,
  pieceBytes?: number,
): Promise<StoreManifest | null> {
  const files: ManifestFile[] = [];
  for (const f of manifest.files) {
    if (f.pieces || f.bytes === 0) {
      files.push(f);
      continue;
    }
    const h = await hashFilePieces(
      artifactFile(dir, f.path),
      f.bytes,
      pieceBytesFor(f.bytes, pieceBytes),
    );
    if (h.sha256 !== f.sha256) return null;
    files.push({ ...f, pieces: h.pieces });
  }
  const next = StoreManifestSchema.parse({ ...manifest, files });
  await writeJsonAtomic(join(dir, MANIFEST_FILE), next);
  return next;
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
