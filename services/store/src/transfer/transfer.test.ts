// One file's transfer against scripted sources (web streams, and a scripted HTTP server read by the
// direct client): multi-slab files verified and renamed, a corrupted byte caught, resume hashing the prefix on disk, every received byte kept on errors and aborts, and
// a hash worker that dies mid-transfer turning into a retryable TransferError instead of a hang.
import { afterEach, describe, expect, it } from "vitest";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { once } from "node:events";
import type { Worker } from "node:worker_threads";
import { directGet } from "./direct-get.ts";
import { SlabWorker, SlabWorkerError } from "./slab-worker.ts";
import { tempDir } from "../test-support.ts";
import { SLAB_BYTES } from "./slab-pipeline.ts";
import { TransferError, transferFile, type OpenAt } from "./transfer.ts";
import { MiB } from "@ic/protocol";

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

type Kind = "web" | "direct";

interface Script {
  /** Chunk size the source sends (a socket's 64 KiB by default). */
  chunk?: number;
  /** Honour Range requests (default) or always send the whole file. */
  ranges?: boolean;
  /** Break the connection once this many bytes were sent in this response. */
  failAfter?: number;
  /** Stop sending after this many bytes until `release()` is called. */
  stallAfter?: number;
  /** Pause before each chunk (a slow but steady source). */
  pauseMs?: number;
  /** Bytes sent instead of the file's (corruption on the wire, oversize answers). */
  body?: Buffer;
}

const servers = new Set<{ server: Server; conns: Set<Socket> }>();
afterEach(async () => {
  for (const { server, conns } of servers) {
    for (const c of conns) c.destroy();
    await new Promise((r) => server.close(r));
  }
  servers.clear();
});

/** A scripted HTTP server answering each request with `respond`; closed after the test. */
async function scriptedServer(respond: (socket: Socket) => Promise<void>): Promise<URL> {
  const conns = new Set<Socket>();
  const server = createServer((socket) => {
    conns.add(socket);
    socket.on("close", () => conns.delete(socket));
    socket.on("error", () => undefined);
    socket.once("data", () => {
      respond(socket).catch(() => socket.destroy());
    });
  });
  servers.add({ server, conns });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/f`);
}

/**
 * A scripted source: serves `data` from the requested offset in chunks, as a web stream (fetch, the
 * hub) or over a scripted HTTP server read by the direct client (store files).
 */
function source(kind: Kind, data: Buffer, s: Script = {}) {
  const opens: number[] = [];
  let release: () => void = () => undefined;
  const released = new Promise<void>((r) => (release = r));
  const open: OpenAt = async (offset, signal) => {
    opens.push(offset);
    const from = s.ranges === false ? 0 : offset;
    const bytes = (s.body ?? data).subarray(from);
    const chunk = s.chunk ?? 64 * 1024;
    async function* chunks(): AsyncGenerator<Buffer> {
      let sent = 0;
      for (;;) {
        if (s.stallAfter !== undefined && sent >= s.stallAfter) await released;
        if (s.pauseMs !== undefined) await new Promise((r) => setTimeout(r, s.pauseMs));
        if (s.failAfter !== undefined && sent >= s.failAfter) throw new Error("connection reset");
        if (sent >= bytes.length) return;
        let n = Math.min(chunk, bytes.length - sent);
        if (s.failAfter !== undefined) n = Math.min(n, s.failAfter - sent);
        if (s.stallAfter !== undefined && sent < s.stallAfter) n = Math.min(n, s.stallAfter - sent);
        yield Buffer.from(bytes.subarray(sent, sent + n));
        sent += n;
      }
    }
    if (kind === "direct") {
      const url = await scriptedServer(async (socket) => {
        const range =
          from > 0
            ? `content-range: bytes ${from}-${from + bytes.length - 1}/${from + bytes.length}\r\n`
            : "";
        socket.write(
          `HTTP/1.1 ${from > 0 ? "206 Partial Content" : "200 OK"}\r\ncontent-length: ${bytes.length}\r\n${range}\r\n`,
        );
        for await (const c of chunks()) {
          if (!socket.write(c)) await once(socket, "drain");
        }
        socket.end();
      });
      const res = await directGet(url, {}, signal);
      return { body: res.body, offset: from };
    }
    const it = chunks();
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        try {
          const r = await it.next();
          if (r.done) c.close();
          else c.enqueue(r.value);
        } catch (e) {
          c.error(e);
        }
      },
    });
    return { body, offset: from };
  };
  return { open, opens, release: () => release() };
}

const never = new AbortController().signal;

describe.each(["web", "direct"] as const)("transferFile from a %s stream", (kind) => {
  it("moves a file of several slabs into place with its sha256 checked", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(2 * SLAB_BYTES + 12345);
    const finalPath = join(dir.path, "sub", "model.gguf");
    let seen = 0;
    const out = await transferFile({
      finalPath,
      file: { path: "sub/model.gguf", bytes: data.length, sha256: sha(data) },
      open: source(kind, data).open,
      signal: never,
      onBytes: (n) => (seen += n),
    });
    expect(out).toEqual({ sha256: sha(data), fetchedBytes: data.length, resumedBytes: 0 });
    expect(seen).toBe(data.length);
    expect((await readFile(finalPath)).equals(data)).toBe(true);
    expect(existsSync(join(dir.path, "sub", ".model.gguf.part"))).toBe(false);
  });

  it("computes the digest when the manifest has none, also for an empty file", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(1000);
    const a = await transferFile({
      finalPath: join(dir.path, "a.bin"),
      file: { path: "a.bin", bytes: data.length },
      open: source(kind, data).open,
      signal: never,
    });
    expect(a.sha256).toBe(sha(data));
    const empty = await transferFile({
      finalPath: join(dir.path, "empty.bin"),
      file: { path: "empty.bin", bytes: 0, sha256: sha(Buffer.alloc(0)) },
      open: source(kind, Buffer.alloc(0)).open,
      signal: never,
    });
    expect(empty.fetchedBytes).toBe(0);
    expect((await stat(join(dir.path, "empty.bin"))).size).toBe(0);
  });

  it("detects one corrupted byte in the last slab and deletes the partial", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(SLAB_BYTES + 5 * MiB);
    const wire = Buffer.from(data);
    wire[wire.length - 2]! ^= 0x01;
    const finalPath = join(dir.path, "w.gguf");
    const err = await transferFile({
      finalPath,
      file: { path: "w.gguf", bytes: data.length, sha256: sha(data) },
      open: source(kind, data, { body: wire }).open,
      signal: never,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransferError);
    expect(err).toMatchObject({ kind: "integrity" });
    expect((err as Error).message).toContain(`got sha256 ${sha(wire)}`);
    expect(existsSync(finalPath)).toBe(false);
    expect(existsSync(join(dir.path, ".w.gguf.part"))).toBe(false);
  });

  it("checks a hub file's git blob id", async () => {
    await using dir = await tempDir("transfer");
    const data = Buffer.from('{"architectures":["X"]}\n');
    const gitOid = createHash("sha1").update(`blob ${data.length}\0`).update(data).digest("hex");
    const ok = await transferFile({
      finalPath: join(dir.path, "config.json"),
      file: { path: "config.json", bytes: data.length, gitOid },
      open: source(kind, data).open,
      signal: never,
    });
    expect(ok.sha256).toBe(sha(data));
    await expect(
      transferFile({
        finalPath: join(dir.path, "other.json"),
        file: { path: "other.json", bytes: data.length, gitOid: "0".repeat(40) },
        open: source(kind, data).open,
        signal: never,
      }),
    ).rejects.toMatchObject({ kind: "integrity" });
  });

  it("keeps every byte received before a connection error, then resumes from there", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(SLAB_BYTES + 3 * MiB);
    const file = { path: "m.gguf", bytes: data.length, sha256: sha(data) };
    const finalPath = join(dir.path, "m.gguf");
    const cut = SLAB_BYTES + MiB + 777; // mid-slab and mid-chunk
    await expect(
      transferFile({
        finalPath,
        file,
        open: source(kind, data, { failAfter: cut }).open,
        signal: never,
      }),
    ).rejects.toMatchObject({ kind: "transfer" });
    const part = join(dir.path, ".m.gguf.part");
    expect((await readFile(part)).equals(data.subarray(0, cut))).toBe(true);

    const src = source(kind, data);
    const out = await transferFile({ finalPath, file, open: src.open, signal: never });
    expect(src.opens).toEqual([cut]);
    expect(out).toMatchObject({ resumedBytes: cut, fetchedBytes: data.length - cut });
    expect((await readFile(finalPath)).equals(data)).toBe(true);
  });

  it("verifies the whole file on resume: a corrupted prefix on disk is caught", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(3 * MiB);
    const part = join(dir.path, ".m.gguf.part");
    const prefix = Buffer.from(data.subarray(0, 2 * MiB));
    prefix[100]! ^= 0xff;
    await writeFile(part, prefix);
    const src = source(kind, data);
    await expect(
      transferFile({
        finalPath: join(dir.path, "m.gguf"),
        file: { path: "m.gguf", bytes: data.length, sha256: sha(data) },
        open: src.open,
        signal: never,
      }),
    ).rejects.toMatchObject({ kind: "integrity" });
    expect(src.opens).toEqual([2 * MiB]); // only the remainder was asked for
    expect(existsSync(part)).toBe(false);
  });

  it("starts over when the source ignores the range", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(2 * MiB);
    await writeFile(join(dir.path, ".m.gguf.part"), randomBytes(MiB)); // not even the right bytes
    const out = await transferFile({
      finalPath: join(dir.path, "m.gguf"),
      file: { path: "m.gguf", bytes: data.length, sha256: sha(data) },
      open: source(kind, data, { ranges: false }).open,
      signal: never,
    });
    expect(out).toMatchObject({ fetchedBytes: data.length, resumedBytes: MiB });
    expect((await readFile(join(dir.path, "m.gguf"))).equals(data)).toBe(true);
  });

  it("finishes a partial that already holds every byte without asking the source", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(MiB);
    await writeFile(join(dir.path, ".m.gguf.part"), data);
    const src = source(kind, data);
    const out = await transferFile({
      finalPath: join(dir.path, "m.gguf"),
      file: { path: "m.gguf", bytes: data.length, sha256: sha(data) },
      open: src.open,
      signal: never,
    });
    expect(src.opens).toEqual([]);
    expect(out).toMatchObject({ fetchedBytes: 0, resumedBytes: MiB });
  });

  it("refuses a source that sends more than the manifest's bytes", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(MiB);
    await expect(
      transferFile({
        finalPath: join(dir.path, "m.gguf"),
        file: { path: "m.gguf", bytes: data.length - 1, sha256: sha(data) },
        open: source(kind, data).open,
        signal: never,
      }),
    ).rejects.toThrow(/more than the manifest's/);
  });

  it("on abort writes what arrived and fails as aborted", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(4 * MiB);
    const src = source(kind, data, { stallAfter: 3 * MiB + 5 });
    const abort = new AbortController();
    const pending = transferFile({
      finalPath: join(dir.path, "m.gguf"),
      file: { path: "m.gguf", bytes: data.length, sha256: sha(data) },
      open: src.open,
      signal: abort.signal,
      onBytes: () => undefined,
    });
    await waitForOpen(src.opens);
    await new Promise((r) => setTimeout(r, 50));
    abort.abort(new Error("stop"));
    await expect(pending).rejects.toMatchObject({ kind: "aborted" });
    const part = await readFile(join(dir.path, ".m.gguf.part"));
    expect(part.equals(data.subarray(0, 3 * MiB + 5))).toBe(true);
  });

  it("fails a source that stops sending as a retryable transfer error, keeping what arrived, then resumes", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(2 * MiB);
    const file = { path: "m.gguf", bytes: data.length, sha256: sha(data) };
    const finalPath = join(dir.path, "m.gguf");
    const stalled = source(kind, data, { stallAfter: MiB + 7 });
    const started = Date.now();
    const err = await transferFile({
      finalPath,
      file,
      open: stalled.open,
      signal: never,
      idleTimeoutMs: 300,
    }).catch((e: unknown) => e);
    stalled.release();
    expect(err).toBeInstanceOf(TransferError);
    expect(err).toMatchObject({ kind: "transfer" });
    expect((err as Error).message).toMatch(
      /sent nothing for 300 ms \(stalled\); the partial is kept/,
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    const part = await readFile(join(dir.path, ".m.gguf.part"));
    expect(part.equals(data.subarray(0, MiB + 7))).toBe(true);
    const again = source(kind, data);
    const out = await transferFile({
      finalPath,
      file,
      open: again.open,
      signal: never,
      idleTimeoutMs: 300,
    });
    expect(again.opens).toEqual([MiB + 7]);
    expect(out.sha256).toBe(sha(data));
  });

  it("fails a source that never answers after the idle bound, and a slow but steady one not at all", async () => {
    await using dir = await tempDir("transfer");
    const data = randomBytes(256 * 1024);
    const file = { path: "m.gguf", bytes: data.length, sha256: sha(data) };
    const silent: OpenAt = (_offset, signal) =>
      new Promise((_resolve, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true }),
      );
    await expect(
      transferFile({
        finalPath: join(dir.path, "a.gguf"),
        file,
        open: silent,
        signal: never,
        idleTimeoutMs: 200,
      }),
    ).rejects.toMatchObject({ kind: "transfer", message: expect.stringMatching(/stalled/) });
    // 16 chunks 60 ms apart take about a second in all, each well inside the 200 ms bound.
    const steady = source(kind, data, { chunk: 16 * 1024, pauseMs: 60 });
    const out = await transferFile({
      finalPath: join(dir.path, "b.gguf"),
      file,
      open: steady.open,
      signal: never,
      idleTimeoutMs: 200,
    });
    expect(out.sha256).toBe(sha(data));
  });

  it("turns a hash worker that dies mid-transfer into a retryable transfer error, then resumes", async () => {
    await using dir = await tempDir("transfer");
    await using hasher = new SlabWorker();
    const data = randomBytes(3 * SLAB_BYTES);
    const file = { path: "m.gguf", bytes: data.length, sha256: sha(data) };
    const finalPath = join(dir.path, "m.gguf");
    const thread = new Promise<Worker>((resolve) => process.once("worker", resolve));
    const src = source(kind, data, { stallAfter: SLAB_BYTES + MiB });
    const pending = transferFile({ finalPath, file, open: src.open, signal: never, hasher });
    pending.catch(() => undefined);
    await waitForOpen(src.opens);
    await (await thread).terminate();
    src.release();
    const err = await pending.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TransferError);
    expect(err).toMatchObject({ kind: "transfer" });
    expect((err as Error).cause).toBeInstanceOf(SlabWorkerError);
    expect((err as Error).cause).toMatchObject({ code: "exited" });
    // The bytes on disk were kept; the next attempt hashes them on a new thread and resumes.
    // It stopped receiving soon after the failure, and every byte it received is on disk.
    const kept = (await stat(join(dir.path, ".m.gguf.part"))).size;
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThan(data.length);
    expect((await readFile(join(dir.path, ".m.gguf.part"))).equals(data.subarray(0, kept))).toBe(
      true,
    );
    const again = source(kind, data);
    const out = await transferFile({ finalPath, file, open: again.open, signal: never, hasher });
    expect(again.opens).toEqual([kept]);
    expect(out.sha256).toBe(sha(data));
  });
});

async function waitForOpen(opens: number[]): Promise<void> {
  for (let i = 0; i < 500 && opens.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  expect(opens.length).toBeGreaterThan(0);
}
