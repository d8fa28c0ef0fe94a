// Transfer work off the event loop: a worker thread hashes (sha256, and the git blob id of hub files
// kept in git) or writes the slabs a transfer shares with it, so the event loop only receives.
//
// Invariants: a job's calls run in the order they were posted (one message queue), so updates are
// hashed and writes land in file order; a resumed partial's prefix is read and hashed by the worker
// before any update of the same job; a write job that failed fails every later write, so the file
// never gets bytes after a hole; when the thread dies every pending and later call of its jobs fails
// with a SlabWorkerError (never a hang) and the next job starts a fresh thread; the thread keeps the
// process alive only while a call is pending.
import { isSharedArrayBuffer } from "node:util/types";
import { Worker } from "node:worker_threads";
import { availableParallelism } from "node:os";

export const SLAB_WORKER_ERROR_CODES = ["exited", "failed", "stopped"] as const;
export type SlabWorkerErrorCode = (typeof SLAB_WORKER_ERROR_CODES)[number];

/**
 * exited: the thread died (its jobs are lost; a new job starts a new thread); failed: the job itself
 * failed (a prefix that cannot be read, a write error); stopped: the worker was stopped. All are
 * retryable: the bytes on disk form a prefix the next attempt hashes again.
 */
export class SlabWorkerError extends Error {
  readonly retryable = true;
  constructor(
    readonly code: SlabWorkerErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options);
    this.name = "SlabWorkerError";
  }
}

export interface HashStart {
  /** The file whose first `prefixBytes` bytes the digest starts with (a partial being resumed). */
  readonly prefixPath?: string | undefined;
  readonly prefixBytes: number;
  /** Also computes the git blob id (sha1 of `blob <size>\0<content>`) of a file of this size. */
  readonly gitBlobBytes?: number | undefined;
}

export interface Digests {
  readonly sha256: string;
  readonly gitOid?: string | undefined;
}

export interface HashJob {
  /**
   * Hashes `view`, which must be backed by a SharedArrayBuffer; resolves once it is hashed, and the
   * caller must not change those bytes before.
   */
  update(view: Uint8Array): Promise<void>;
  /** The digests of the prefix and every update; ends the job. */
  digest(): Promise<Digests>;
  /** Forgets the job (abort, restart from byte 0); never rejects. */
  drop(): void;
}

export interface WriteJob {
  /**
   * Writes `view` (backed by a SharedArrayBuffer) at `position` of the job's file; resolves once all
   * of it is written, and the caller must not change those bytes before.
   */
  write(view: Uint8Array, position: number): Promise<void>;
  /** Forgets the job; never rejects. The caller closes the file after its last write settled. */
  end(): void;
}

type Reply = { seq: number; ok: true; sha256?: string; gitOid?: string } | ErrorReply;
type ErrorReply = { seq: number; ok: false; error: string };

interface Pending {
  resolve(r: Reply & { ok: true }): void;
  reject(e: SlabWorkerError): void;
}

/** Hash input read from a file per read call (the prefix of a resumed partial). */
const PREFIX_READ_BYTES = 8 * 1024 * 1024;
/**
 * Bytes per write call. The kernel sizes page-cache folios by the write's length: on the benchmark VM
 * writes of 256 KiB and more (large folios) cost two to five times the system time per byte of 64 KiB
 * writes, which match what curl's small writes cost; 64 KiB pieces keep the syscall count low too.
 */
export const WRITE_PIECE_BYTES = 64 * 1024;

// Plain CommonJS so it runs the same under tsx, vitest and node (no TypeScript in a worker). A job
// that failed keeps its error, so its later calls report that error.
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const fs = require("node:fs");
const READ = ${PREFIX_READ_BYTES};
const PIECE = ${WRITE_PIECE_BYTES};
const jobs = new Map();
function text(e) { return String((e && e.message) || e); }
function hashPrefix(job, path, bytes) {
  const fd = fs.openSync(path, "r");
  try {
    const buf = Buffer.allocUnsafe(Math.min(READ, bytes));
    let pos = 0;
    while (pos < bytes) {
      const n = fs.readSync(fd, buf, 0, Math.min(buf.length, bytes - pos), pos);
      if (n === 0) throw new Error(path + " has fewer than " + bytes + " bytes");
      const v = buf.subarray(0, n);
      job.sha.update(v);
      if (job.git) job.git.update(v);
      pos += n;
    }
  } finally {
    fs.closeSync(fd);
  }
}
function writeAll(fd, v, position) {
  let done = 0;
  while (done < v.length) {
    const n = fs.writeSync(fd, v, done, Math.min(PIECE, v.length - done), position + done);
    if (n === 0) throw new Error("write at byte " + (position + done) + " wrote nothing");
    done += n;
  }
}
parentPort.on("message", (m) => {
  try {
    let out = {};
    if (m.op === "begin") {
      const git = m.gitBlobBytes === undefined ? null : createHash("sha1").update("blob " + m.gitBlobBytes + "\\0");
      const job = { sha: createHash("sha256"), git, error: null };
      jobs.set(m.job, job);
      try {
        if (m.prefixBytes > 0) hashPrefix(job, m.prefixPath, m.prefixBytes);
      } catch (e) {
        job.error = "cannot hash the first " + m.prefixBytes + " bytes of " + m.prefixPath + ": " + text(e);
        throw new Error(job.error);
      }
    } else if (m.op === "open") {
      jobs.set(m.job, { fd: m.fd, error: null });
    } else if (m.op === "hash") {
      out = { sha256: createHash("sha256").update(new Uint8Array(m.buffer, m.offset, m.length)).digest("hex") };
    } else if (m.op === "hashRange") {
      const h = createHash("sha256");
      const fd = fs.openSync(m.path, "r");
      try {
        const buf = Buffer.allocUnsafe(Math.min(READ, Math.max(1, m.length)));
        for (let pos = 0; pos < m.length; ) {
          const n = fs.readSync(fd, buf, 0, Math.min(buf.length, m.length - pos), m.start + pos);
          if (n === 0) throw new Error(m.path + " ends before byte " + (m.start + m.length));
          h.update(buf.subarray(0, n));
          pos += n;
        }
      } finally {
        fs.closeSync(fd);
      }
      out = { sha256: h.digest("hex") };
    } else if (m.op === "drop") {
      jobs.delete(m.job);
    } else {
      const job = jobs.get(m.job);
      if (!job) throw new Error("unknown job " + m.job);
      if (m.op === "digest") jobs.delete(m.job);
      if (job.error) throw new Error(job.error);
      const v = m.buffer ? new Uint8Array(m.buffer, m.offset, m.length) : null;
      if (m.op === "update") {
        job.sha.update(v);
        if (job.git) job.git.update(v);
      } else if (m.op === "write") {
        try {
          writeAll(job.fd, v, m.position);
        } catch (e) {
          job.error = "write at byte " + m.position + " failed: " + text(e);
          throw new Error(job.error);
        }
      } else if (m.op === "digest") {
        out = { sha256: job.sha.digest("hex"), gitOid: job.git ? job.git.digest("hex") : undefined };
      } else {
        throw new Error("unknown op " + m.op);
      }
    }
    parentPort.postMessage({ seq: m.seq, ok: true, ...out });
  } catch (e) {
    parentPort.postMessage({ seq: m.seq, ok: false, error: text(e) });
  }
});
`;

/** One worker thread shared by any number of jobs; started on the first job, restarted after a death. */
export class SlabWorker implements AsyncDisposable {
  private worker: Worker | undefined;
  private seq = 0;
  private jobIds = 0;
  private readonly pending = new Map<number, Pending>();
  private state: "idle" | "running" | "stopped" = "idle";

  constructor(private readonly name = "ic-store-slabs") {}

  /** Starts a hash job; its prefix is hashed in the worker while the caller goes on. */
  begin(start: HashStart): HashJob {
    const { call, drop } = this.job({
      op: "begin",
      prefixPath: start.prefixPath,
      prefixBytes: start.prefixBytes,
      gitBlobBytes: start.gitBlobBytes,
    });
    let ended = false;
    return {
      update: async (view) => {
        await call({ op: "update", ...shared(view) });
      },
      digest: async () => {
        ended = true;
        const r = await call({ op: "digest" });
        return { sha256: r.sha256 ?? "", gitOid: r.gitOid };
      },
      drop: () => {
        if (ended) return;
        ended = true;
        drop();
      },
    };
  }

  /** Starts a write job on an open file descriptor (the caller keeps it open until the job ends). */
  openWrites(fd: number): WriteJob {
    const { call, drop } = this.job({ op: "open", fd });
    return {
      write: async (view, position) => {
        await call({ op: "write", ...shared(view), position });
      },
      end: drop,
    };
  }

  /** The sha256 of `view` (backed by a SharedArrayBuffer), hashed in one call on the thread. */
  async hash(view: Uint8Array): Promise<string> {
    return (await this.call(this.ensureWorker(), { op: "hash", ...shared(view) })).sha256 ?? "";
  }

  /** The sha256 of bytes [start, start + length) of a file, read and hashed on the thread. */
  async hashRange(path: string, start: number, length: number): Promise<string> {
    return (
      (await this.call(this.ensureWorker(), { op: "hashRange", path, start, length })).sha256 ?? ""
    );
  }

  /** Ends the thread; pending calls fail with `stopped`. Idempotent. */
  async stop(): Promise<void> {
    if (this.state === "stopped") return;
    this.state = "stopped";
    const w = this.worker;
    this.lose(w, new SlabWorkerError("stopped", "slab worker stopped"));
    await w?.terminate();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Posts a job's first message; its later calls go to the same thread, or fail once it is gone. */
  private job(first: Record<string, unknown>) {
    const w = this.ensureWorker();
    const job = ++this.jobIds;
    const call = (msg: Record<string, unknown>) => {
      if (this.worker !== w) return Promise.reject(this.lostError());
      return this.call(w, { ...msg, job });
    };
    // A failure of the first message (a prefix that cannot be read) surfaces through the next call.
    call(first).catch(() => undefined);
    return { call, drop: () => void call({ op: "drop" }).catch(() => undefined) };
  }

  private ensureWorker(): Worker {
    if (this.state === "stopped") throw new SlabWorkerError("stopped", "slab worker stopped");
    if (this.worker) return this.worker;
    this.state = "running";
    const w = new Worker(WORKER_SOURCE, { eval: true, name: this.name });
    w.unref();
    w.on("message", (r: Reply) => {
      const p = this.pending.get(r.seq);
      if (!p) return;
      this.pending.delete(r.seq);
      this.refIfBusy(w);
      if (r.ok) p.resolve(r);
      else p.reject(new SlabWorkerError("failed", r.error));
    });
    w.on("error", (e) =>
      this.lose(
        w,
        new SlabWorkerError("exited", `${this.name} failed: ${e.message}`, { cause: e }),
      ),
    );
    w.on("exit", (code) =>
      this.lose(w, new SlabWorkerError("exited", `${this.name} exited with code ${code}`)),
    );
    this.worker = w;
    return w;
  }

  private call(w: Worker, msg: Record<string, unknown>): Promise<Reply & { ok: true }> {
    const seq = ++this.seq;
    return new Promise((resolve, reject) => {
      this.pending.set(seq, { resolve, reject });
      this.refIfBusy(w);
      w.postMessage({ ...msg, seq });
    });
  }

  /** Holds the process open only while the worker owes an answer. */
  private refIfBusy(w: Worker): void {
    if (this.pending.size > 0) w.ref();
    else w.unref();
  }

  private lostError(): SlabWorkerError {
    return this.state === "stopped"
      ? new SlabWorkerError("stopped", "slab worker stopped")
      : new SlabWorkerError("exited", `the ${this.name} thread running this job is gone`);
  }

  /** Thread `w` is gone: everything it owed fails with `error`; the next job starts a new thread. */
  private lose(w: Worker | undefined, error: SlabWorkerError): void {
    if (w === undefined || this.worker !== w) return;
    this.worker = undefined;
    for (const [seq, p] of this.pending) {
      this.pending.delete(seq);
      p.reject(error);
    }
  }
}

/** A view's place in its SharedArrayBuffer, for a message (the memory is shared, not copied). */
function shared(view: Uint8Array): { buffer: SharedArrayBuffer; offset: number; length: number } {
  if (!isSharedArrayBuffer(view.buffer)) {
    throw new TypeError("slab worker calls need memory backed by a SharedArrayBuffer");
  }
  return { buffer: view.buffer, offset: view.byteOffset, length: view.byteLength };
}

let hashing: SlabWorker | undefined;
let writing: SlabWorker | undefined;

/** The process-wide hashing thread transfers use unless given one; started on first use. */
export function sharedHashWorker(): SlabWorker {
  hashing ??= new SlabWorker("ic-store-hash");
  return hashing;
}

/** Threads a process hashes pieces on at most, and at least (pieces are verified in parallel). */
const PIECE_HASHERS_MAX = 4;
const PIECE_HASHERS_MIN = 2;

let pieceHashers: SlabWorker[] | undefined;
let nextHasher = 0;

/**
 * One of the process-wide threads that verify pieces (as many as the machine has cores, from 2 to 4),
 * taken in turn, so the pieces of a transfer are hashed on several cores at once.
 */
export function pieceHasher(): SlabWorker {
  pieceHashers ??= Array.from(
    {
      length: Math.min(PIECE_HASHERS_MAX, Math.max(PIECE_HASHERS_MIN, availableParallelism())),
    },
    (_, i) => new SlabWorker(`ic-store-piece-hash-${i}`),
  );
  nextHasher = (nextHasher + 1) % pieceHashers.length;
  return pieceHashers[nextHasher]!;
}

/** The process-wide writing thread, separate so that hashing and writing of slabs overlap. */
export function sharedWriteWorker(): SlabWorker {
  writing ??= new SlabWorker("ic-store-write");
  return writing;
}
