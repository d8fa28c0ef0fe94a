// The slab worker: digests equal node:crypto's over the prefix on disk plus every update in order, git
// blob ids for hub files, positional writes in order that stop at the first failure, and a thread
// that dies or a job that fails gives a typed error, not a hang.
import { describe, expect, it } from "vitest";
import { createHash, randomBytes } from "node:crypto";
import { open, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Worker } from "node:worker_threads";
import { SlabWorker, SlabWorkerError } from "./slab-worker.ts";
import { tempDir } from "../test-support.ts";
import { MiB } from "@ic/protocol";

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest("hex");
};

/** `data` copied into shared memory, as the transfer's slabs are. */
function shared(data: Uint8Array): Buffer {
  const b = Buffer.from(new SharedArrayBuffer(data.length));
  b.set(data);
  return b;
}

/** The next worker thread this process starts. */
function nextThread(): Promise<Worker> {
  return new Promise((resolve) => process.once("worker", resolve));
}

describe("slab worker: hashing", () => {
  it("digests updates in the order they were posted", async () => {
    await using hasher = new SlabWorker();
    const parts = [randomBytes(3 * MiB + 1), randomBytes(17), randomBytes(MiB)];
    const job = hasher.begin({ prefixBytes: 0 });
    await Promise.all(parts.map((p) => job.update(shared(p))));
    expect((await job.digest()).sha256).toBe(sha256(...parts));
  });

  it("starts from the prefix of a partial on disk, so a resume verifies the whole file", async () => {
    await using dir = await tempDir("hash");
    await using hasher = new SlabWorker();
    const head = randomBytes(9 * MiB + 3); // more than one read of the worker
    const tail = randomBytes(MiB);
    const part = join(dir.path, ".f.part");
    await writeFile(part, Buffer.concat([head, randomBytes(100)])); // bytes past the prefix are ignored
    const job = hasher.begin({ prefixPath: part, prefixBytes: head.length });
    await job.update(shared(tail));
    expect((await job.digest()).sha256).toBe(sha256(head, tail));
  });

  it("computes the git blob id of a hub file stored in git", async () => {
    await using hasher = new SlabWorker();
    const data = Buffer.from('{"a":1}\n');
    const job = hasher.begin({ prefixBytes: 0, gitBlobBytes: data.length });
    await job.update(shared(data));
    const gitOid = createHash("sha1").update(`blob ${data.length}\0`).update(data).digest("hex");
    expect(await job.digest()).toEqual({ sha256: sha256(data), gitOid });
  });

  it("runs several jobs at once without mixing their bytes", async () => {
    await using hasher = new SlabWorker();
    const a = randomBytes(MiB);
    const b = randomBytes(MiB);
    const ja = hasher.begin({ prefixBytes: 0 });
    const jb = hasher.begin({ prefixBytes: 0 });
    await Promise.all([ja.update(shared(a)), jb.update(shared(b)), ja.update(shared(b))]);
    expect((await ja.digest()).sha256).toBe(sha256(a, b));
    expect((await jb.digest()).sha256).toBe(sha256(b));
  });

  it("reports a prefix it cannot read through the job's next call, typed", async () => {
    await using dir = await tempDir("hash");
    await using hasher = new SlabWorker();
    const part = join(dir.path, ".short.part");
    await writeFile(part, randomBytes(10));
    const job = hasher.begin({ prefixPath: part, prefixBytes: 20 });
    const err = await job.update(shared(randomBytes(4))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlabWorkerError);
    expect(err).toMatchObject({ code: "failed", retryable: true });
    await expect(job.digest()).rejects.toMatchObject({ code: "failed" });
    // The thread itself is fine.
    const ok = hasher.begin({ prefixBytes: 0 });
    expect((await ok.digest()).sha256).toBe(sha256());
  });

  it("fails pending and later calls of a job whose thread died, then starts a new thread", async () => {
    await using hasher = new SlabWorker();
    const thread = nextThread();
    const job = hasher.begin({ prefixBytes: 0 });
    const big = shared(randomBytes(64 * MiB));
    const pending = job.update(big).catch((e: unknown) => e);
    await (await thread).terminate();
    const err = await pending;
    // Either the update was still pending when the thread went, or it had been answered just before.
    if (err !== undefined) expect(err).toMatchObject({ name: "SlabWorkerError", code: "exited" });
    await expect(job.update(shared(randomBytes(4)))).rejects.toMatchObject({ code: "exited" });
    await expect(job.digest()).rejects.toMatchObject({ code: "exited" });
    const again = hasher.begin({ prefixBytes: 0 });
    await again.update(shared(Buffer.from("x")));
    expect((await again.digest()).sha256).toBe(sha256(Buffer.from("x")));
  });

  it("refuses memory that is not shared, and every call after stop()", async () => {
    const hasher = new SlabWorker();
    const job = hasher.begin({ prefixBytes: 0 });
    await expect(job.update(Buffer.from("not shared"))).rejects.toBeInstanceOf(TypeError);
    await hasher.stop();
    await expect(job.digest()).rejects.toMatchObject({ code: "stopped" });
    expect(() => hasher.begin({ prefixBytes: 0 })).toThrow(SlabWorkerError);
    await hasher.stop();
  });
});

describe("slab worker: writing", () => {
  it("writes slabs at their positions, in the order they were posted", async () => {
    await using dir = await tempDir("write");
    await using writer = new SlabWorker();
    const path = join(dir.path, "f.bin");
    const fh = await open(path, "w");
    const a = randomBytes(3 * MiB + 5); // several write pieces
    const b = randomBytes(1000);
    const job = writer.openWrites(fh.fd);
    await Promise.all([job.write(shared(a), 0), job.write(shared(b), a.length)]);
    job.end();
    await fh.close();
    expect((await readFile(path)).equals(Buffer.concat([a, b]))).toBe(true);
  });

  it("fails every write after a failed one, so the file never gets bytes after a hole", async () => {
    await using dir = await tempDir("write");
    await using writer = new SlabWorker();
    const path = join(dir.path, "f.bin");
    await writeFile(path, "");
    const fh = await open(path, "r"); // writes fail with EBADF
    const job = writer.openWrites(fh.fd);
    const first = job.write(shared(randomBytes(10)), 0);
    const second = job.write(shared(randomBytes(10)), 10);
    await expect(first).rejects.toMatchObject({ name: "SlabWorkerError", code: "failed" });
    await expect(second).rejects.toThrow(/write at byte 0 failed/);
    job.end();
    await fh.close();
  });
});
