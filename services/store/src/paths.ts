// Path rules for model directories and artifact files: every path is derived from a validated model id
// or manifest path and checked to stay inside its root, so no input can reach outside it.
import { lstat, mkdir, open, readdir, readFile, rename, rm } from "node:fs/promises";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { randomBytes } from "node:crypto";
import { artifactPathProblem, modelDirName, modelIdProblem, type ModelId } from "@ic/protocol";
import { ServiceError } from "@ic/protocol";

function inside(root: string, p: string): string {
  const r = resolve(root);
  const abs = resolve(p);
  if (abs !== r && !abs.startsWith(r + sep)) {
    throw new ServiceError("invalid_request", `path ${p} escapes ${root}`);
  }
  return abs;
}

/** `<root>/<org>--<name>`, after re-validating the id. */
export function modelDir(root: string, id: ModelId): string {
  const problem = modelIdProblem(id);
  if (problem) throw new ServiceError("invalid_request", `invalid model id ${id}: ${problem}`);
  return inside(root, join(root, modelDirName(id)));
}

/** Absolute path of a manifest file inside a model directory, after re-validating the path. */
export function artifactFile(dir: string, path: string): string {
  const problem = artifactPathProblem(path);
  if (problem)
    throw new ServiceError("invalid_request", `invalid artifact path ${path}: ${problem}`);
  const abs = inside(dir, join(dir, ...path.split("/")));
  if (abs === resolve(dir)) throw new ServiceError("invalid_request", "artifact path is empty");
  return abs;
}

/** The hidden partial beside a final file: `dir/sub/.name.part`. Artifact names never start with '.'. */
export function partFile(finalPath: string): string {
  return join(dirname(finalPath), `.${basename(finalPath)}.part`);
}

export interface TreeFile {
  /** Forward-slash path relative to the walked directory. */
  readonly path: string;
  readonly bytes: number;
  readonly nlink: number;
  readonly mtimeMs: number;
}

/** Every regular file below `dir` (symlinks are neither followed nor listed). */
export async function walkFiles(dir: string): Promise<TreeFile[]> {
  const out: TreeFile[] = [];
  async function walk(d: string): Promise<void> {
    let entries;
    try {
      entries = await readdir(d, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
      throw e;
    }
    for (const ent of entries) {
      const p = join(d, ent.name);
      if (ent.isDirectory()) await walk(p);
      else if (ent.isFile()) {
        let s;
        try {
          s = await lstat(p);
        } catch (e) {
          // Renamed or deleted since the listing (a record's temp file, a pass): not there.
          if ((e as NodeJS.ErrnoException).code === "ENOENT") continue;
          throw e;
        }
        out.push({
          path: relative(dir, p).split(sep).join("/"),
          bytes: s.size,
          nlink: s.nlink,
          mtimeMs: s.mtimeMs,
        });
      }
    }
  }
  await walk(dir);
  return out;
}

/** Writes JSON durably: temp file, fsync, rename over the target. */
export async function writeJsonAtomic(
  path: string,
  value: unknown,
  createDir = true,
): Promise<void> {
  if (createDir) await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${randomBytes(4).toString("hex")}.tmp`;
  const fh = await open(tmp, "w");
  try {
    await fh.writeFile(JSON.stringify(value, null, 2) + "\n");
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
}

/** Makes a directory disappear atomically (rename into a trash name), then removes it. */
export async function removeDirAtomic(root: string, dir: string): Promise<void> {
  const trash = join(root, `.deleting-${basename(dir)}-${randomBytes(4).toString("hex")}`);
  try {
    await rename(dir, trash);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
    throw e;
  }
  await rm(trash, { recursive: true, force: true });
}

/** A file's text, or undefined when it (or a directory on its path) is not there. */
export async function readTextIfPresent(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return undefined;
    throw e;
  }
}

export function isErrno(e: unknown, code: string): boolean {
  return typeof e === "object" && e !== null && (e as NodeJS.ErrnoException).code === code;
}
