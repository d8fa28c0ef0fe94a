// Staging from peers on loopback: a store host with small pieces, nodes that serve their copies over
// HTTP (routes.ts) and stage from each other: bytes from peers, a peer that sends wrong bytes,
// pieces of a copy still being staged, resume from verified pieces, and manifests that predate pieces.
import { describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { open, readFile, rm, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { serve, type ServerType } from "@hono/node-server";
import { Hono } from "hono";
import { silentLogger } from "@ic/log";
import { errorBody, httpStatusFor, ServiceError, type ModelId } from "@ic/protocol";
import { StoreHost } from "../store-host/store-host.ts";
import { MANIFEST_FILE } from "../store-host/manifests.ts";
import { sha256Of, tempDir, writeArtifact, type TempDir } from "../test-support.ts";
import { piecesFile } from "../transfer/piece-fetch.ts";
import { partFile } from "../paths.ts";
import { peerCopyRoutes, type PeerServeStats } from "./routes.ts";
import type { PeerEndpoint } from "./peer-swarm.ts";
import { StagingClient } from "./staging-client.ts";

const MODEL = "org/model" as ModelId;
const PIECE = 256 * 1024;
const FILE_BYTES = 4 * 1024 * 1024 + 12_345;

interface Node extends AsyncDisposable {
  readonly name: string;
  readonly client: StagingClient;
  readonly url: string;
  readonly served: PeerServeStats;
  readonly root: string;
}

async function startNode(
  name: string,
  storeUrl: string,
  peers: () => readonly PeerEndpoint[],
): Promise<Node> {
  const dir = await tempDir(`peer-${name}`);
  const client = new StagingClient({
    root: dir.path,
    storeUrl,
    settings: { cleanupOnDeactivate: false, keepRecentBytes: 40 * 1024 ** 3, headroomBytes: 0 },
    logger: silentLogger(),
    peers,
    nodeName: name,
  });
  await client.start();
  const app = new Hono();
  app.onError((err, c) => {
    const e = err instanceof ServiceError ? err : new ServiceError("internal", String(err));
    return c.json(errorBody(e), httpStatusFor(e.code));
  });
  const served: PeerServeStats = { bytes_served: 0, range_requests: 0 };
  peerCopyRoutes(app, () => client, served);
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    name,
    client,
    url,
    served,
    root: dir.path,
    async [Symbol.asyncDispose]() {
      await client.stop();
      await new Promise<void>((r) => server.close(() => r()));
      await dir[Symbol.asyncDispose]();
    },
  };
}

async function startStore(): Promise<
  { host: StoreHost; dir: TempDir; sha: string } & AsyncDisposable
> {
  const dir = await tempDir("peer-store");
  const digest = await writeArtifact(join(dir.path, "org--model", "model.gguf"), FILE_BYTES);
  await writeArtifact(join(dir.path, "org--model", "config.json"), 300);
  const host = new StoreHost({
    storePath: dir.path,
    logger: silentLogger(),
    headroomBytes: 0,
    pieceBytes: PIECE,
  });
  await host.start({ host: "127.0.0.1", port: 0 });
  await host.register(MODEL);
  return {
    host,
    dir,
    sha: digest,
    async [Symbol.asyncDispose]() {
      await host.stop();
      await dir[Symbol.asyncDispose]();
    },
  };
}

const endpoint = (n: Node): PeerEndpoint => ({ name: n.name, url: n.url });

describe("staging from peers", () => {
  it("the store host lists piece hashes in the manifest", async () => {
    await using store = await startStore();
    const f = store.host.manifest(MODEL)!.files.find((x) => x.path === "model.gguf")!;
    expect(f.pieces?.bytes).toBe(PIECE);
    expect(f.pieces?.sha256).toHaveLength(Math.ceil(FILE_BYTES / PIECE));
    const first = (await readFile(join(store.dir.path, "org--model", "model.gguf"))).subarray(
      0,
      PIECE,
    );
    expect(f.pieces?.sha256[0]).toBe(createHash("sha256").update(first).digest("hex"));
  });

  it("a node stages from a peer's complete copy and from the store host at once", async () => {
    await using store = await startStore();
    const peers: Node[] = [];
    await using a = await startNode("a", store.host.url!, () => []);
    await using b = await startNode("b", store.host.url!, () => peers.map(endpoint));
    const first = await a.client.stage(MODEL);
    expect(first.ok).toBe(true);
    peers.push(a);
    const servedBefore = store.host.stats().bytes_served;
    const r = await b.client.stage(MODEL);
    if (!r.ok) throw new Error(r.message);
    const m = r.models[0]!;
    expect(await sha256Of(join(m.path, "model.gguf"))).toBe(store.sha);
    expect(m.peerBytes).toBeGreaterThan(0);
    expect(a.served.bytes_served).toBe(m.peerBytes);
    // What the peer sent, the store host did not.
    expect(store.host.stats().bytes_served - servedBefore).toBeLessThan(FILE_BYTES + 300);
    expect(existsSync(piecesFile(join(m.path, "model.gguf")))).toBe(false);
  });

  it("a peer that sends wrong bytes gets nothing more; the copy completes and is verified", async () => {
    await using store = await startStore();
    const peers: Node[] = [];
    await using a = await startNode("a", store.host.url!, () => []);
    await using b = await startNode("b", store.host.url!, () => peers.map(endpoint));
    expect((await a.client.stage(MODEL)).ok).toBe(true);
    // Every piece of a's copy is damaged on disk after it was verified.
    const fh = await open(join(a.client.modelPath(MODEL), "model.gguf"), "r+");
    for (let at = 100; at < FILE_BYTES; at += PIECE) await fh.write(Buffer.from("XXXX"), 0, 4, at);
    await fh.close();
    peers.push(a);
    const r = await b.client.stage(MODEL);
    if (!r.ok) throw new Error(r.message);
    expect(await sha256Of(join(r.models[0]!.path, "model.gguf"))).toBe(store.sha);
    // config.json (intact) may come from the peer; of the weights, at most the two requests under
    // way when the first bad piece came back.
    expect(a.served.range_requests).toBeGreaterThan(0);
    expect(a.served.range_requests).toBeLessThanOrEqual(3);
  });

  it("a copy being staged serves its verified pieces and refuses the others", async () => {
    await using store = await startStore();
    await using a = await startNode("a", store.host.url!, () => []);
    let seen: Awaited<ReturnType<StagingClient["peerPieces"]>> | undefined;
    let inside: Promise<{ path: string }> | undefined;
    let outside: Promise<unknown> | undefined;
    const r = await a.client.stage(MODEL, {
      onProgress: (p) => {
        if (seen || p.file !== "model.gguf" || p.fileDoneBytes === 0) return;
        // Read at once, while the copy is in progress.
        void a.client.peerPieces(MODEL).then((x) => (seen = x));
        inside = a.client
          .peerFile(MODEL, "model.gguf", { start: 0, end: 0 })
          .catch(() => ({ path: "" }));
        outside = a.client.peerFile(MODEL, "model.gguf", { start: 0, end: FILE_BYTES - 1 }).then(
          () => "served",
          (e: unknown) => e,
        );
      },
    });
    expect(r.ok).toBe(true);
    const file = seen?.files.find((f) => f.path === "model.gguf");
    expect(file?.have).not.toBe("all");
    expect(file?.piece_bytes).toBe(PIECE);
    expect(await outside).toMatchObject({ code: "conflict" });
    // Piece 0 may or may not be among the first verified; if it is, it is read from the partial.
    const got = await inside;
    if (got?.path) expect(got.path).toBe(partFile(join(a.client.modelPath(MODEL), "model.gguf")));
    // Complete now: everything, from the final files.
    const all = await a.client.peerPieces(MODEL);
    expect(all?.files.every((f) => f.have === "all")).toBe(true);
    expect(await a.client.peerPieces("org/other" as ModelId)).toBeNull();
  });

  it("a peer's range request needs a Range header and gets 409 for a file no longer on disk", async () => {
    await using store = await startStore();
    await using a = await startNode("a", store.host.url!, () => []);
    expect((await a.client.stage(MODEL)).ok).toBe(true);
    const url = `${a.url}/store/staged/org/model/files/model.gguf`;
    const ok = await fetch(url, { headers: { range: "bytes=0-9" } });
    expect(ok.status).toBe(206);
    expect((await ok.arrayBuffer()).byteLength).toBe(10);
    const noRange = await fetch(url);
    expect(noRange.status).toBe(400);
    await noRange.body?.cancel();
    await rm(join(a.client.modelPath(MODEL), "model.gguf"));
    const gone = await fetch(url, { headers: { range: "bytes=0-9" } });
    expect(gone.status).toBe(409);
    expect(((await gone.json()) as { error: { code: string } }).error.code).toBe("conflict");
  });

  it("an interrupted copy keeps its verified pieces and resumes from them", async () => {
    await using store = await startStore();
    await using b = await startNode("b", store.host.url!, () => []);
    const kill = new AbortController();
    const first = await b.client.stage(MODEL, {
      signal: kill.signal,
      onProgress: (p) => {
        if (p.file === "model.gguf" && p.fileDoneBytes >= 4 * PIECE) kill.abort();
      },
    });
    expect(first.ok).toBe(false);
    const final = join(b.client.modelPath(MODEL), "model.gguf");
    expect(existsSync(piecesFile(final))).toBe(true);
    const r = await b.client.stage(MODEL);
    if (!r.ok) throw new Error(r.message);
    expect(r.models[0]!.resumedBytes).toBeGreaterThanOrEqual(4 * PIECE);
    expect(r.models[0]!.fetchedBytes).toBeLessThan(FILE_BYTES);
    expect(await sha256Of(final)).toBe(store.sha);
  });

  it("a manifest written before piece hashes gets them at start; staging works either way", async () => {
    const dir = await tempDir("peer-old-store");
    await using _dir = dir;
    await writeArtifact(join(dir.path, "org--model", "model.gguf"), FILE_BYTES);
    const opts = {
      storePath: dir.path,
      logger: silentLogger(),
      headroomBytes: 0,
      pieceBytes: PIECE,
    };
    const first = new StoreHost(opts);
    await first.start();
    await first.register(MODEL);
    await first.stop();
    const manifestPath = join(dir.path, "org--model", MANIFEST_FILE);
    const old = JSON.parse(await readFile(manifestPath, "utf8")) as {
      files: { pieces?: unknown }[];
    };
    for (const f of old.files) delete f.pieces;
    await writeFile(manifestPath, JSON.stringify(old));
    const host = new StoreHost(opts);
    await host.start({ host: "127.0.0.1", port: 0 });
    try {
      const deadline = Date.now() + 10_000;
      while (!host.manifest(MODEL)?.files[0]?.pieces && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      expect(host.manifest(MODEL)?.files[0]?.pieces?.bytes).toBe(PIECE);
      const onDisk = JSON.parse(await readFile(manifestPath, "utf8")) as typeof old;
      expect(onDisk.files[0]?.pieces).toBeDefined();
      await using n = await startNode("n", host.url!, () => []);
      const r = await n.client.stage(MODEL);
      expect(r.ok).toBe(true);
    } finally {
      await host.stop();
    }
  });
});
