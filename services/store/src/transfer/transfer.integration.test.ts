// Transfers between a real store host and staging clients on loopback: a byte changed in the store is
// caught by the piece hash, a store host that dies mid-file leaves verified pieces the next attempt
// checks again and keeps, and store credentials reach manifests and files in both transports.
import { describe, expect, it } from "vitest";
import { existsSync } from "node:fs";
import { open } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Hono } from "hono";
import { serve } from "@hono/node-server";
import { silentLogger } from "@ic/log";
import type { ModelId } from "@ic/protocol";
import { keptPartialBytes } from "./piece-fetch.ts";
import { SLAB_BYTES } from "./slab-pipeline.ts";
import { StagingClient } from "../staging/staging-client.ts";
import { StoreHost } from "../store-host/store-host.ts";
import { sha256Of, tempDir, writeArtifact } from "../test-support.ts";
import { MiB } from "@ic/protocol";

const id = (s: string) => s as ModelId;

async function storeHost(path: string, pieceBytes?: number): Promise<StoreHost> {
  const host = new StoreHost({
    storePath: path,
    logger: silentLogger(),
    headroomBytes: 0,
    pieceBytes,
  });
  await host.start({ host: "127.0.0.1", port: 0 });
  return host;
}

function client(
  root: string,
  storeUrl: string,
  extra: Partial<ConstructorParameters<typeof StagingClient>[0]> = {},
) {
  return new StagingClient({
    root,
    storeUrl,
    settings: { cleanupOnDeactivate: false, keepRecentBytes: 0, headroomBytes: 0 },
    logger: silentLogger(),
    ...extra,
  });
}

describe("transfers from a store host", () => {
  it("catches one byte changed in the store after registration and deletes the partial", async () => {
    await using store = await tempDir("store");
    await writeArtifact(join(store.path, "acme--m", "w.gguf"), SLAB_BYTES + 3 * MiB);
    await using host = await storeHost(store.path);
    await host.register(id("acme/m"));
    // Same size, so the store still serves it: only the hash can tell.
    const fh = await open(join(store.path, "acme--m", "w.gguf"), "r+");
    const [byte] = (await fh.read(Buffer.alloc(1), 0, 1, SLAB_BYTES + 5)).buffer;
    await fh.write(Buffer.from([byte! ^ 0x40]), 0, 1, SLAB_BYTES + 5);
    await fh.close();

    await using root = await tempDir("node");
    await using node = client(root.path, host.url!);
    const r = await node.stage(id("acme/m"));
    expect(r).toMatchObject({ ok: false, cause: "integrity", retryable: true });
    expect(existsSync(join(root.path, "acme--m", "w.gguf"))).toBe(false);
    // The only piece (the file is smaller than one) never counted: nothing of it is kept.
    expect(await keptPartialBytes(join(root.path, "acme--m", "w.gguf"))).toBe(0);
  });

  it("resumes after the store host died mid-file and verifies the prefix it already had", async () => {
    await using store = await tempDir("store");
    const bytes = 3 * SLAB_BYTES + 5 * MiB;
    await writeArtifact(join(store.path, "acme--big", "w.gguf"), bytes);
    const first = await storeHost(store.path, MiB);
    await first.register(id("acme/big"));
    await using root = await tempDir("node");
    await using node = client(root.path, first.url!);
    let stopping: Promise<void> | undefined;
    const r1 = await node.stage(id("acme/big"), {
      onProgress: (p) => {
        if (p.fileDoneBytes >= SLAB_BYTES + MiB) stopping ??= first.stop();
      },
    });
    await stopping;
    expect(r1).toMatchObject({ ok: false, cause: "transfer", retryable: true });
    const final = join(root.path, "acme--big", "w.gguf");
    const kept = await keptPartialBytes(final);
    expect(kept).toBeGreaterThan(SLAB_BYTES);
    expect(kept).toBeLessThan(bytes);
    expect(kept % MiB).toBe(0);

    await using second = await storeHost(store.path, MiB);
    const r2 = await node.stage(id("acme/big"), { storeUrl: second.url });
    expect(r2.ok && r2.models[0]).toMatchObject({ resumedBytes: kept, fetchedBytes: bytes - kept });
    // One request per missing piece, and only those bytes.
    expect(second.stats()).toMatchObject({
      range_requests: (bytes - kept) / MiB,
      bytes_served: bytes - kept,
    });
    expect(await sha256Of(join(root.path, "acme--big", "w.gguf"))).toBe(
      await sha256Of(join(store.path, "acme--big", "w.gguf")),
    );
  });

  it("sends storeHeaders with manifests and files, over node:http and through an injected fetch", async () => {
    await using store = await tempDir("store");
    await writeArtifact(join(store.path, "acme--m", "w.gguf"), 2 * MiB);
    await using host = await storeHost(store.path);
    await host.register(id("acme/m"));
    // The store API behind a bearer check, as a node mounts it.
    const seen: string[] = [];
    const app = new Hono();
    app.use("*", async (c, next) => {
      seen.push(`${c.req.header("authorization") ?? "-"} ${new URL(c.req.url).pathname}`);
      if (c.req.header("authorization") !== "Bearer t0k") return c.json({ error: "no" }, 401);
      return next();
    });
    app.route("/", host.app);
    const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
      const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
    });
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const storeHeaders = { authorization: "Bearer t0k" };
      await using a = await tempDir("node-a");
      await using viaHttp = client(a.path, url, { storeHeaders });
      expect((await viaHttp.stage(id("acme/m"))).ok).toBe(true);
      await using b = await tempDir("node-b");
      await using viaFetch = client(b.path, url, { storeHeaders, fetch: (i, o) => fetch(i, o) });
      expect((await viaFetch.stage(id("acme/m"))).ok).toBe(true);
      expect(seen).toEqual([
        "Bearer t0k /store/models/acme/m/manifest",
        "Bearer t0k /store/models/acme/m/files/w.gguf",
        "Bearer t0k /store/models/acme/m/manifest",
        "Bearer t0k /store/models/acme/m/files/w.gguf",
      ]);
      await using c = await tempDir("node-c");
      await using without = client(c.path, url);
      expect(await without.stage(id("acme/m"))).toMatchObject({ ok: false, cause: "store_error" });
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
