// Models sent to the store over HTTP (`ic import ./model.gguf --as org/name`, or a folder): each
// file lands in a hidden upload area of store_path (`.uploads/<org>--<name>/`), so nothing sees a
// half-sent model; a commit moves the whole directory into the store at once (a rename on the same
// filesystem), where the store watch registers it as it registers a directory copied by hand.
//
// Invariants: a file is written to a `.part` beside its final name and renamed only once its bytes
// match the declared length; the store volume keeps its reserve (the file's bytes plus the headroom
// must be free before a byte is written); a model already in the store is never overwritten.
import { createWriteStream } from "node:fs";
import { mkdir, readdir, rename, rm, stat } from "node:fs/promises";
import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { artifactPathProblem, modelDirName, ServiceError, type ModelId } from "@ic/protocol";
import { noFitMessage } from "@ic/staging";
import type { Disk } from "../disk.ts";
import { artifactFile, isErrno, walkFiles } from "../paths.ts";

/** The hidden area under store_path where uploads wait for their commit. */
export const UPLOADS_DIR = ".uploads";

export interface UploadedFile {
  readonly path: string;
  readonly bytes: number;
  readonly sha256: string;
}

export interface UploadsOptions {
  readonly storePath: string;
  readonly disk: Disk;
  /** Free bytes store_path keeps (read at each upload). */
  readonly headroomBytes: () => number;
  /** Whether the model is already in the store (registered, or its directory exists). */
  readonly inStore: (modelId: ModelId) => boolean;
}

export class Uploads {
  constructor(private readonly o: UploadsOptions) {}

  private dir(modelId: ModelId): string {
    return join(this.o.storePath, UPLOADS_DIR, modelDirName(modelId));
  }

  private async storeHas(modelId: ModelId): Promise<boolean> {
    if (this.o.inStore(modelId)) return true;
    try {
      await stat(join(this.o.storePath, modelDirName(modelId)));
      return true;
    } catch (e) {
      if (isErrno(e, "ENOENT")) return false;
      throw e;
    }
  }

  /** Receives one file of `modelId`'s upload; `bytes` is the request's declared length. */
  async receive(
    modelId: ModelId,
    path: string,
    body: ReadableStream<Uint8Array> | null,
    bytes: number,
  ): Promise<UploadedFile> {
    const problem = artifactPathProblem(path);
    if (problem !== null) throw new ServiceError("invalid_request", `file path: ${problem}`);
    if (path.split("/").some((s) => s.startsWith(".")))
      throw new ServiceError("invalid_request", "file path: hidden files are not artifacts");
    if (!Number.isSafeInteger(bytes) || bytes < 0)
      throw new ServiceError(
        "invalid_request",
        "an upload needs its content-length (bytes of the file)",
      );
    if (!body && bytes > 0) throw new ServiceError("invalid_request", "the upload has no body");
    if (await this.storeHas(modelId))
      throw new ServiceError(
        "conflict",
        `${modelId} is already in the store; remove it first (DELETE /store/models/${modelId}) or import under another name`,
      );
    const space = await this.o.disk.space(this.o.storePath);
    const headroom = this.o.headroomBytes();
    if (space.freeBytes < bytes + headroom)
      throw new ServiceError(
        "conflict",
        noFitMessage({
          modelId,
          path: this.o.storePath,
          manifestBytes: bytes,
          requiredBytes: bytes,
          headroomBytes: headroom,
          freeBytes: space.freeBytes,
          reclaimableBytes: 0,
        }),
      );
    const final = artifactFile(this.dir(modelId), path);
    const part = `${final}.part`;
    await mkdir(dirname(final), { recursive: true });
    const hash = createHash("sha256");
    let seen = 0;
    const count = new Transform({
      transform(chunk: Buffer, _enc, done) {
        seen += chunk.length;
        if (seen > bytes) return done(new Error(`more than the declared ${bytes} bytes`));
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      const source = body
        ? Readable.fromWeb(body as WebReadableStream<Uint8Array>)
        : Readable.from([]);
      await pipeline(source, count, createWriteStream(part));
      if (seen !== bytes) throw new Error(`${seen} bytes arrived, ${bytes} were declared`);
    } catch (e) {
      await rm(part, { force: true });
      throw new ServiceError(
        "invalid_request",
        `upload of ${modelId}/${path} failed: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
    await rename(part, final);
    return { path, bytes, sha256: hash.digest("hex") };
  }

  /** Moves the uploaded files into the store; the store watch registers them once settled. */
  async commit(modelId: ModelId): Promise<{ files: { path: string; bytes: number }[] }> {
    const dir = this.dir(modelId);
    let files;
    try {
      files = (await walkFiles(dir)).filter((f) => !f.path.endsWith(".part"));
    } catch (e) {
      if (isErrno(e, "ENOENT"))
        throw new ServiceError("not_found", `no upload of ${modelId} to commit`);
      throw e;
    }
    if (!files.some((f) => f.path.endsWith(".gguf")))
      throw new ServiceError(
        "invalid_request",
        `the upload of ${modelId} has no .gguf file: nothing the engine could load`,
      );
    if (await this.storeHas(modelId))
      throw new ServiceError("conflict", `${modelId} is already in the store`);
    for (const f of await walkFiles(dir))
      if (f.path.endsWith(".part")) await rm(artifactFile(dir, f.path), { force: true });
    await rename(dir, join(this.o.storePath, modelDirName(modelId)));
    return { files: files.map((f) => ({ path: f.path, bytes: f.bytes })) };
  }

  /** Drops an upload that will not be committed. */
  async abort(modelId: ModelId): Promise<boolean> {
    const dir = this.dir(modelId);
    try {
      await readdir(dir);
    } catch (e) {
      if (isErrno(e, "ENOENT")) return false;
      throw e;
    }
    await rm(dir, { recursive: true, force: true });
    return true;
  }
}
