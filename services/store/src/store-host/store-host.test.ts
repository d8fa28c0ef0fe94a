// The store host's HTTP API through app.request(): model list, exact manifests, Range answers and the
// error envelope, plus the guarantees that only manifest files are served and changed files are refused.
import { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "@ic/log";
import {
  ErrorBodySchema,
  StoreManifestSchema,
  StoreModelListSchema,
  type ModelId,
} from "@ic/protocol";
import { StoreHost } from "./store-host.ts";

const MODEL = "acme/tiny" as ModelId;
const weights = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251));
const sha = (b: Buffer | string) => createHash("sha256").update(b).digest("hex");

let dir: string;
let host: StoreHost;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "store-host-"));
  await mkdir(join(dir, "acme--tiny", "sub"), { recursive: true });
  await writeFile(join(dir, "acme--tiny", "model.gguf"), weights);
  await writeFile(join(dir, "acme--tiny", "sub", "mmproj.gguf"), "vision");
  await writeFile(join(dir, "acme--tiny", ".gitattributes"), "ignored");
  await writeFile(join(dir, "secret.txt"), "not an artifact");
  host = new StoreHost({ storePath: dir, logger: silentLogger(), headroomBytes: 0 });
  await host.start();
  await host.register(MODEL);
});

afterEach(async () => {
  await host.stop();
  await rm(dir, { recursive: true, force: true });
});

const get = (path: string, headers: Record<string, string> = {}, method = "GET") =>
  host.app.request(path, { method, headers });

describe("store host HTTP API", () => {
  it("lists registered models with their exact totals", async () => {
    const res = await get("/store/models");
    const body = StoreModelListSchema.parse(await res.json());
    expect(body.models).toEqual([{ model_id: MODEL, total_bytes: 1006, files: 2 }]);
  });

  it("serves an exact manifest with sizes and sha256, dotfiles excluded", async () => {
    const res = await get("/store/models/acme/tiny/manifest");
    expect(res.status).toBe(200);
    const m = StoreManifestSchema.parse(await res.json());
    expect(m.files).toEqual([
      // One piece each (files under the 16 MiB piece size): its hash is the file's.
      {
        path: "model.gguf",
        bytes: 1000,
        sha256: sha(weights),
        pieces: { bytes: 16 * 1024 * 1024, sha256: [sha(weights)] },
      },
      {
        path: "sub/mmproj.gguf",
        bytes: 6,
        sha256: sha("vision"),
        pieces: { bytes: 16 * 1024 * 1024, sha256: [sha("vision")] },
      },
    ]);
    expect(m.total_bytes).toBe(1006);
    expect(m.source).toBe("local");
  });

  it("serves a whole file with length, etag and accept-ranges", async () => {
    const res = await get("/store/models/acme/tiny/files/model.gguf");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-length")).toBe("1000");
    expect(res.headers.get("accept-ranges")).toBe("bytes");
    expect(res.headers.get("etag")).toBe(`"${sha(weights)}"`);
    expect(Buffer.from(await res.arrayBuffer())).toEqual(weights);
  });

  it("serves nested files", async () => {
    const res = await get("/store/models/acme/tiny/files/sub/mmproj.gguf");
    expect(await res.text()).toBe("vision");
  });

  it("serves a file whatever equivalent percent-encoding names the model (was a 404)", async () => {
    for (const path of [
      "/store/models/%61cme/tiny/files/model.gguf",
      "/store/models/acme/%74%69%6e%79/files/model.gguf",
      "/store/models/%61%63%6D%65/tiny/files/sub/%6Dmproj.gguf",
    ]) {
      const res = await get(path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("x-content-sha256")).toMatch(/^[0-9a-f]{64}$/);
    }
    // Mounted under a prefix, the file path still starts after .../files/.
    const outer = new Hono();
    outer.route("/node", host.app);
    const res = await outer.request("/node/store/models/%61cme/tiny/files/model.gguf");
    expect(Buffer.from(await res.arrayBuffer())).toEqual(weights);
  });

  it("answers a range with 206 and exactly those bytes", async () => {
    const res = await get("/store/models/acme/tiny/files/model.gguf", { range: "bytes=990-" });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe("bytes 990-999/1000");
    expect(res.headers.get("content-length")).toBe("10");
    expect(Buffer.from(await res.arrayBuffer())).toEqual(weights.subarray(990));
    expect(host.stats().range_requests).toBe(1);
  });

  it("answers an unsatisfiable range with 416 and the size", async () => {
    const res = await get("/store/models/acme/tiny/files/model.gguf", { range: "bytes=1000-" });
    expect(res.status).toBe(416);
    expect(res.headers.get("content-range")).toBe("bytes */1000");
  });

  it("ignores the range when If-Range names other content", async () => {
    const res = await get("/store/models/acme/tiny/files/model.gguf", {
      range: "bytes=10-",
      "if-range": '"0000"',
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-length")).toBe("1000");
    await res.arrayBuffer();
  });

  it("honours the range when If-Range matches the etag", async () => {
    const res = await get("/store/models/acme/tiny/files/model.gguf", {
      range: "bytes=10-",
      "if-range": `"${sha(weights)}"`,
    });
    expect(res.status).toBe(206);
    await res.arrayBuffer();
  });

  it("answers HEAD without a body", async () => {
    const res = await get("/store/models/acme/tiny/files/model.gguf", {}, "HEAD");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-length")).toBe("1000");
    expect((await res.arrayBuffer()).byteLength).toBe(0);
  });

  it.each([
    ["a file outside the manifest", "/store/models/acme/tiny/files/.gitattributes", 404],
    ["an escaping path", "/store/models/acme/tiny/files/..%2F..%2Fsecret.txt", 404],
    ["an unregistered model", "/store/models/acme/other/manifest", 404],
    ["an invalid model id", "/store/models/ac..me/tiny/manifest", 400],
    ["an unknown route", "/nope", 404],
  ])("refuses %s with the typed error envelope", async (_name, path, status) => {
    const res = await get(path);
    expect(res.status).toBe(status);
    expect(ErrorBodySchema.safeParse(await res.json()).success).toBe(true);
  });

  it("refuses a file whose size changed since registration", async () => {
    await writeFile(join(dir, "acme--tiny", "model.gguf"), "shorter");
    const res = await get("/store/models/acme/tiny/files/model.gguf");
    expect(res.status).toBe(409);
    const body = ErrorBodySchema.parse(await res.json());
    expect(body.error.message).toMatch(/register the model again/);
  });

  it("reloads manifests on restart and skips models whose files changed", async () => {
    await host.stop();
    const again = new StoreHost({ storePath: dir, logger: silentLogger(), headroomBytes: 0 });
    await again.start();
    expect(again.models().map((m) => m.model_id)).toEqual([MODEL]);
    await again.stop();
    await writeFile(join(dir, "acme--tiny", "model.gguf"), "changed");
    const third = new StoreHost({ storePath: dir, logger: silentLogger(), headroomBytes: 0 });
    await third.start();
    expect(third.models()).toEqual([]);
    await third.stop();
  });
});
