// The hashing pool: bounded, fewest bytes left first (a big running job gives way at its checkpoint), one job per model and kind, progress per model, and
// jobs that stop at once when cancelled or when the pool stops.
import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import type { ModelId } from "@ic/protocol";
import { HashPool, type HashJobContext } from "./hash-pool.ts";

const id = (s: string) => s as ModelId;

/** A job that runs until released (or aborted), reporting `bytes` of progress first. */
function gated(bytes = 0) {
  const started: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const run = (name: string) => async (ctx: HashJobContext) => {
    started.push(name);
    ctx.onProgress(bytes);
    await new Promise<void>((resolve, reject) => {
      void gate.then(resolve);
      ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason as Error), {
        once: true,
      });
    });
    return name;
  };
  return { started, release, run };
}

describe("HashPool", () => {
  it("runs one job at a time by default, the smallest queued one next", async () => {
    const pool = new HashPool({ log: silentLogger() });
    const g = gated();
    const first = pool.add({
      id: id("a/big"),
      kind: "register",
      totalBytes: 100,
      run: g.run("big"),
    });
    const later = [
      pool.add({ id: id("a/mid"), kind: "register", totalBytes: 50, run: g.run("mid") }),
      pool.add({ id: id("a/small"), kind: "pieces", totalBytes: 5, run: g.run("small") }),
    ];
    await Promise.resolve();
    expect(g.started).toEqual(["big"]);
    expect(pool.progress().map((p) => [p.model_id, p.state])).toEqual([
      ["a/big", "running"],
      ["a/mid", "queued"],
      ["a/small", "queued"],
    ]);
    g.release();
    expect(await first).toBe("big");
    expect(await Promise.all(later)).toEqual(["mid", "small"]);
    expect(g.started).toEqual(["big", "small", "mid"]);
    expect(pool.progress()).toEqual([]);
  });

  it("a running big job gives way at its next checkpoint to a smaller one queued later, then resumes", async () => {
    const pool = new HashPool({ log: silentLogger() });
    const order: string[] = [];
    /** A job hashing `chunks` chunks of 10 bytes, with a checkpoint before each. */
    const chunked = (name: string, chunks: number) => async (ctx: HashJobContext) => {
      for (let i = 0; i < chunks; i++) {
        await ctx.checkpoint();
        order.push(`${name}${i}`);
        ctx.onProgress(10);
        await new Promise((r) => setTimeout(r, 1));
      }
      return name;
    };
    const big = pool.add({
      id: id("a/big"),
      kind: "pieces",
      totalBytes: 100,
      run: chunked("big", 10),
    });
    while (order.length < 3) await new Promise((r) => setTimeout(r, 1));
    const small = pool.add({
      id: id("a/small"),
      kind: "register",
      totalBytes: 20,
      run: chunked("small", 2),
    });
    await new Promise((r) => setTimeout(r, 0));
    expect(pool.progress().find((p) => p.model_id === "a/big")?.state).toBe("paused");
    expect(await small).toBe("small");
    expect(await big).toBe("big");
    // The small one ran between two of the big one's chunks, whole; the big one went on from there.
    const at = order.indexOf("small0");
    expect(order.slice(at, at + 2)).toEqual(["small0", "small1"]);
    expect(order.filter((o) => o.startsWith("big"))).toHaveLength(10);
    expect(at).toBeGreaterThanOrEqual(3);
    expect(at).toBeLessThan(6);
  });

  it("aborts a paused job when cancelled, and the smaller one still runs", async () => {
    const pool = new HashPool({ log: silentLogger() });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let bigChunks = 0;
    const big = pool.add({
      id: id("a/big"),
      kind: "pieces",
      totalBytes: 100,
      run: async (ctx) => {
        for (;;) {
          await ctx.checkpoint();
          bigChunks++;
          ctx.onProgress(1);
          await new Promise((r) => setTimeout(r, 1));
        }
      },
    });
    while (bigChunks < 1) await new Promise((r) => setTimeout(r, 1));
    const small = pool.add({
      id: id("a/small"),
      kind: "register",
      totalBytes: 5,
      run: async () => gate,
    });
    await new Promise((r) => setTimeout(r, 5));
    expect(pool.progress().map((p) => [p.model_id, p.state])).toEqual([
      ["a/small", "running"],
      ["a/big", "paused"],
    ]);
    pool.cancel(id("a/big"), "its directory went");
    await expect(big).rejects.toThrow(/its directory went/);
    release();
    await small;
    expect(pool.progress()).toEqual([]);
  });

  it("joins a job of the same model and kind instead of hashing twice", async () => {
    const pool = new HashPool({ log: silentLogger(), concurrency: 2 });
    const g = gated();
    const a = pool.add({ id: id("a/m"), kind: "register", totalBytes: 1, run: g.run("one") });
    const b = pool.add({ id: id("a/m"), kind: "register", totalBytes: 1, run: g.run("two") });
    expect(pool.has(id("a/m"), "register")).toBe(true);
    expect(pool.has(id("a/m"), "pieces")).toBe(false);
    g.release();
    expect(await Promise.all([a, b])).toEqual(["one", "one"]);
    expect(g.started).toEqual(["one"]);
  });

  it("shows the bytes hashed of the total per model", async () => {
    const pool = new HashPool({ log: silentLogger() });
    const g = gated(40);
    const done = pool.add({ id: id("a/m"), kind: "pieces", totalBytes: 100, run: g.run("m") });
    await Promise.resolve();
    expect(pool.progress()).toEqual([
      { model_id: "a/m", kind: "pieces", state: "running", done_bytes: 40, total_bytes: 100 },
    ]);
    g.release();
    await done;
  });

  it("cancel aborts a running job and drops a queued one", async () => {
    const pool = new HashPool({ log: silentLogger() });
    const g = gated();
    const running = pool.add({ id: id("a/m"), kind: "register", totalBytes: 1, run: g.run("r") });
    const queued = pool.add({ id: id("a/m"), kind: "pieces", totalBytes: 2, run: g.run("q") });
    const other = pool.add({ id: id("a/o"), kind: "register", totalBytes: 3, run: g.run("o") });
    pool.cancel(id("a/m"), "its directory is gone");
    await expect(running).rejects.toThrow(/its directory is gone/);
    await expect(queued).rejects.toThrow(/its directory is gone/);
    await Promise.resolve();
    expect(g.started).toEqual(["r", "o"]);
    g.release();
    expect(await other).toBe("o");
  });

  it("does not join a cancelled job that is still ending: the new one runs after it", async () => {
    const pool = new HashPool({ log: silentLogger() });
    const started: string[] = [];
    let end!: () => void;
    const ending = new Promise<void>((r) => (end = r));
    const old = pool.add({
      id: id("a/m"),
      kind: "pieces",
      totalBytes: 1,
      run: async () => {
        started.push("old");
        await ending;
        throw new Error("aborted late");
      },
    });
    await Promise.resolve();
    pool.cancel(id("a/m"), "files changed");
    const next = pool.add({
      id: id("a/m"),
      kind: "pieces",
      totalBytes: 1,
      run: async () => void started.push("new"),
    });
    expect(started).toEqual(["old"]);
    end();
    await expect(old).rejects.toThrow(/aborted late/);
    await next;
    expect(started).toEqual(["old", "new"]);
    expect(pool.progress()).toEqual([]);
  });

  it("stop aborts every job at once and refuses new ones", async () => {
    const pool = new HashPool({ log: silentLogger() });
    const g = gated();
    const a = pool.add({ id: id("a/a"), kind: "register", totalBytes: 1, run: g.run("a") });
    const b = pool.add({ id: id("a/b"), kind: "register", totalBytes: 2, run: g.run("b") });
    await pool.stop();
    await expect(a).rejects.toThrow(/stopping/);
    await expect(b).rejects.toThrow(/stopping/);
    await expect(
      pool.add({ id: id("a/c"), kind: "register", totalBytes: 1, run: g.run("c") }),
    ).rejects.toThrow(/stopping/);
    expect(g.started).toEqual(["a"]);
  });
});
