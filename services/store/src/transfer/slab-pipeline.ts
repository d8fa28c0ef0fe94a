// The write side of a transfer: received bytes go into a few large shared slabs; each full slab is
// handed at once to the hash worker and to the write worker, which work on it in parallel.
//
// Invariants: hash updates and writes are posted in file order, and each worker runs them in order,
// so the partial always holds a prefix of what was received and the digest covers exactly it; a slab
// is reused only after both its write and its hash finished; at most SLABS slabs exist per transfer;
// the first failure (write, hash, write-behind datasync) is kept and stops the caller at its next
// chunk, while every write already posted still settles before finish() returns.
import type { FileHandle } from "node:fs/promises";
import type { HashJob, WriteJob } from "./slab-worker.ts";

/** Size of one slab: the unit of a write and of a hash update. */
export const SLAB_BYTES = 8 * 1024 * 1024;
/** Slabs per transfer: one being filled, the others being written and hashed. */
const SLABS = 4;
/** A slab that has waited this long is written even if not full (slow links, a timely partial). */
const FLUSH_AFTER_MS = 250;
/**
 * After this many bytes written, a datasync starts in the background (never awaited by the receive
 * loop, one at a time), so the disk writes back while the network still sends and the final fsync
 * only has the tail left to flush.
 */
export const WRITE_BEHIND_BYTES = 16 * 1024 * 1024;

export class SlabPipeline {
  /** Bytes taken so far. */
  received = 0;
  /** The first failure of a write, a hash update or a datasync. */
  broken: { readonly error: unknown } | undefined;
  private readonly slabBytes: number;
  private readonly free: Buffer[] = [];
  private allocated = 0;
  /** Slabs handed to a write and a hash, oldest first; each settles when both are done. */
  private readonly inflight: Promise<void>[] = [];
  private slab: Buffer | undefined;
  /** A push still waiting for a slab. */
  private pushing: Promise<void> | undefined;
  private filled = 0;
  private since = 0;
  private pos: number;
  private unsynced = 0;
  private syncing: Promise<void> | undefined;

  constructor(
    private readonly o: {
      /** The partial, for the write-behind datasync. */
      readonly fh: FileHandle;
      /** The write worker's job on the same file. */
      readonly writer: WriteJob;
      /** File offset of the first byte taken. */
      readonly at: number;
      /** Bytes the caller expects at most; each slab is no larger. */
      readonly expectBytes: number;
      readonly job: HashJob;
      readonly onBytes?: ((delta: number) => void) | undefined;
    },
  ) {
    this.pos = o.at;
    this.slabBytes = Math.max(1, Math.min(SLAB_BYTES, o.expectBytes));
  }

  /**
   * Takes all of `chunk`. Returns a promise when it had to wait for a free slab: the caller must not
   * push again before it settles (it rejects with the pipeline's failure). Throws that failure when
   * the pipeline already broke.
   */
  push(chunk: Uint8Array): Promise<void> | undefined {
    if (this.broken) throw this.broken.error;
    let off = 0;
    while (off < chunk.length) {
      if (!this.slab) {
        const b = this.take();
        if (!b) {
          const later = this.pushLater(chunk, off);
          this.pushing = later;
          return later;
        }
        this.slab = b;
        this.since = performance.now();
      }
      off += this.copy(chunk, off);
    }
    if (this.filled > 0 && performance.now() - this.since >= FLUSH_AFTER_MS) this.flush();
    return undefined;
  }

  /** The free part of the current slab, for a source that reads into it; undefined while every slab is busy. */
  space(): Uint8Array | undefined {
    if (this.broken) throw this.broken.error;
    if (!this.slab) {
      this.slab = this.take();
      if (!this.slab) return undefined;
      this.since = performance.now();
    }
    return this.slab.subarray(this.filled);
  }

  /** Takes `n` bytes a source wrote at the start of the region `space()` returned last. */
  commit(n: number): void {
    const slab = this.slab;
    if (!slab || this.filled + n > slab.length) throw new Error("commit beyond the offered region");
    this.filled += n;
    this.received += n;
    this.o.onBytes?.(n);
    if (this.filled === slab.length || performance.now() - this.since >= FLUSH_AFTER_MS)
      this.flush();
  }

  /** Settles once `space()` can offer a region again; rejects with the failure when the pipeline broke. */
  async ready(): Promise<void> {
    while (!this.slab && this.free.length === 0 && this.allocated >= SLABS && !this.broken) {
      const oldest = this.inflight.shift();
      if (!oldest) break;
      await oldest;
    }
    if (this.broken) throw this.broken.error;
  }

  /**
   * Waits for a push still copying, writes what is buffered, then waits for every write, hash and
   * datasync; throws the first failure.
   */
  async finish(): Promise<void> {
    await this.pushing?.catch(() => undefined);
    this.flush();
    await Promise.all(this.inflight);
    await this.syncing?.catch(() => undefined);
    if (this.broken) throw this.broken.error;
  }

  private async pushLater(chunk: Uint8Array, off: number): Promise<void> {
    while (off < chunk.length) {
      if (!this.slab) {
        this.slab = await this.acquire();
        this.since = performance.now();
      }
      off += this.copy(chunk, off);
    }
  }

  /** Copies as much of chunk[off..] as fits in the current slab; flushes it when full. */
  private copy(chunk: Uint8Array, off: number): number {
    const slab = this.slab!;
    const n = Math.min(chunk.length - off, slab.length - this.filled);
    slab.set(n === chunk.length ? chunk : chunk.subarray(off, off + n), this.filled);
    this.filled += n;
    this.received += n;
    this.o.onBytes?.(n);
    if (this.filled === slab.length) this.flush();
    return n;
  }

  private take(): Buffer | undefined {
    const b = this.free.pop();
    if (b) return b;
    if (this.allocated >= SLABS) return undefined;
    this.allocated++;
    return Buffer.from(new SharedArrayBuffer(this.slabBytes));
  }

  private async acquire(): Promise<Buffer> {
    for (;;) {
      if (this.broken) throw this.broken.error;
      const b = this.take();
      if (b) return b;
      const oldest = this.inflight.shift();
      if (!oldest) throw new Error("no slab in flight to wait for");
      await oldest;
    }
  }

  private flush(): void {
    const buf = this.slab;
    if (!buf || this.filled === 0) return;
    const view = buf.subarray(0, this.filled);
    const at = this.pos;
    this.pos += this.filled;
    this.slab = undefined;
    this.filled = 0;
    const fail = (error: unknown) => {
      this.broken ??= { error };
    };
    const hash = this.o.job.update(view);
    const write = this.o.writer.write(view, at).then(() => this.writeBehind(view.length));
    // The caller learns of a failure at once; the slab settles only when both are done, so a failed
    // hash never leaves its write running.
    hash.catch(fail);
    write.catch(fail);
    this.inflight.push(
      Promise.allSettled([hash, write]).then(([h, w]) => {
        if (h.status === "fulfilled" && w.status === "fulfilled") this.free.push(buf);
      }),
    );
  }

  private writeBehind(n: number): void {
    this.unsynced += n;
    if (this.unsynced < WRITE_BEHIND_BYTES || this.syncing) return;
    this.unsynced = 0;
    const p = this.o.fh.datasync().finally(() => {
      if (this.syncing === p) this.syncing = undefined;
    });
    p.catch((error: unknown) => {
      this.broken ??= { error };
    });
    this.syncing = p;
  }
}
