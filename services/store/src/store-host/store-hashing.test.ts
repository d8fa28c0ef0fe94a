// The store host with a big sparse model beside small ones: models with a valid manifest are served
// at once while the big one hashes in the background pool, a model whose files differ from its
// manifest is reported and never hashed in a loop, and a removed directory is never made again.
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, truncate } from "node:fs/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import { writeTinyModel } from "@ic/gguf";
import { silentLogger } from "@ic/log";
import { GiB, modelDirName, StoreManifestSchema, type ModelId } from "@ic/protocol";
import { writeJsonAtomic } from "../paths.ts";
import { collectingLogger, tempDir } from "../test-support.ts";
import { MANIFEST_FILE, writeManifest } from "./manifests.ts";
import { hashingHealth } from "./store-health.ts";
import { StoreHost } from "./store-host.ts";
import { StoreWatch } from "./store-watch.ts";

const id = (s: string) => s as ModelId;
/** Sparse: reading it costs CPU (zeros to hash) but no disk; it never finishes hashing here. */
const BIG = 20 * GiB;

/** A model directory holding one small GGUF (`bytes`: extended sparse to that size). */
async function model(store: string, name: string, bytes?: number): Promise<string> {
  const dir = join(store, modelDirName(id(name)));
  await mkdir(dir, { recursive: true });
  const file = join(dir, "m.gguf");
  await writeTinyModel(file);
  if (bytes !== undefined) await truncate(file, bytes);
  return file;
}

async function register(store: string, name: string, o: { pieces?: boolean } = {}) {
  const dir = join(store, modelDirName(id(name)));
  const m = await writeManifest({
    dir,
    modelId: id(name),
    source: "local",
    known: new Map(),
    revision: undefined,
    nowMs: Date.now(),
    log: silentLogger(),
  });
  if (o.pieces === false) {
    const files = m.files.map(({ pieces: _, ...f }) => f);
    await writeJsonAtomic(join(dir, MANIFEST_FILE), { ...m, files });
  }
  return m;
}

/** Writes a manifest without piece hashes by hand (a sha256 nobody can check here in time). */
async function oldManifest(store: string, name: string, bytes: number): Promise<void> {
  const manifest = StoreManifestSchema.parse({
    model_id: name,
    files: [{ path: "m.gguf", bytes, sha256: "ab".repeat(32) }],
    total_bytes: bytes,
    registered_at: new Date(0).toISOString(),
    source: "local",
  });
  await writeJsonAtomic(join(store, modelDirName(id(name)), MANIFEST_FILE), manifest);
}

async function until(what: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!what()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 5));
  }
}

const served = (host: StoreHost) => host.models().map((m) => m.model_id);

/** The store watch wired to the host as the node's component wires it (scans run by hand). */
function watchOf(host: StoreHost, store: string, withdrawn: string[] = []) {
  return new StoreWatch({
    storePath: store,
    registered: (m) => host.manifest(m) !== undefined,
    admit: (m) => host.admit(m),
    verify: async (m) => {
      const r = await host.verify(m);
      if (r === "changed") withdrawn.push(m);
      return r;
    },
    badSignature: (m) => host.changedSignature(m),
    onAdded: () => undefined,
    registeredIds: () => served(host),
    onRemoved: (m) => host.forget(m),
    onUnservedGone: (m) => host.forget(m),
    log: silentLogger(),
    settleMs: 200,
    intervalMs: 3_600_000,
    useFsWatch: false,
  });
}

describe("the store host's background hashing", () => {
  it("serves models with a valid manifest at once while a big directory hashes, and stops it at once", async () => {
    await using store = await tempDir("ic-hashing");
    for (const name of ["acme/a", "acme/b"]) {
      await model(store.path, name);
      await register(store.path, name);
    }
    await model(store.path, "acme/big", BIG);
    const host = new StoreHost({ storePath: store.path, logger: silentLogger(), headroomBytes: 0 });
    const t0 = performance.now();
    await host.start();
    expect(served(host)).toEqual(["acme/a", "acme/b"]);
    expect(performance.now() - t0).toBeLessThan(2000);
    // The big directory has no manifest: the watch admits it once its files have settled.
    const watch = watchOf(host, store.path);
    await watch.scanOnce();
    await new Promise((r) => setTimeout(r, 250));
    await watch.scanOnce();
    await until(() => (host.hashing()[0]?.done_bytes ?? 0) > 0);
    const first = host.hashing()[0]!;
    expect(first).toMatchObject({
      model_id: "acme/big",
      kind: "register",
      state: "running",
      total_bytes: BIG,
    });
    await until(() => host.hashing()[0]!.done_bytes > first.done_bytes);
    expect(hashingHealth(host.hashing())[0]!.message).toMatch(
      /^hashing acme\/big to register it: \d+\.\d\d GiB of 20\.00 GiB \(\d+%\)$/,
    );
    const t1 = performance.now();
    await host.stop();
    expect(performance.now() - t1).toBeLessThan(1000);
    expect(host.hashing()).toEqual([]);
    expect(existsSync(join(store.path, "acme--big", MANIFEST_FILE))).toBe(false);
  });

  it("reports a model whose files differ from its manifest, never hashes it, and takes it back once they match", async () => {
    await using store = await tempDir("ic-hashing");
    await model(store.path, "acme/a");
    await register(store.path, "acme/a");
    const file = await model(store.path, "acme/changed");
    const m = await register(store.path, "acme/changed");
    await truncate(file, BIG);
    const logs = collectingLogger();
    const host = new StoreHost({ storePath: store.path, logger: logs.log, headroomBytes: 0 });
    await host.start();
    const watch = watchOf(host, store.path);
    try {
      expect(served(host)).toEqual(["acme/a"]);
      const [changed] = host.changedModels();
      expect(changed?.differences).toEqual([
        {
          file: "m.gguf",
          problem: `manifest lists ${m.total_bytes.toLocaleString("en-US")} bytes, disk has 21,474,836,480`,
        },
      ]);
      // Scans over more than a settle period: it is left alone (no hash, no CPU).
      const cpu = process.cpuUsage();
      for (let i = 0; i < 6; i++) {
        await watch.scanOnce();
        expect(host.hashing()).toEqual([]);
        await new Promise((r) => setTimeout(r, 100));
      }
      const used = process.cpuUsage(cpu);
      expect((used.user + used.system) / 1000).toBeLessThan(500);
      expect(logs.messages().filter((msg) => msg === "hashing started")).toEqual([]);
      expect(host.changedModels().map((c) => c.model_id)).toEqual(["acme/changed"]);
      // Put back as the manifest lists it: taken back after it settles, without hashing it.
      await truncate(file, m.total_bytes);
      for (let i = 0; i < 20 && !host.manifest(id("acme/changed")); i++) {
        await watch.scanOnce();
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(served(host)).toEqual(["acme/a", "acme/changed"]);
      expect(host.changedModels()).toEqual([]);
      expect(logs.messages().filter((msg) => msg === "hashing started")).toEqual([]);
    } finally {
      await watch.stop();
      await host.stop();
    }
  });

  it("withdraws a served model within one scan when its file changes, and leaves it alone after", async () => {
    await using store = await tempDir("ic-hashing");
    await model(store.path, "acme/a");
    await register(store.path, "acme/a");
    const file = await model(store.path, "acme/b");
    await register(store.path, "acme/b");
    const host = new StoreHost({ storePath: store.path, logger: silentLogger(), headroomBytes: 0 });
    await host.start();
    const withdrawn: string[] = [];
    const watch = watchOf(host, store.path, withdrawn);
    try {
      await watch.scanOnce();
      expect(served(host)).toEqual(["acme/a", "acme/b"]);
      await truncate(file, BIG);
      await watch.scanOnce();
      expect(served(host)).toEqual(["acme/a"]);
      expect(withdrawn).toEqual(["acme/b"]);
      expect(host.changedModels().map((c) => c.differences[0]!.problem)).toEqual([
        expect.stringMatching(/disk has 21,474,836,480$/),
      ]);
      for (let i = 0; i < 4; i++) {
        await watch.scanOnce();
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(host.hashing()).toEqual([]);
      expect(withdrawn).toEqual(["acme/b"]);
    } finally {
      await watch.stop();
      await host.stop();
    }
  });

  it("serves a model whose old manifest lacks piece hashes at once, beside the others, while they are added", async () => {
    await using store = await tempDir("ic-hashing");
    for (const name of ["acme/a", "acme/b"]) {
      await model(store.path, name);
      await register(store.path, name);
    }
    await model(store.path, "acme/big", BIG);
    await oldManifest(store.path, "acme/big", BIG);
    const host = new StoreHost({ storePath: store.path, logger: silentLogger(), headroomBytes: 0 });
    const t0 = performance.now();
    await host.start();
    try {
      expect(served(host)).toEqual(["acme/a", "acme/b", "acme/big"]);
      expect(performance.now() - t0).toBeLessThan(2000);
      await until(() => (host.hashing()[0]?.done_bytes ?? 0) > 0);
      expect(host.hashing()).toEqual([
        expect.objectContaining({ model_id: "acme/big", kind: "pieces", total_bytes: BIG }),
      ]);
      expect(hashingHealth(host.hashing())[0]!.message).toContain("served whole until then");
    } finally {
      await host.stop();
    }
  });

  it("never makes again the directory of a model removed while its piece hashes are added", async () => {
    await using store = await tempDir("ic-hashing");
    await model(store.path, "acme/gone", 256 * 1024 * 1024);
    await register(store.path, "acme/gone", { pieces: false });
    const dir = join(store.path, "acme--gone");
    const logs = collectingLogger();
    const host = new StoreHost({ storePath: store.path, logger: logs.log, headroomBytes: 0 });
    await host.start();
    try {
      await until(() => (host.hashing()[0]?.done_bytes ?? 0) > 0);
      await rm(dir, { recursive: true });
      // Nobody tells the host (no watch here): the hash reads its open file to the end.
      await until(() => host.hashing().length === 0, 15_000);
      expect(existsSync(dir)).toBe(false);
      expect(logs.messages("warn")).toContain(
        "could not add piece hashes; the files are served whole",
      );
    } finally {
      await host.stop();
    }
  });

  it("reports a backfill that finds a file whose sha256 differs, and does not serve it", async () => {
    await using store = await tempDir("ic-hashing");
    const file = await model(store.path, "acme/m");
    const bytes = (await readFile(file)).length;
    await oldManifest(store.path, "acme/m", bytes);
    const withdrawn: string[] = [];
    const host = new StoreHost({
      storePath: store.path,
      logger: silentLogger(),
      headroomBytes: 0,
      onWithdrawn: (m) => withdrawn.push(m),
    });
    await host.start();
    try {
      await until(() => host.changedModels().length > 0);
      expect(served(host)).toEqual([]);
      expect(withdrawn).toEqual(["acme/m"]);
      expect(host.changedModels()[0]!.differences).toEqual([
        { file: "m.gguf", problem: "sha256 differs from the manifest" },
      ]);
    } finally {
      await host.stop();
    }
  });
});
