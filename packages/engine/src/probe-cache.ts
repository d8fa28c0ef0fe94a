// The engine probes' verdicts, cached per engine build in one JSON file per probe under the engine
// cache (a key names the binaries by path, size and mtime), so a build is probed once per machine.
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** The verdict cached under `key` in `dir/file`, when there is one that `valid` accepts. */
export async function readProbeCache<T>(
  dir: string,
  file: string,
  key: string,
  valid: (v: unknown) => v is T,
): Promise<T | undefined> {
  try {
    const doc = JSON.parse(await readFile(join(dir, file), "utf8")) as Record<string, unknown>;
    const v = doc[key];
    return valid(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Caches `value` under `key` in `dir/file` (written whole, then renamed); never throws. */
export async function writeProbeCache(
  dir: string,
  file: string,
  key: string,
  value: unknown,
): Promise<void> {
  try {
    await mkdir(dir, { recursive: true });
    let doc: Record<string, unknown> = {};
    try {
      doc = JSON.parse(await readFile(join(dir, file), "utf8")) as Record<string, unknown>;
    } catch {
      doc = {};
    }
    doc[key] = value;
    const tmp = join(dir, `${file}.${process.pid}.tmp`);
    await writeFile(tmp, `${JSON.stringify(doc, null, 2)}\n`);
    await rename(tmp, join(dir, file));
  } catch {
    // A cache that cannot be written only costs a probe at the next start.
  }
}
