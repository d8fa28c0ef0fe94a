// What is under the staging root, read from the disk: one entry per model directory (its size, the
// bytes deleting it frees, its last use and whether its record says complete), and the removal of
// what a crashed session left (directories being deleted, temporary and half-linked files).
import { readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { modelIdFromDirName, type ModelId } from "@ic/protocol";
import { isErrno, walkFiles } from "../paths.ts";
import { readRecord } from "../record.ts";
import type { ModelUsage, StagedEntry } from "./staging-types.ts";

/** Every model directory under the staging root, with sizes, last use and usage flags. */
export async function listStaged(
  root: string,
  usage: ModelUsage,
  downloading: ReadonlySet<ModelId>,
): Promise<StagedEntry[]> {
  let names: string[];
  try {
    names = await readdir(root);
  } catch (e) {
    if (isErrno(e, "ENOENT")) return [];
    throw e;
  }
  const out: StagedEntry[] = [];
  for (const name of names.sort()) {
    if (name.startsWith(".")) continue;
    const modelId = modelIdFromDirName(name);
    if (!modelId) continue;
    const path = join(root, name);
    let dirStat;
    try {
      dirStat = await stat(path);
    } catch (e) {
      if (isErrno(e, "ENOENT")) continue;
      throw e;
    }
    if (!dirStat.isDirectory()) continue;
    const files = await walkFiles(path);
    const rec = await readRecord(path, modelId);
    const record = rec.kind === "ok" ? rec.record : null;
    const sizes = new Map(files.map((f) => [f.path, f.bytes]));
    const complete =
      record !== null &&
      record.complete &&
      record.files.every((f) => sizes.get(f.path) === f.bytes);
    out.push({
      modelId,
      path,
      bytes: files.reduce((s, f) => s + f.bytes, 0),
      freeableBytes: files.reduce((s, f) => s + (f.nlink > 1 ? 0 : f.bytes), 0),
      lastUsedMs: record?.last_used_ms ?? dirStat.mtimeMs,
      complete,
      downloading: downloading.has(modelId),
      inUse: usage.live.has(modelId),
      companionOfActive: usage.companions.has(modelId),
    });
  }
  return out;
}

/** Removes what an interrupted session left under the root; answers how many things it removed. */
export async function removeLeftovers(root: string): Promise<number> {
  let removed = 0;
  for (const name of await readdir(root)) {
    const path = join(root, name);
    if (name.startsWith(".deleting-")) {
      await rm(path, { recursive: true, force: true });
      removed++;
      continue;
    }
    const modelId = modelIdFromDirName(name);
    if (!modelId || !(await stat(path)).isDirectory()) continue;
    for (const f of await walkFiles(path)) {
      const base = f.path.split("/").at(-1) ?? "";
      if (base.startsWith(".") && (base.endsWith(".tmp") || base.includes(".link-"))) {
        await rm(join(path, ...f.path.split("/")), { force: true });
        removed++;
      }
    }
  }
  return removed;
}
