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
import { artifactFile, hashFile, isErrno, walkFiles, writeJsonAtomic } from "../paths.ts";

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
    const sha256 = known.get(f.path) ?? (await hashFile(join(dir, ...f.path.split("/"))));
    files.push({ path: f.path, bytes: f.bytes, sha256 });
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

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
