// Model-hub paths against the testkit's hub emulator: the node's direct fallback when the store is down
// (rule 8) and store-side downloads into store_path (rule 7), both with the exact serialized reserve check.
import { describe, expect, it } from "vitest";
import { readdir, readFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { silentLogger } from "@ic/log";
import { MiB, StoreManifestSchema, type ModelId } from "@ic/protocol";
import { startHubEmulator, type HubEmulator } from "@ic/testkit";
import { createHubSource } from "./hub.ts";
import { StoreHost } from "../store-host/store-host.ts";
import { StagingClient } from "../staging/staging-client.ts";
import { budgetDisk, tempDir } from "../test-support.ts";
import type { Disk } from "../disk.ts";

const id = (s: string) => s as ModelId;
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

async function hubWith(
  repos: Record<string, Record<string, Buffer | string>>,
): Promise<HubEmulator> {
  const hub = await startHubEmulator();
  for (const [repo, files] of Object.entries(repos)) await hub.addRepo(repo, files);
  return hub;
}

/** A URL nothing listens on: a store host that was started and stopped. */
async function deadStoreUrl(): Promise<string> {
  await using dir = await tempDir("dead-store");
  const host = new StoreHost({ storePath: dir.path, logger: silentLogger(), headroomBytes: 0 });
  await host.start({ port: 0 });
  const url = host.url ?? "";
  await host.stop();
  return url;
}

function fallbackClient(
  root: string,
  modelCachePath: string,
  hub: HubEmulator,
  o: { storeUrl?: string; disk?: Disk; headroomBytes?: number } = {},
) {
  return new StagingClient({
    root,
    storeUrl: o.storeUrl,
    settings: {
      cleanupOnDeactivate: true,
      keepRecentBytes: 0,
      headroomBytes: o.headroomBytes ?? 0,
    },
    hub: { source: createHubSource({ hubUrl: hub.url }), modelCachePath },
    disk: o.disk,
    logger: silentLogger(),
    manifestTimeoutMs: 2000,
  });
}

describe("direct model-hub fallback when the store is unreachable (rule 8)", () => {
  it("downloads into the model cache with every file verified, leaving the staging root alone", async () => {
    const weights = randomBytes(3 * MiB);
    await using hub = await hubWith({
      "acme/base": { "model.gguf": weights, "config.json": '{"a":1}' },
    });
    await using root = await tempDir("staging");
    await using cache = await tempDir("model-cache");
    await using node = fallbackClient(root.path, cache.path, hub, {
      storeUrl: await deadStoreUrl(),
    });
    await node.start();

    const r = await node.stage(id("acme/base"));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.models[0]).toMatchObject({
      source: "hub",
      path: join(cache.path, "acme--base"),
      fetchedBytes: 3 * MiB + 7,
    });
    expect(sha(await readFile(join(cache.path, "acme--base", "model.gguf")))).toBe(sha(weights));
    expect(await readFile(join(cache.path, "acme--base", "config.json"), "utf8")).toBe('{"a":1}');
    expect(await readdir(root.path)).toEqual([]);

    // A second request reuses the verified copy: nothing is fetched again.
    const before = hub.requests.filter((q) => q.path.includes("/resolve/")).length;
    const again = await node.stage(id("acme/base"));
    expect(again.ok && again.models[0]!.reusedBytes).toBe(3 * MiB + 7);
    expect(hub.requests.filter((q) => q.path.includes("/resolve/")).length).toBe(before);
  });

  it("checks the model cache's own filesystem and neither evicts nor rejects on the staging one", async () => {
    await using hub = await hubWith({ "acme/base": { "model.gguf": randomBytes(2 * MiB) } });
    await using root = await tempDir("staging");
    await using cache = await tempDir("model-cache");
    const storeUrl = await deadStoreUrl();

    // Staging volume full, model cache roomy: the download goes ahead.
    await using ok = fallbackClient(root.path, cache.path, hub, {
      storeUrl,
      headroomBytes: MiB,
      disk: budgetDisk({ [root.path]: 0, [cache.path]: 4 * MiB }),
    });
    await ok.start();
    expect((await ok.stage(id("acme/base"))).ok).toBe(true);

    // Model cache too small for 2 MiB + 1 MiB reserve: refused before writing, with the arithmetic.
    await using cache2 = await tempDir("model-cache");
    await using refused = fallbackClient(root.path, cache2.path, hub, {
      storeUrl,
      headroomBytes: MiB,
      disk: budgetDisk({ [root.path]: 1024 * MiB, [cache2.path]: 3 * MiB - 1 }),
    });
    await refused.start();
    const r = await refused.stage(id("acme/base"));
    expect(r).toMatchObject({ ok: false, type: "DownloadFailed", cause: "no_fit" });
    if (r.ok) return;
    expect(r.message).toContain(`no safe disk fit for acme/base on ${cache2.path}`);
    expect(r.arithmetic).toMatchObject({
      requiredBytes: 2 * MiB,
      headroomBytes: MiB,
      freeBytes: 3 * MiB - 1,
      reclaimableBytes: 0,
    });
    expect(existsSync(join(cache2.path, "acme--base"))).toBe(false);
  });

  it("resumes an interrupted hub download with a Range request", async () => {
    const weights = randomBytes(8 * MiB);
    await using hub = await hubWith({ "acme/big": { "model.gguf": weights } });
    await using root = await tempDir("staging");
    await using cache = await tempDir("model-cache");
    const first = fallbackClient(root.path, cache.path, hub);
    await first.start();
    const kill = new AbortController();
    const r1 = await first.stage(id("acme/big"), {
      signal: kill.signal,
      onProgress: (p) => p.fileDoneBytes >= 3 * MiB && kill.abort(),
    });
    await first.stop();
    expect(r1).toMatchObject({ ok: false, cause: "aborted" });

    await using second = fallbackClient(root.path, cache.path, hub);
    await second.start();
    const r2 = await second.stage(id("acme/big"));
    expect(r2.ok).toBe(true);
    if (!r2.ok) return;
    const resumed = r2.models[0]!.resumedBytes;
    expect(resumed).toBeGreaterThan(0);
    expect(r2.models[0]!.fetchedBytes).toBe(8 * MiB - resumed);
    expect(hub.requests.some((q) => q.range === `bytes=${resumed}-${8 * MiB - 1}`)).toBe(true);
    expect(sha(await readFile(join(cache.path, "acme--big", "model.gguf")))).toBe(sha(weights));
  });
});

/** The commit a repo's default branch points at, as the hub says. */
async function commitOf(hubUrl: string, repo: string): Promise<string> {
  const info = (await (await fetch(`${hubUrl}/api/models/${repo}`)).json()) as { sha: string };
  return info.sha;
}

describe("store-side model-hub downloads (rule 7)", () => {
  it("downloads a repo into store_path, registers an exact manifest and serves it to staging", async () => {
    const weights = randomBytes(2 * MiB);
    await using hub = await hubWith({
      "acme/base": { "model.gguf": weights, "tokenizer.json": "{}", "sub/mmproj.gguf": "vision" },
    });
    await using storeDir = await tempDir("store");
    await using host = new StoreHost({
      storePath: storeDir.path,
      logger: silentLogger(),
      headroomBytes: 0,
      hub: createHubSource({ hubUrl: hub.url }),
    });
    await host.start({ port: 0 });

    const r = await host.downloadFromHub(id("acme/base"));
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.fetchedBytes).toBe(2 * MiB + 2 + 6);
    const manifest = StoreManifestSchema.parse(
      await (await fetch(`${host.url}/store/models/acme/base/manifest`)).json(),
    );
    // The branch was resolved to its commit, and every file was fetched at that commit.
    const commit = await commitOf(hub.url, "acme/base");
    expect(manifest).toMatchObject({ source: "hub", revision: commit, total_bytes: 2 * MiB + 8 });
    const fetches = hub.requests.filter((q) => q.path.includes("/resolve/"));
    expect(fetches.length).toBeGreaterThan(0);
    expect(fetches.every((q) => q.path.startsWith(`/acme/base/resolve/${commit}/`))).toBe(true);
    expect(manifest.files.find((f) => f.path === "model.gguf")?.sha256).toBe(sha(weights));
    expect(existsSync(join(storeDir.path, "acme--base", ".ic-download.json"))).toBe(false);

    await using root = await tempDir("staging");
    await using node = new StagingClient({
      root: root.path,
      storeUrl: host.url,
      settings: { cleanupOnDeactivate: true, keepRecentBytes: 0, headroomBytes: 0 },
      logger: silentLogger(),
    });
    await node.start();
    const staged = await node.stage(id("acme/base"));
    expect(staged.ok && staged.models[0]!.fetchedBytes).toBe(2 * MiB + 8);

    // Downloading again finds everything present and fetches nothing.
    const again = await host.downloadFromHub(id("acme/base"));
    expect(again).toMatchObject({ ok: true, reusedBytes: 2 * MiB + 8, fetchedBytes: 0 });
  });

  it("pulls the revision asked for; an unknown one fails before writing", async () => {
    await using hub = await hubWith({ "acme/base": { "model.gguf": randomBytes(MiB) } });
    await using storeDir = await tempDir("store");
    await using host = new StoreHost({
      storePath: storeDir.path,
      logger: silentLogger(),
      headroomBytes: 0,
      hub: createHubSource({ hubUrl: hub.url }),
    });
    await host.start();
    const missing = await host.downloadFromHub(id("acme/base"), { revision: "no-such-branch" });
    expect(missing).toMatchObject({ ok: false, cause: "hub_error" });
    expect(!missing.ok && missing.message).toContain("at no-such-branch");
    expect(existsSync(join(storeDir.path, "acme--base"))).toBe(false);
    const commit = await commitOf(hub.url, "acme/base");
    const seen: number[] = [];
    const r = await host.downloadFromHub(id("acme/base"), {
      revision: commit,
      onProgress: (p) => seen.push(p.filesDone),
    });
    expect(r).toMatchObject({ ok: true, manifest: { revision: commit } });
    // Reported once admitted (nothing there yet), then as the file completes.
    expect(seen[0]).toBe(0);
    expect(seen.at(-1)).toBe(1);
  });

  it("fails before writing when store_path cannot keep the reserve", async () => {
    await using hub = await hubWith({ "acme/base": { "model.gguf": randomBytes(2 * MiB) } });
    await using storeDir = await tempDir("store");
    await using host = new StoreHost({
      storePath: storeDir.path,
      logger: silentLogger(),
      headroomBytes: MiB,
      disk: budgetDisk({ [storeDir.path]: 3 * MiB - 1 }),
      hub: createHubSource({ hubUrl: hub.url }),
    });
    await host.start();
    const r = await host.downloadFromHub(id("acme/base"));
    expect(r).toMatchObject({ ok: false, type: "DownloadFailed", cause: "no_fit" });
    if (r.ok) return;
    expect(r.message).toContain(`on ${storeDir.path}`);
    expect(r.message).toContain("transfer not started");
    expect(existsSync(join(storeDir.path, "acme--base"))).toBe(false);
    expect(hub.requests.some((q) => q.path.includes("/resolve/"))).toBe(false);
  });

  it("serializes admission with the transfer, so two downloads never count the same free bytes", async () => {
    await using hub = await hubWith({
      "acme/one": { "model.gguf": randomBytes(2 * MiB) },
      "acme/two": { "model.gguf": randomBytes(2 * MiB) },
    });
    await using storeDir = await tempDir("store");
    await using host = new StoreHost({
      storePath: storeDir.path,
      logger: silentLogger(),
      headroomBytes: MiB,
      // Room for one 2 MiB model plus the 1 MiB reserve, not for two.
      disk: budgetDisk({ [storeDir.path]: 5 * MiB }),
      hub: createHubSource({ hubUrl: hub.url }),
    });
    await host.start();
    const [one, two] = await Promise.all([
      host.downloadFromHub(id("acme/one")),
      host.downloadFromHub(id("acme/two")),
    ]);
    expect(one.ok).toBe(true);
    expect(two).toMatchObject({ ok: false, cause: "no_fit" });
    expect(host.models().map((m) => m.model_id)).toEqual(["acme/one"]);
  });
});
