// Protocol-level tests of the hub emulator and the checkpoint fixture, with plain fetch.
// Client compatibility with @huggingface/hub is covered where that library is a dependency.
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateMtpCheckpoint } from "./checkpoint.ts";
import type { MtpCheckpoint } from "./checkpoint.ts";
import { startHubEmulator } from "./emulator.ts";
import type { HubEmulator } from "./emulator.ts";
import { parseCardData } from "./front-matter.ts";
import { encodeSafetensors, parseSafetensors } from "./safetensors.ts";

const TOKEN = "hf_emulatortoken";
const auth = { Authorization: `Bearer ${TOKEN}` };
const sha256 = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

describe("hub emulator", () => {
  let hub: HubEmulator;
  let ckpt: MtpCheckpoint;

  beforeAll(async () => {
    hub = await startHubEmulator({ token: TOKEN, multipartChunkSize: 1000 });
    ckpt = await generateMtpCheckpoint({ baseModel: "org/upstream" });
    await hub.addRepo("org/model", ckpt.repoFiles());
    await hub.addRepo("org/secret", { "a.txt": "hidden" }, { private: true });
  });
  afterAll(async () => {
    await hub.stop();
    await ckpt.cleanup();
  });

  it("serves model info with card data parsed from the README and the siblings", async () => {
    const res = await fetch(`${hub.url}/api/models/org/model/revision/HEAD?expand=cardData`);
    expect(res.status).toBe(200);
    const info = (await res.json()) as {
      id: string;
      cardData: Record<string, unknown>;
      siblings: { rfilename: string }[];
    };
    expect(info.id).toBe("org/model");
    expect(info.cardData["base_model"]).toBe("org/upstream");
    expect(info.siblings.map((s) => s.rfilename)).toEqual([...ckpt.files].sort());
  });

  it("answers Range reads with 206 and exact bytes, HEAD with the size", async () => {
    const shard = ckpt.files[0] ?? "";
    const local = await readFile(join(ckpt.dir, shard));
    const res = await fetch(`${hub.url}/org/model/resolve/main/${shard}`, {
      headers: { Range: "bytes=8-23" },
    });
    expect(res.status).toBe(206);
    expect(res.headers.get("content-range")).toBe(`bytes 8-23/${local.length}`);
    expect(Buffer.from(await res.arrayBuffer())).toEqual(local.subarray(8, 24));
    const head = await fetch(`${hub.url}/org/model/resolve/main/${shard}`, { method: "HEAD" });
    expect(head.headers.get("content-length")).toBe(String(local.length));
    expect(head.headers.get("etag")).toBe(`"${sha256(local)}"`);
    expect(head.headers.get("x-repo-commit")).toMatch(/^[0-9a-f]{40}$/);
    const bad = await fetch(`${hub.url}/org/model/resolve/main/${shard}`, {
      headers: { Range: `bytes=${local.length}-` },
    });
    expect(bad.status).toBe(416);
  });

  it("reports missing files with EntryNotFound and hides private repos without the token", async () => {
    const missing = await fetch(`${hub.url}/org/model/resolve/main/nope.bin`, {
      headers: { Range: "bytes=0-0" },
    });
    expect(missing.status).toBe(404);
    expect(missing.headers.get("x-error-code")).toBe("EntryNotFound");
    expect((await fetch(`${hub.url}/org/secret/resolve/main/a.txt`)).status).toBe(401);
    const ok = await fetch(`${hub.url}/org/secret/resolve/main/a.txt`, { headers: auth });
    expect(await ok.text()).toBe("hidden");
    const wrong = await fetch(`${hub.url}/org/model/resolve/main/config.json`, {
      headers: { Authorization: "Bearer hf_wrong" },
    });
    expect(wrong.status).toBe(401);
  });

  it("lists the tree with LFS sha256 for weights and git blob ids for small files", async () => {
    const res = await fetch(
      `${hub.url}/api/models/org/model/tree/main?recursive=true&expand=false`,
    );
    const entries = (await res.json()) as {
      path: string;
      oid: string;
      size: number;
      lfs?: { oid: string };
    }[];
    const config = entries.find((e) => e.path === "config.json");
    const text = await readFile(join(ckpt.dir, "config.json"));
    expect(config?.lfs).toBeUndefined();
    expect(config?.oid).toBe(
      createHash("sha1").update(`blob ${text.length}\0`).update(text).digest("hex"),
    );
    const shard = entries.find((e) => e.path.endsWith(".safetensors"));
    expect(shard?.lfs?.oid).toBe(sha256(await readFile(join(ckpt.dir, shard?.path ?? ""))));
  });

  it("takes a repo through create, preupload, LFS multipart upload and commit", async () => {
    const created = await fetch(`${hub.url}/api/repos/create`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({ name: "sidecar", organization: "me", type: "model" }),
    });
    expect(created.status).toBe(200);
    const again = await fetch(`${hub.url}/api/repos/create`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({ name: "sidecar", organization: "me" }),
    });
    expect(again.status).toBe(409);

    const weights = encodeSafetensors([
      { name: "x", dtype: "U8", shape: [2500], data: new Uint8Array(2500).fill(3) },
    ]);
    const oid = sha256(weights);
    const pre = await fetch(`${hub.url}/api/models/me/sidecar/preupload/main`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/json" },
      body: JSON.stringify({
        files: [
          { path: "w.safetensors", size: weights.length, sample: "" },
          { path: "a.md", size: 3, sample: "" },
        ],
      }),
    });
    expect(
      ((await pre.json()) as { files: { uploadMode: string }[] }).files.map((f) => f.uploadMode),
    ).toEqual(["lfs", "regular"]);

    const batch = await fetch(`${hub.url}/me/sidecar.git/info/lfs/objects/batch`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/vnd.git-lfs+json" },
      body: JSON.stringify({
        operation: "upload",
        transfers: ["basic", "multipart"],
        objects: [{ oid, size: weights.length }],
      }),
    });
    const action = (
      (await batch.json()) as {
        objects: { actions: { upload: { href: string; header: Record<string, string> } } }[];
      }
    ).objects[0]?.actions.upload;
    expect(action?.header["chunk_size"]).toBe("1000");
    const partUrls = Object.keys(action?.header ?? {})
      .filter((k) => /^\d+$/.test(k))
      .sort()
      .map((k) => action?.header[k] ?? "");
    expect(partUrls).toHaveLength(3);
    const parts = [];
    for (const [i, url] of partUrls.entries()) {
      const r = await fetch(url, {
        method: "PUT",
        body: weights.subarray(i * 1000, (i + 1) * 1000),
      });
      expect(r.status).toBe(200);
      parts.push({ partNumber: i + 1, etag: r.headers.get("etag") ?? "" });
    }
    const done = await fetch(action?.href ?? "", {
      method: "POST",
      body: JSON.stringify({ oid, parts }),
    });
    expect(done.status).toBe(200);

    const commitBody = [
      { key: "header", value: { summary: "add sidecar" } },
      {
        key: "lfsFile",
        value: { path: "w.safetensors", algo: "sha256", oid, size: weights.length },
      },
      {
        key: "file",
        value: {
          path: "README.md",
          content: Buffer.from("---\nbase_model: org/up\n---\n").toString("base64"),
          encoding: "base64",
        },
      },
    ]
      .map((l) => JSON.stringify(l))
      .join("\n");
    const commit = await fetch(`${hub.url}/api/models/me/sidecar/commit/main`, {
      method: "POST",
      headers: { ...auth, "Content-Type": "application/x-ndjson" },
      body: commitBody,
    });
    expect(commit.status).toBe(200);
    expect(await hub.readFile("me/sidecar", "w.safetensors")).toEqual(weights);
    expect(hub.listRepoFiles("me/sidecar")).toEqual(["README.md", "w.safetensors"]);
    expect(hub.commitTitles("me/sidecar")?.at(-1)).toBe("add sidecar");
  });

  it("refuses writes without the token and commits that name unuploaded LFS objects", async () => {
    const noAuth = await fetch(`${hub.url}/api/repos/create`, {
      method: "POST",
      body: JSON.stringify({ name: "x" }),
    });
    expect(noAuth.status).toBe(401);
    const commit = await fetch(`${hub.url}/api/models/me/sidecar/commit/main`, {
      method: "POST",
      headers: auth,
      body: [
        JSON.stringify({ key: "header", value: { summary: "bad" } }),
        JSON.stringify({ key: "lfsFile", value: { path: "z.bin", oid: "0".repeat(64), size: 5 } }),
      ].join("\n"),
    });
    expect(commit.status).toBe(422);
  });

  it("deletes a repo for its owner (401 without the token, 404 when it is gone)", async () => {
    const body = JSON.stringify({ name: "doomed", organization: "me", type: "model" });
    const headers = { ...auth, "Content-Type": "application/json" };
    await fetch(`${hub.url}/api/repos/create`, { method: "POST", headers, body });
    expect(hub.listRepoFiles("me/doomed")).toEqual([]);
    const anon = await fetch(`${hub.url}/api/repos/delete`, { method: "DELETE", body });
    expect(anon.status).toBe(401);
    const del = await fetch(`${hub.url}/api/repos/delete`, { method: "DELETE", headers, body });
    expect(del.status).toBe(200);
    expect(hub.listRepoFiles("me/doomed")).toBeNull();
    const again = await fetch(`${hub.url}/api/repos/delete`, { method: "DELETE", headers, body });
    expect(again.status).toBe(404);
  });

  it("holds matching requests until released", async () => {
    const hold = hub.hold((r) => r.path.includes("config.json"));
    let done = false;
    const p = fetch(`${hub.url}/org/model/resolve/main/config.json`).then(async (r) => {
      done = true;
      return r.text();
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(done).toBe(false);
    expect(hold.waiting).toBe(1);
    hold.release();
    expect(JSON.parse(await p)).toMatchObject({ num_nextn_predict_layers: 1 });
  });
});

describe("generateMtpCheckpoint", () => {
  it("writes shards whose MTP tensors match the recorded hashes and the config's layer count", async () => {
    const ckpt = await generateMtpCheckpoint({
      numHiddenLayers: 3,
      numNextnPredictLayers: 2,
      shards: 4,
    });
    try {
      expect(ckpt.files.filter((f) => f.endsWith(".safetensors"))).toHaveLength(4);
      expect(ckpt.mtpKeys.every((k) => /^model\.layers\.(3|4)\./.test(k))).toBe(true);
      expect(ckpt.mtpKeys).toHaveLength(2 * 13);
      const index = JSON.parse(
        await readFile(join(ckpt.dir, "model.safetensors.index.json"), "utf8"),
      ) as {
        weight_map: Record<string, string>;
      };
      for (const key of ckpt.mtpKeys) {
        const shard = index.weight_map[key] ?? "";
        const parsed = parseSafetensors(await readFile(join(ckpt.dir, shard)));
        expect(sha256(parsed.tensors.get(key)?.data ?? new Uint8Array())).toBe(
          ckpt.tensorSha256[key],
        );
      }
      const card = parseCardData(await readFile(join(ckpt.dir, "README.md"), "utf8"));
      expect(card?.["tags"]).toEqual(["test-fixture"]);
    } finally {
      await ckpt.cleanup();
    }
  });

  it("names MTP heads mtp.* in the Qwen3-Next style and has none for a Gemma-type model", async () => {
    const q = await generateMtpCheckpoint({ style: "mtp-prefix", shards: 1 });
    const g = await generateMtpCheckpoint({ style: "none", shards: 2 });
    try {
      expect(q.files).toContain("model.safetensors");
      expect(q.mtpKeys.length).toBeGreaterThan(0);
      expect(q.mtpKeys.every((k) => k.startsWith("mtp."))).toBe(true);
      expect(g.mtpKeys).toEqual([]);
    } finally {
      await q.cleanup();
      await g.cleanup();
    }
  });
});
