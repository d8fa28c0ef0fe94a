// Stages a model from a store directory on this machine into node_cache_path/<org>--<name>.
// Hardlinks when on the same filesystem (zero extra bytes), else copies via `.part` + rename.
import { copyFile, link, mkdir, readdir, rename, stat, utimes } from "node:fs/promises";
import { join } from "node:path";
import { modelDirName } from "@ic/protocol";
import type { ModelId, ModelRecord } from "@ic/protocol";
import type { StagedModel, Stager } from "./ports.ts";

export class LocalStager implements Stager {
  private inUse = new Set<ModelId>();

  constructor(
    private readonly storeRoot: string,
    private readonly cacheRoot: string,
  ) {}

  async stage(model: ModelRecord, signal: AbortSignal): Promise<StagedModel> {
    const dirName = modelDirName(model.model_id);
    const src = join(this.storeRoot, dirName);
    const dst = join(this.cacheRoot, dirName);
    await mkdir(dst, { recursive: true });
    for (const name of await readdir(src)) {
      signal.throwIfAborted();
      const from = join(src, name);
      const to = join(dst, name);
      const s = await stat(from);
      if (!s.isFile()) continue;
      const existing = await stat(to).catch(() => null);
      if (existing?.size === s.size) continue;
      try {
        await link(from, to);
      } catch {
        await copyFile(from, `${to}.part`);
        await rename(`${to}.part`, to);
      }
    }
    const now = new Date();
    await utimes(dst, now, now);
    return {
      dir: dst,
      modelPath: join(dst, model.file),
      mmprojPath: model.mmproj ? join(dst, model.mmproj) : undefined,
    };
  }

  setInUse(ids: readonly ModelId[]): void {
    this.inUse = new Set(ids);
  }
}
