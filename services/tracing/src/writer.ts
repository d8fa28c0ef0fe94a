// Writes trace files from a worker thread: the node's event loop only hands over finished JSON
// strings, and the file system calls (temp file, rename) run synchronously in the worker, so a slow
// or stuck disk never stalls requests, heartbeats or the shared libuv pool. The worker starts on the
// first write (a node with tracing off never starts it) and is restarted if it dies.
import { Worker } from "node:worker_threads";

export interface WriteItem {
  /** File name inside `dir` (already validated: `<ms>_<task id>.json`). */
  readonly name: string;
  readonly data: string;
}

export type WriteResult = { name: string; ok: true } | { name: string; ok: false; error: string };

// Plain CommonJS so it runs the same under tsx, vitest and node (no TypeScript in a worker).
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const fs = require("node:fs");
const path = require("node:path");
const dir = workerData.dir;
parentPort.on("message", ({ seq, items }) => {
  const results = [];
  for (const { name, data } of items) {
    const tmp = path.join(dir, "." + name + ".tmp");
    try {
      try {
        fs.writeFileSync(tmp, data);
      } catch (e) {
        if (e.code !== "ENOENT") throw e;
        fs.mkdirSync(dir, { recursive: true });
        fs.writeFileSync(tmp, data);
      }
      fs.renameSync(tmp, path.join(dir, name));
      results.push({ name, ok: true });
    } catch (e) {
      try { fs.rmSync(tmp, { force: true }); } catch {}
      results.push({ name, ok: false, error: String((e && e.message) || e) });
    }
  }
  parentPort.postMessage({ seq, results });
});
`;

export class TraceWriter {
  private worker: Worker | undefined;
  private seq = 0;
  private readonly waiting = new Map<
    number,
    { resolve: (r: WriteResult[]) => void; items: readonly WriteItem[] }
  >();

  constructor(private readonly dir: string) {}

  /** Writes a batch of files; resolves with one result per item (never rejects). */
  write(items: readonly WriteItem[]): Promise<WriteResult[]> {
    if (items.length === 0) return Promise.resolve([]);
    const w = this.ensureWorker();
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.waiting.set(seq, { resolve, items });
      w.postMessage({ seq, items });
    });
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { dir: this.dir } });
    w.unref();
    w.on("message", (m: { seq: number; results: WriteResult[] }) => {
      const p = this.waiting.get(m.seq);
      this.waiting.delete(m.seq);
      p?.resolve(m.results);
    });
    w.on("error", (e) => this.fail(w, `trace writer failed: ${e.message}`));
    w.on("exit", (code) => this.fail(w, `trace writer exited (${code})`));
    this.worker = w;
    return w;
  }

  /** Worker `w` is gone: what it still owed fails, and the next write starts a new one. */
  private fail(w: Worker, why: string): void {
    if (this.worker !== w) return;
    this.worker = undefined;
    for (const [seq, p] of this.waiting) {
      this.waiting.delete(seq);
      p.resolve(p.items.map((i) => ({ name: i.name, ok: false, error: why })));
    }
  }

  /** Waits (up to `graceMs`) for the batches in flight, then ends the worker. */
  async stop(graceMs = 5000): Promise<void> {
    const w = this.worker;
    if (!w) return;
    const deadline = Date.now() + graceMs;
    while (this.waiting.size > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    this.fail(w, "trace writer stopped");
    await w.terminate();
  }
}
