// Store host and staging clients on loopback with temp dirs: staging, hardlinks, resume after a kill,
// purge, capacity eviction, DownloadFailed arithmetic, companion protection and startup reconciliation.
import { describe, expect, it } from "vitest";
import { mkdir, stat, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { silentLogger } from "@ic/log";
import { FakeClock, MiB, StorageReportSchema, type ModelId } from "@ic/protocol";
import { StoreHost } from "../store-host/store-host.ts";
import type { StagingSettings } from "@ic/staging";
import { StagingClient } from "./staging-client.ts";
import type { ModelUsage } from "./staging-types.ts";
import { budgetDisk, sha256Of, tempDir, writeArtifact, type TempDir } from "../test-support.ts";
import type { Disk } from "../disk.ts";
import { keptPartialBytes } from "../transfer/piece-fetch.ts";

const id = (s: string) => s as ModelId;

interface Store extends AsyncDisposable {
  readonly host: StoreHost;
  readonly dir: TempDir;
  readonly url: string;
  /** Writes files into store_path/<org>--<name>/ and registers them. */
  add(model: string, files: Record<string, number>): Promise<void>;
}

async function startStore(pieceBytes?: number): Promise<Store> {
  const dir = await tempDir("store");
  const host = new StoreHost({
    storePath: dir.path,
    logger: silentLogger(),
    headroomBytes: 0,
    pieceBytes,
  });
  await host.start({ host: "127.0.0.1", port: 0 });
  return {
    host,
    dir,
    url: host.url ?? "",
    async add(model, files) {
      for (const [name, bytes] of Object.entries(files)) {
        await writeArtifact(join(dir.path, model.replace("/", "--"), name), bytes);
      }
      await host.register(id(model));
    },
    async [Symbol.asyncDispose]() {
      await host.stop();
      await dir[Symbol.asyncDispose]();
    },
  };
}

interface NodeOpts {
  settings?: Partial<StagingSettings>;
  usage?: () => ModelUsage;
  disk?: Disk;
  storeLocalPath?: string;
  storeUrl?: string;
  clock?: { now(): number };
}

function client(root: string, store: Store, o: NodeOpts = {}): StagingClient {
  return new StagingClient({
    root,
    storeUrl: o.storeUrl ?? store.url,
    storeLocalPath: o.storeLocalPath,
    settings: {
      cleanupOnDeactivate: true,
      keepRecentBytes: 40 * 1024 ** 3,
      headroomBytes: 0,
      ...o.settings,
    },
    usage: o.usage,
    disk: o.disk,
    clock: o.clock,
    logger: silentLogger(),
  });
}

const usage =
  (live: string[] = [], companions: string[] = []): (() => ModelUsage) =>
  () => ({
    live: new Set(live.map(id)),
    companions: new Set(companions.map(id)),
  });

describe("staging from a store host", () => {
  it("stages a model into two nodes over HTTP with every byte verified, then reuses it", async () => {
    await using store = await startStore();
    await store.add("acme/base", { "model.gguf": 6 * MiB, "config.json": 300 });
    await using a = await tempDir("node-a");
    await using b = await tempDir("node-b");
    await using nodeA = client(a.path, store);
    await using nodeB = client(b.path, store);
    await nodeA.start();
    await nodeB.start();

    const [ra, rb] = await Promise.all([
      nodeA.stage(id("acme/base")),
      nodeB.stage(id("acme/base")),
    ]);
    for (const [r, root] of [
      [ra, a.path],
      [rb, b.path],
    ] as const) {
      expect(r.ok).toBe(true);
      if (!r.ok) continue;
      const m = r.models[0]!;
      expect(m.path).toBe(join(root, "acme--base"));
      expect(m.fetchedBytes).toBe(6 * MiB + 300);
      expect(await sha256Of(join(m.path, "model.gguf"))).toBe(
        store.host.manifest(id("acme/base"))!.files.find((f) => f.path === "model.gguf")!.sha256,
      );
    }
    expect(store.host.stats().bytes_served).toBe(2 * (6 * MiB + 300));

    const again = await nodeA.stage(id("acme/base"));
    expect(again.ok && again.models[0]).toMatchObject({
      fetchedBytes: 0,
      reusedBytes: 6 * MiB + 300,
    });
    expect(store.host.stats().bytes_served).toBe(2 * (6 * MiB + 300));

    const report = StorageReportSchema.parse(await nodeA.storageReport({ eventLogBytes: 123 }));
    expect(report.staged_models).toMatchObject([
      { model_id: "acme/base", in_use: false, complete: true, downloading: false },
    ]);
    // Artifacts plus the small .staging.json record.
    expect(report.staged_models[0]!.size_bytes).toBeGreaterThan(6 * MiB + 300);
    expect(report.staged_models[0]!.size_bytes).toBeLessThan(6 * MiB + 300 + 4096);
    expect(report.event_log_bytes).toBe(123);
    expect(report.models_volume.free_bytes).toBeGreaterThan(0);
  });

  it("stages from a store URL given per call, also before start()", async () => {
    await using store = await startStore();
    await store.add("acme/base", { "model.gguf": MiB });
    await using root = await tempDir("node");
    await using node = new StagingClient({
      root: join(root.path, "not-yet-created"),
      settings: { cleanupOnDeactivate: true, keepRecentBytes: 0, headroomBytes: 0 },
      logger: silentLogger(),
    });
    const r = await node.stage(id("acme/base"), { storeUrl: store.url });
    expect(r.ok && r.models[0]!.fetchedBytes).toBe(MiB);
    await node.stop();
    expect(await node.stage(id("acme/base"), { storeUrl: store.url })).toMatchObject({
      ok: false,
      cause: "aborted",
    });
  });

  it("hardlinks instead of copying when the store is on the same filesystem", async () => {
    await using store = await startStore();
    await store.add("acme/base", { "model.gguf": 3 * MiB });
    await using a = await tempDir("node-a");
    await using node = client(a.path, store, { storeLocalPath: store.dir.path });
    await node.start();

    const r = await node.stage(id("acme/base"));
    expect(r.ok && r.models[0]).toMatchObject({ linkedBytes: 3 * MiB, fetchedBytes: 0 });
    expect(store.host.stats().bytes_served).toBe(0);
    const staged = join(a.path, "acme--base", "model.gguf");
    expect((await stat(staged)).nlink).toBe(2);
    expect((await node.list())[0]).toMatchObject({
      complete: true,
      freeableBytes: expect.any(Number),
    });
    expect((await node.list())[0]!.freeableBytes).toBeLessThan(1024);

    // Deleting the staged copy never touches the store's copy.
    expect((await node.purge()).deleted).toEqual(["acme/base"]);
    const storeFile = join(store.dir.path, "acme--base", "model.gguf");
    expect((await stat(storeFile)).nlink).toBe(1);
    expect(store.host.manifest(id("acme/base"))).toBeDefined();
  });

  it("resumes after a kill mid-transfer and fetches only the remainder", async () => {
    await using store = await startStore(MiB);
    await store.add("acme/big", { "a.gguf": 2 * MiB, "b.gguf": 12 * MiB });
    await using root = await tempDir("node");
    const finalB = join(root.path, "acme--big", "b.gguf");
    const partB = join(root.path, "acme--big", ".b.gguf.part");

    const first = client(root.path, store);
    await first.start();
    const kill = new AbortController();
    const r1 = await first.stage(id("acme/big"), {
      signal: kill.signal,
      onProgress: (p) => {
        if (p.file === "b.gguf" && p.fileDoneBytes >= 5 * MiB) kill.abort();
      },
    });
    await first.stop();
    expect(r1).toMatchObject({
      ok: false,
      type: "DownloadFailed",
      cause: "aborted",
      retryable: true,
    });
    expect(existsSync(finalB)).toBe(false);
    // Pieces still under way at the kill do not count; the partial keeps the verified ones.
    const partial = await keptPartialBytes(finalB);
    expect(partial).toBeGreaterThanOrEqual(5 * MiB);
    expect(partial).toBeLessThan(12 * MiB);

    // Restart: a new client on the same root.
    await using second = client(root.path, store);
    await second.start();
    // The killed response may still be reading its last piece: count from when it has let go.
    await expect.poll(() => store.host.stats().open_bodies, { timeout: 10_000 }).toBe(0);
    const before = store.host.stats();
    const r2 = await second.stage(id("acme/big"));
    expect(r2.ok).toBe(true);
    if (!r2.ok) return;
    expect(r2.models[0]).toMatchObject({
      reusedBytes: 2 * MiB,
      resumedBytes: partial,
      fetchedBytes: 12 * MiB - partial,
    });
    const after = store.host.stats();
    expect(after.bytes_served - before.bytes_served).toBe(12 * MiB - partial);
    expect(after.range_requests - before.range_requests).toBe((12 * MiB - partial) / MiB);
    expect(existsSync(partB)).toBe(false);
    expect(await sha256Of(finalB)).toBe(
      await sha256Of(join(store.dir.path, "acme--big", "b.gguf")),
    );
  });

  it("checks a partial's pieces again on resume: pieces changed on disk are fetched again", async () => {
    await using store = await startStore(256 * 1024);
    await store.add("acme/m", { "w.gguf": 2 * MiB });
    await using root = await tempDir("node");
    await using node = client(root.path, store);
    await node.start();
    const kill = new AbortController();
    const first = await node.stage(id("acme/m"), {
      signal: kill.signal,
      onProgress: (p) => p.fileDoneBytes >= MiB && kill.abort(),
    });
    expect(first.ok).toBe(false);
    const final = join(root.path, "acme--m", "w.gguf");
    const kept = await keptPartialBytes(final);
    expect(kept).toBeGreaterThanOrEqual(MiB);
    const part = join(root.path, "acme--m", ".w.gguf.part");
    await writeFile(part, Buffer.alloc((await stat(part)).size, 7)); // same length, wrong bytes

    const good = await node.stage(id("acme/m"));
    expect(good.ok && good.models[0]).toMatchObject({ resumedBytes: 0, fetchedBytes: 2 * MiB });
    expect(await sha256Of(final)).toBe(await sha256Of(join(store.dir.path, "acme--m", "w.gguf")));
  });

  it("purges every idle copy, or only the named one, and never the store copy", async () => {
    await using store = await startStore();
    for (const m of ["acme/one", "acme/two", "acme/three"])
      await store.add(m, { "m.gguf": 100_000 });
    await using root = await tempDir("node");
    await using node = client(root.path, store, { usage: usage(["acme/two"]) });
    await node.start();
    for (const m of ["acme/one", "acme/two", "acme/three"])
      expect((await node.stage(id(m))).ok).toBe(true);

    const named = await node.purge(id("acme/three"));
    expect(named.deleted).toEqual(["acme/three"]);
    expect(named.freed_bytes).toBeGreaterThanOrEqual(100_000);

    const busyNamed = await node.purge(id("acme/two"));
    expect(busyNamed).toEqual({ deleted: [], freed_bytes: 0, skipped_in_use: ["acme/two"] });

    const all = await node.purge();
    expect(all.deleted).toEqual(["acme/one"]);
    expect(all.skipped_in_use).toEqual(["acme/two"]);
    expect((await node.list()).map((e) => e.modelId)).toEqual(["acme/two"]);
    expect(store.host.models()).toHaveLength(3);
    expect(existsSync(join(store.dir.path, "acme--one", "m.gguf"))).toBe(true);
  });
});

describe("a copy being downloaded", () => {
  it("is skipped by a purge that arrives mid-transfer and completes intact", async () => {
    await using store = await startStore();
    await store.add("acme/m", { "w.gguf": 8 * MiB });
    await using root = await tempDir("node");
    await using node = client(root.path, store);
    await node.start();
    let purge: ReturnType<StagingClient["purge"]> | undefined;
    const r = await node.stage(id("acme/m"), {
      onProgress: () => {
        purge ??= node.purge();
      },
    });
    expect(await purge).toEqual({ deleted: [], freed_bytes: 0, skipped_in_use: ["acme/m"] });
    expect(r.ok).toBe(true);
    expect(await node.isStaged(id("acme/m"))).toBe(true);
    const report = await node.storageReport({ eventLogBytes: 0 });
    expect(report.staged_models[0]).toMatchObject({ complete: true, downloading: false });
  });
});

describe("capacity pass before a transfer", () => {
  it("refuses with DownloadFailed and the byte arithmetic when no safe fit exists, deleting nothing", async () => {
    await using store = await startStore();
    await store.add("acme/old", { "m.gguf": 4 * MiB });
    await store.add("acme/huge", { "m.gguf": 13 * MiB });
    await using root = await tempDir("node");
    await using node = client(root.path, store, {
      settings: { headroomBytes: 2 * MiB },
      disk: budgetDisk({ [root.path]: 14 * MiB }),
    });
    await node.start();
    expect((await node.stage(id("acme/old"))).ok).toBe(true);

    const r = await node.stage(id("acme/huge"));
    expect(r).toMatchObject({
      ok: false,
      type: "DownloadFailed",
      cause: "no_fit",
      modelId: "acme/huge",
    });
    if (r.ok) return;
    expect(r.arithmetic).toMatchObject({ requiredBytes: 13 * MiB, headroomBytes: 2 * MiB });
    expect(r.message).toContain(`needs 0.01 GiB (${13 * MiB} B) additional`);
    expect(r.message).toContain(`headroom = 0.01 GiB (${15 * MiB} B)`);
    expect(r.message).toMatch(/short by .* \(\d+ B\); transfer not started$/);
    // Nothing was deleted and nothing written.
    expect((await node.list()).map((e) => e.modelId)).toEqual(["acme/old"]);
    expect(existsSync(join(root.path, "acme--huge"))).toBe(false);
    expect(store.host.stats().bytes_served).toBe(4 * MiB);
  });

  it("evicts idle copies oldest-first only as far as needed, overriding the grace budget", async () => {
    await using store = await startStore();
    for (const m of ["acme/old1", "acme/old2"]) await store.add(m, { "m.gguf": 4 * MiB });
    await store.add("acme/new", { "m.gguf": 6 * MiB });
    await using root = await tempDir("node");
    const clock = new FakeClock(1000);
    await using node = client(root.path, store, {
      clock,
      settings: { headroomBytes: 2 * MiB, keepRecentBytes: 40 * 1024 ** 3 },
      disk: budgetDisk({ [root.path]: 15 * MiB }),
    });
    await node.start();
    clock.set(2000);
    expect((await node.stage(id("acme/old1"))).ok).toBe(true);
    clock.set(3000);
    expect((await node.stage(id("acme/old2"))).ok).toBe(true);

    const r = await node.stage(id("acme/new"));
    expect(r.ok && r.models[0]!.evicted).toEqual(["acme/old1"]);
    expect((await node.list()).map((e) => e.modelId)).toEqual(["acme/new", "acme/old2"]);
  });

  it("runs with cleanup_on_deactivate off too (the capacity pass is independent)", async () => {
    await using store = await startStore();
    await store.add("acme/old", { "m.gguf": 4 * MiB });
    await store.add("acme/new", { "m.gguf": 4 * MiB });
    await using root = await tempDir("node");
    await using node = client(root.path, store, {
      settings: { cleanupOnDeactivate: false, headroomBytes: MiB },
      disk: budgetDisk({ [root.path]: 8 * MiB }),
    });
    await node.start();
    expect((await node.stage(id("acme/old"))).ok).toBe(true);
    const r = await node.stage(id("acme/new"));
    expect(r.ok && r.models[0]!.evicted).toEqual(["acme/old"]);
  });

  it("never evicts a companion of an active model, even when it is the oldest copy", async () => {
    await using store = await startStore();
    for (const m of ["acme/drafter", "acme/other", "acme/new"])
      await store.add(m, { "m.gguf": 4 * MiB });
    await using root = await tempDir("node");
    const clock = new FakeClock(1000);
    await using node = client(root.path, store, {
      clock,
      usage: usage(["acme/active"], ["acme/drafter"]),
      settings: { headroomBytes: MiB },
      disk: budgetDisk({ [root.path]: 13 * MiB }),
    });
    await node.start();
    clock.set(2000);
    await node.stage(id("acme/drafter"));
    clock.set(3000);
    await node.stage(id("acme/other"));
    const r = await node.stage(id("acme/new"));
    expect(r.ok && r.models[0]!.evicted).toEqual(["acme/other"]);
    const report = await node.storageReport({ eventLogBytes: 0 });
    expect(report.staged_models.find((m) => m.model_id === "acme/drafter")?.in_use).toBe(true);
  });

  it("admits base and companion one at a time and never evicts the request's own base", async () => {
    await using store = await startStore();
    await store.add("acme/base", { "m.gguf": 6 * MiB });
    await store.add("acme/mtp", { "m.gguf": 3 * MiB });
    await using root = await tempDir("node");
    await using node = client(root.path, store, {
      settings: { headroomBytes: MiB, keepRecentBytes: 0 },
      disk: budgetDisk({ [root.path]: 9 * MiB }),
    });
    await node.start();
    const order: string[] = [];
    const r = await node.stage(id("acme/base"), {
      companions: [id("acme/mtp")],
      onProgress: (p) => {
        if (order.at(-1) !== p.modelId) order.push(p.modelId);
      },
    });
    // The base fits (6 + 1 <= 9); the companion would need 3 + 1 more and only the base could make room.
    expect(r).toMatchObject({ ok: false, cause: "no_fit", modelId: "acme/mtp" });
    if (r.ok) return;
    expect(r.staged.map((m) => m.modelId)).toEqual(["acme/base"]);
    expect(order).toEqual(["acme/base"]);
    expect((await node.list()).map((e) => e.modelId)).toEqual(["acme/base"]);
  });
});

describe("lifecycle passes", () => {
  async function stagedPair(settings: Partial<StagingSettings>) {
    const store = await startStore();
    await store.add("acme/a", { "m.gguf": 2 * MiB });
    await store.add("acme/b", { "m.gguf": 2 * MiB });
    const root = await tempDir("node");
    const clock = new FakeClock(1000);
    const node = client(root.path, store, { clock, settings });
    await node.start();
    clock.set(2000);
    await node.stage(id("acme/a"));
    clock.set(3000);
    await node.stage(id("acme/b"));
    clock.set(4000);
    return {
      node,
      async [Symbol.asyncDispose]() {
        await node.stop();
        await root[Symbol.asyncDispose]();
        await store[Symbol.asyncDispose]();
      },
    };
  }

  it("keeps the most recently used idle copies within staging_keep_recent", async () => {
    await using s = await stagedPair({ keepRecentBytes: 3 * MiB });
    const out = await s.node.deactivated([id("acme/a")]); // a is now the most recent
    expect(out.deleted).toEqual(["acme/b"]);
  });

  it("keep_recent 0 evicts every idle copy on deactivation", async () => {
    await using s = await stagedPair({ keepRecentBytes: 0 });
    const out = await s.node.deactivated([id("acme/a")]);
    expect(out.deleted.sort()).toEqual(["acme/a", "acme/b"]);
  });

  it("a deactivation pass racing a new transfer of the same model: both complete, the copy ends staged", async () => {
    await using s = await stagedPair({ keepRecentBytes: 0 });
    // The instance stops (the pass deletes the idle copy) just as another instance of the model
    // starts on this node (its transfer begins): the transfer waits, then fills a fresh directory.
    for (let i = 0; i < 20; i++) {
      const [, staged] = await Promise.all([
        s.node.deactivated([id("acme/a")]),
        s.node.stage(id("acme/a")),
      ]);
      expect(staged.ok, JSON.stringify(staged)).toBe(true);
    }
    expect(await s.node.isStaged(id("acme/a"))).toBe(true);
  });

  it("cleanup_on_deactivate false keeps every copy", async () => {
    await using s = await stagedPair({ keepRecentBytes: 0, cleanupOnDeactivate: false });
    expect((await s.node.deactivated([id("acme/a")])).deleted).toEqual([]);
    expect(await s.node.isStaged(id("acme/a"))).toBe(true);
  });

  it("startup removes leftovers of a crashed session and reconciles orphaned copies", async () => {
    await using store = await startStore();
    await store.add("acme/a", { "m.gguf": MiB });
    await using root = await tempDir("node");
    const first = client(root.path, store);
    await first.start();
    await first.stage(id("acme/a"));
    await first.stop();
    // A crash mid-delete and mid-record-write leaves these behind.
    await mkdir(join(root.path, ".deleting-acme--x-0001", "sub"), { recursive: true });
    await writeFile(join(root.path, "acme--a", ".staging.json.1a2b3c4d.tmp"), "{");
    await mkdir(join(root.path, "not a model"), { recursive: true });

    await using second = client(root.path, store, { settings: { keepRecentBytes: 0 } });
    const out = await second.start();
    expect(out.deleted).toEqual(["acme/a"]);
    expect(existsSync(join(root.path, ".deleting-acme--x-0001"))).toBe(false);
    expect(existsSync(join(root.path, "not a model"))).toBe(true);
  });
});

describe("store unreachable without a hub", () => {
  it("returns DownloadFailed store_unreachable", async () => {
    await using store = await startStore();
    const url = store.url;
    await store.host.stop();
    await using root = await tempDir("node");
    await using node = client(root.path, store, { storeUrl: url });
    await node.start();
    const r = await node.stage(id("acme/a"));
    expect(r).toMatchObject({ ok: false, cause: "store_unreachable", retryable: true });
  });
});
