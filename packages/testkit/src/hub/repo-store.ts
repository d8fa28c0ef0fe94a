// Repositories of the hub emulator: metadata in memory, file contents content-addressed on disk.
// Every object is stored once under its sha256, so LFS uploads and seeded files share one store.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { Transform } from "node:stream";
import type { Readable } from "node:stream";
import { parseCardData } from "./front-matter.ts";
import type { CardData } from "./front-matter.ts";

/** Where a seeded file's bytes come from: text, bytes, or a file on disk (streamed, never loaded). */
export type HubFileSource = string | Uint8Array | { readonly fromPath: string };

export interface StoredFile {
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
  /** Git blob id: of the content for regular files, of the LFS pointer for LFS files. */
  readonly gitOid: string;
  readonly lfs: boolean;
}

/**
 * Content in the object store: its sha256, its size, and the git blob id of the content ("" when
 * not computed: content larger than LFS_MIN_SIZE, or an LFS upload).
 */
export interface StoredObject {
  readonly sha256: string;
  readonly size: number;
  readonly gitContentSha1: string;
}

export interface StoredRepo {
  readonly id: string;
  readonly createdAt: Date;
  private: boolean;
  commit: string;
  lastModified: Date;
  files: Map<string, StoredFile>;
  /** Overrides the card data parsed from README.md when set. */
  cardDataOverride: CardData | null;
  commits: { oid: string; title: string; date: Date }[];
}

/** Extensions the hub's default .gitattributes stores with LFS, plus HF's 10 MB rule. */
const LFS_EXTENSIONS = [
  ".safetensors",
  ".gguf",
  ".bin",
  ".pt",
  ".pth",
  ".ckpt",
  ".onnx",
  ".h5",
  ".msgpack",
  ".npz",
  ".npy",
  ".zip",
  ".tar",
  ".gz",
  ".zst",
  ".parquet",
  ".arrow",
];
const LFS_MIN_SIZE = 10 * 1024 * 1024;

export function isLfsPath(path: string, size: number): boolean {
  return size >= LFS_MIN_SIZE || LFS_EXTENSIONS.some((e) => path.toLowerCase().endsWith(e));
}

export function lfsPointer(sha256: string, size: number): string {
  return `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256}\nsize ${size}\n`;
}

function gitBlobOid(content: Uint8Array | string): string {
  const buf = typeof content === "string" ? Buffer.from(content) : content;
  return createHash("sha1").update(`blob ${buf.byteLength}\0`).update(buf).digest("hex");
}

export function newCommitOid(): string {
  return randomBytes(20).toString("hex");
}

export class RepoStore {
  readonly repos = new Map<string, StoredRepo>();
  private readonly objectsDir: string;
  private readonly tmpDir: string;

  constructor(readonly root: string) {
    this.objectsDir = join(root, "objects");
    this.tmpDir = join(root, "tmp");
  }

  async init(): Promise<void> {
    await mkdir(this.objectsDir, { recursive: true });
    await mkdir(this.tmpDir, { recursive: true });
  }

  objectPath(sha256: string): string {
    return join(this.objectsDir, sha256);
  }

  async hasObject(sha256: string, size: number): Promise<boolean> {
    try {
      return (await stat(this.objectPath(sha256))).size === size;
    } catch {
      return false;
    }
  }

  /** Streams bytes into the object store; returns the sha256, size and git blob id of the content. */
  async putStream(source: Readable | AsyncIterable<Uint8Array>): Promise<StoredObject> {
    const tmp = join(this.tmpDir, randomBytes(8).toString("hex"));
    const sha = createHash("sha256");
    const chunks: Buffer[] = [];
    let size = 0;
    const tap = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        sha.update(chunk);
        size += chunk.length;
        // Git blob ids need the size up front; keep small files to hash them afterwards.
        if (size <= LFS_MIN_SIZE) chunks.push(chunk);
        cb(null, chunk);
      },
    });
    await pipeline(source, tap, createWriteStream(tmp));
    const sha256 = sha.digest("hex");
    const gitContentSha1 = size <= LFS_MIN_SIZE ? gitBlobOid(Buffer.concat(chunks)) : "";
    await rename(tmp, this.objectPath(sha256));
    return { sha256, size, gitContentSha1 };
  }

  async putSource(src: HubFileSource): Promise<StoredObject> {
    if (typeof src === "string" || src instanceof Uint8Array) {
      const buf =
        typeof src === "string"
          ? Buffer.from(src)
          : Buffer.from(src.buffer, src.byteOffset, src.byteLength);
      return this.putStream(
        (async function* () {
          yield buf;
        })(),
      );
    }
    return this.putStream(createReadStream(src.fromPath));
  }

  fileRecord(
    path: string,
    { sha256, size, gitContentSha1 }: StoredObject,
    forceLfs = false,
  ): StoredFile {
    const lfs = forceLfs || isLfsPath(path, size);
    return {
      path,
      size,
      sha256,
      lfs,
      gitOid: lfs ? gitBlobOid(lfsPointer(sha256, size)) : gitContentSha1,
    };
  }

  createRepo(id: string, isPrivate: boolean): StoredRepo {
    const now = new Date();
    const repo: StoredRepo = {
      id,
      createdAt: now,
      private: isPrivate,
      commit: newCommitOid(),
      lastModified: now,
      files: new Map(),
      cardDataOverride: null,
      commits: [],
    };
    repo.commits.push({ oid: repo.commit, title: "initial commit", date: now });
    this.repos.set(id.toLowerCase(), repo);
    return repo;
  }

  /** Removes a repo (its objects stay: other repos may share them, as on the hub). */
  deleteRepo(id: string): boolean {
    return this.repos.delete(id.toLowerCase());
  }

  get(id: string): StoredRepo | undefined {
    return this.repos.get(id.toLowerCase());
  }

  async readText(repo: StoredRepo, path: string): Promise<string | null> {
    const f = repo.files.get(path);
    if (!f) return null;
    return readFile(this.objectPath(f.sha256), "utf8");
  }

  async cardData(repo: StoredRepo): Promise<CardData | null> {
    if (repo.cardDataOverride) return repo.cardDataOverride;
    const readme = await this.readText(repo, "README.md");
    return readme === null ? null : parseCardData(readme);
  }

  async config(repo: StoredRepo): Promise<Record<string, unknown> | null> {
    const text = await this.readText(repo, "config.json");
    if (text === null) return null;
    try {
      const v: unknown = JSON.parse(text);
      return v && typeof v === "object" && !Array.isArray(v)
        ? (v as Record<string, unknown>)
        : null;
    } catch {
      return null;
    }
  }

  async destroy(): Promise<void> {
    await rm(this.root, { recursive: true, force: true });
  }
}
