// The publisher as a real server against the hub emulator: detection, publish end to end, the job
// stream (reconnect, eviction), concurrency, registration and lookup, and every error row of the spec.
import { createHash } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { parseCardData, parseSafetensors, waitFor } from "@ic/testkit";
import { FakeClock } from "@ic/protocol";
import {
  REPOS,
  readSse,
  startHubFixture,
  startHubProxy,
  startTestServer,
  TEST_TOKEN,
  unreachableHubUrl,
} from "./testing.ts";
import type { HubFixture, TestServer } from "./testing.ts";

const sha256 = (b: Uint8Array): string => createHash("sha256").update(b).digest("hex");

async function post(
  url: string,
  path: string,
  body: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function publish(s: TestServer, base: string, sidecar: string): Promise<string> {
  const r = await post(s.url, "/api/publish", { base_model: base, sidecar_repo: sidecar });
  expect(r.status).toBe(200);
  expect(typeof r.json["job_id"]).toBe("string");
  return r.json["job_id"] as string;
}

const stream = (s: TestServer, id: string, signal?: AbortSignal): Promise<Response> =>
  fetch(`${s.url}/api/stream/${id}`, signal ? { signal } : {});

describe("weights publisher against the hub emulator", () => {
  let fx: HubFixture;
  let s: TestServer;

  beforeAll(async () => {
    fx = await startHubFixture({ multipartChunkSize: 64 * 1024 });
    s = await startTestServer(fx.hub.url);
    expect((await post(s.url, "/api/config", { hf_token: TEST_TOKEN })).status).toBe(200);
  });
  afterAll(async () => {
    await s?.stop();
    await fx?.stop();
  });

  describe("detection", () => {
    it("detects MTP tensors of the base behind a q4k quant from a hub URL", async () => {
      const r = await post(s.url, "/api/detect", {
        url: `https://huggingface.co/${REPOS.q4k}/tree/main`,
      });
      expect(r.status).toBe(200);
      expect(r.json).toEqual({
        model_id: REPOS.q4k,
        base_model: REPOS.base,
        quant: "q4k",
        tier: "full",
        mtp_key_count: fx.base.mtpKeys.length,
        mtp_keys: fx.base.mtpKeys,
        sidecar_repo: "quant-org/Tiny-MTP-MTP",
        can_publish: true,
        assistant_model_repo: null,
        can_publish_assistant: false,
      });
      expect(fx.base.mtpKeys.every((k) => k.startsWith("model.layers.2."))).toBe(true);
    });

    it("reads only headers: every shard request is a Range read far smaller than the shard", async () => {
      const before = fx.hub.requests.length;
      await post(s.url, "/api/detect", { url: REPOS.base });
      const shardReads = fx.hub.requests
        .slice(before)
        .filter(
          (r) =>
            r.method === "GET" && /\/resolve\/[^/]+\/model-\d+-of-\d+\.safetensors$/.test(r.path),
        );
      expect(shardReads.length).toBeGreaterThan(0);
      for (const r of shardReads) {
        const m = /^bytes=(\d+)-(\d+)$/.exec(r.range ?? "");
        expect(m, `${r.path} read without a bounded Range`).not.toBeNull();
        const size = fx.hub.fileInfo(REPOS.base, r.path.split("/").pop() ?? "")?.size ?? 0;
        expect(Number(m?.[2]) - Number(m?.[1]) + 1).toBeLessThan(size / 4);
      }
    });

    it("reports a Gemma-type model without MTP heads, with its companion assistant", async () => {
      const r = await post(s.url, "/api/detect", { url: REPOS.gemmaQ4k });
      expect(r.json).toMatchObject({
        model_id: REPOS.gemmaQ4k,
        base_model: REPOS.gemmaBase,
        quant: "q4k",
        mtp_key_count: 0,
        mtp_keys: [],
        sidecar_repo: null,
        can_publish: false,
        assistant_model_repo: REPOS.gemmaAssistant,
        can_publish_assistant: true,
      });
    });

    it("finds mtp.* tensors in a single-file checkpoint and detects the expert-server tier", async () => {
      const q = await post(s.url, "/api/detect", { url: REPOS.qwenNext });
      expect(q.json).toMatchObject({
        model_id: REPOS.qwenNext,
        base_model: REPOS.qwenNext,
        quant: "bf16",
        can_publish: true,
      });
      expect(q.json["mtp_keys"]).toEqual(fx.qwen.mtpKeys);
      const e = await post(s.url, "/api/detect", { url: REPOS.expertServer });
      expect(e.json).toMatchObject({ tier: "expert-server", quant: "q4k", base_model: REPOS.base });
    });
  });

  describe("publish", () => {
    it("uploads exactly the MTP tensors, byte-identical, streaming the documented progress", async () => {
      const sidecar = "quant-org/Tiny-MTP-MTP";
      const id = await publish(s, REPOS.base, sidecar);
      const lines = await readSse(await stream(s, id));
      expect(lines.at(-1)).toBe("[done]");
      expect(lines.at(-2)).toBe("publish complete");
      expect(lines.some((l) => l.startsWith("[error]:"))).toBe(false);
      const firstIndex = (re: RegExp): number => lines.findIndex((l) => re.test(l));
      const order = [
        /^finding shards/,
        /^downloading /,
        /^streaming to disk: /,
        /^uploading mtp\.safetensors: \d+\/\d+ bytes/,
      ];
      const positions = order.map(firstIndex);
      expect(positions.every((p) => p >= 0)).toBe(true);
      expect([...positions].sort((a, b) => a - b)).toEqual(positions);
      const uploads = lines.filter((l) => l.startsWith("uploading mtp.safetensors:"));
      expect(uploads.length).toBeGreaterThan(2);
      expect(uploads.at(-1)).toMatch(/: (\d+)\/\1 bytes \(100%\)$/);

      const file = await fx.hub.readFile(sidecar, "mtp.safetensors");
      expect(file).not.toBeNull();
      const parsed = parseSafetensors(file ?? new Uint8Array());
      expect([...parsed.tensors.keys()].sort()).toEqual(fx.base.mtpKeys);
      for (const [name, t] of parsed.tensors)
        expect(sha256(t.data), name).toBe(fx.base.tensorSha256[name]);
      expect(parsed.metadata).toMatchObject({
        source_model: REPOS.base,
        num_nextn_predict_layers: "1",
      });
      const card = parseCardData((await fx.hub.readFile(sidecar, "README.md"))?.toString() ?? "");
      expect(card?.["base_model"]).toBe(REPOS.base);
      // The sidecar was big enough for the multipart LFS protocol.
      expect(
        fx.hub.requests.some((r) => r.method === "PUT" && r.path.includes("/__lfs/multipart/")),
      ).toBe(true);
    });

    it("never downloads a whole shard while extracting: bounded Range reads of the MTP bytes only", async () => {
      const before = fx.hub.requests.length;
      const id = await publish(s, REPOS.base, "quant-org/Tiny-MTP-MTP-2");
      expect((await readSse(await stream(s, id))).at(-2)).toBe("publish complete");
      const shardReads = fx.hub.requests
        .slice(before)
        .filter(
          (r) =>
            r.method === "GET" && /\/resolve\/main\/model-\d+-of-\d+\.safetensors$/.test(r.path),
        );
      let requested = 0;
      for (const r of shardReads) {
        const m = /^bytes=(\d+)-(\d+)$/.exec(r.range ?? "");
        expect(m, `${r.path} read without a bounded Range`).not.toBeNull();
        const size = fx.hub.fileInfo(REPOS.base, r.path.split("/").pop() ?? "")?.size ?? 0;
        const n = Number(m?.[2]) - Number(m?.[1]) + 1;
        expect(n).toBeLessThan(size);
        requested += n;
      }
      const sidecar = await fx.hub.readFile("quant-org/Tiny-MTP-MTP-2", "mtp.safetensors");
      const mtpData = [...parseSafetensors(sidecar ?? new Uint8Array()).tensors.values()].reduce(
        (a, t) => a + t.data.length,
        0,
      );
      expect(requested).toBeGreaterThanOrEqual(mtpData);
      expect(requested).toBeLessThan(mtpData + 64 * 1024);
      expect(requested).toBeLessThan(fx.base.tensorDataBytes / 2);
    });

    it("ends a job without MTP heads with an [error]: line, then [done]", async () => {
      const id = await publish(s, REPOS.gemmaBase, "quant-org/Gemma-Tiny-MTP");
      const lines = await readSse(await stream(s, id));
      expect(lines.slice(-2)).toEqual([
        `[error]: no MTP head tensors found in ${REPOS.gemmaBase}`,
        "[done]",
      ]);
      expect(fx.hub.listRepoFiles("quant-org/Gemma-Tiny-MTP")).toBeNull();
    });

    it("refuses a third concurrent job with 429 and runs the two to completion", async () => {
      const hold = fx.hub.hold(
        (r) => r.method === "GET" && /model-\d+-of-\d+\.safetensors$/.test(r.path),
      );
      try {
        const a = await publish(s, REPOS.base, "quant-org/Tiny-MTP-A");
        const b = await publish(s, REPOS.base, "quant-org/Tiny-MTP-B");
        const third = await post(s.url, "/api/publish", {
          base_model: REPOS.base,
          sidecar_repo: "quant-org/Tiny-MTP-C",
        });
        expect(third.status).toBe(429);
        expect(third.json).toEqual({
          error: "2 publish jobs already running; retry when one finishes",
        });
        hold.release();
        for (const id of [a, b])
          expect((await readSse(await stream(s, id))).slice(-2)).toEqual([
            "publish complete",
            "[done]",
          ]);
        const again = await publish(s, REPOS.base, "quant-org/Tiny-MTP-C");
        expect((await readSse(await stream(s, again))).at(-2)).toBe("publish complete");
      } finally {
        hold.release();
      }
    });

    it("keeps the job running when the stream client leaves and replays from the start on reconnect", async () => {
      const hold = fx.hub.hold(
        (r) => r.method === "GET" && /model-\d+-of-\d+\.safetensors$/.test(r.path),
      );
      try {
        const id = await publish(s, REPOS.base, "quant-org/Tiny-MTP-R");
        const abort = new AbortController();
        const first = await readSse(await stream(s, id, abort.signal), { maxLines: 1 });
        abort.abort();
        expect(first).toEqual([`finding shards of ${REPOS.base}`]);
        const midway = await readSse(await stream(s, id), { maxLines: 1 });
        expect(midway).toEqual(first);
        hold.release();
        await waitFor(() => (s.server.jobs.state(id) === "running" ? undefined : true), {
          timeoutMs: 20_000,
        });
        const replay = await readSse(await stream(s, id));
        expect(replay[0]).toBe(first[0]);
        expect(replay.slice(-2)).toEqual(["publish complete", "[done]"]);
        expect(await fx.hub.readFile("quant-org/Tiny-MTP-R", "mtp.safetensors")).not.toBeNull();
      } finally {
        hold.release();
      }
    });

    it("reports an upload the hub refuses as an [error]: line without echoing the token", async () => {
      await using bad = await startTestServer(fx.hub.url, { envToken: "hf_wrongtoken0000000000" });
      const id = await publish(bad, REPOS.base, "quant-org/Tiny-MTP-denied");
      const lines = await readSse(await stream(bad, id));
      expect(lines.at(-2)).toMatch(/^\[error\]: /);
      expect(lines.at(-1)).toBe("[done]");
      expect(lines.join("\n")).not.toContain("hf_wrongtoken0000000000");
      expect(bad.logText()).not.toContain("hf_wrongtoken0000000000");
    });
  });

  describe("hub failures", () => {
    it("names the phase, the hub URL and the cause in the job's error when the hub is unreachable", async () => {
      const hubUrl = await unreachableHubUrl();
      await using down = await startTestServer(hubUrl, { envToken: TEST_TOKEN });
      const id = await publish(down, REPOS.base, "quant-org/Tiny-MTP-down");
      const lines = await readSse(await stream(down, id));
      expect(lines.at(-1)).toBe("[done]");
      const error = lines.at(-2) ?? "";
      expect(error).toMatch(new RegExp(`^\\[error\\]: finding shards of ${REPOS.base}: `));
      expect(error).toContain(hubUrl);
      expect(error).toMatch(/ECONNREFUSED/);
      expect(lines.join("\n")).not.toContain(TEST_TOKEN);
    });

    it("names the phase, the hub URL and the cause when the hub drops the connection while creating the repo", async () => {
      await using proxy = await startHubProxy(fx.hub.url, (r) =>
        r.method === "POST" && r.path === "/api/repos/create" ? "drop" : "forward",
      );
      await using t = await startTestServer(proxy.url, { envToken: TEST_TOKEN });
      const id = await publish(t, REPOS.base, "quant-org/Tiny-MTP-dropped");
      const error = (await readSse(await stream(t, id))).at(-2) ?? "";
      expect(error).toMatch(/^\[error\]: creating repo quant-org\/Tiny-MTP-dropped: /);
      expect(error).toContain(proxy.url);
      expect(error).toMatch(/UND_ERR_SOCKET|ECONNRESET|other side closed/);
      expect(fx.hub.listRepoFiles("quant-org/Tiny-MTP-dropped")).toBeNull();
    });
  });

  describe("a failed upload", () => {
    const failCommit = (r: { method: string; path: string }) =>
      r.method === "POST" && /^\/api\/models\/[^/]+\/[^/]+\/commit\/main$/.test(r.path);

    it("deletes the sidecar repo the job created, so no empty repo is left behind", async () => {
      // The proxy fails the commit; everything else (the create and the delete) reaches the emulator.
      await using proxy = await startHubProxy(fx.hub.url, (r) =>
        failCommit(r) ? { status: 500, json: { error: "injected commit failure" } } : "forward",
      );
      await using t = await startTestServer(proxy.url, { envToken: TEST_TOKEN });
      const id = await publish(t, REPOS.base, "quant-org/Tiny-MTP-Fail");
      const lines = await readSse(await stream(t, id));
      const error = lines.at(-2) ?? "";
      expect(error).toMatch(/^\[error\]: uploading to quant-org\/Tiny-MTP-Fail: /);
      expect(error).toContain("injected commit failure");
      expect(error).toContain("removed the empty repo quant-org/Tiny-MTP-Fail this job created");
      const deletes = proxy.requests.filter((r) => r.method === "DELETE");
      expect(deletes.map((r) => [r.path, JSON.parse(r.body) as unknown])).toEqual([
        ["/api/repos/delete", { name: "Tiny-MTP-Fail", organization: "quant-org", type: "model" }],
      ]);
      // Created first, deleted after the failed commit.
      const paths = proxy.requests.map((r) => `${r.method} ${r.path}`);
      expect(paths.indexOf("POST /api/repos/create")).toBeLessThan(
        paths.indexOf("DELETE /api/repos/delete"),
      );
      // And the hub no longer has it.
      expect(fx.hub.listRepoFiles("quant-org/Tiny-MTP-Fail")).toBeNull();
    });

    it("keeps a sidecar repo that existed before the job", async () => {
      await fx.hub.addRepo("quant-org/Tiny-MTP-Kept", { "README.md": "mine\n" });
      await using proxy = await startHubProxy(fx.hub.url, (r) =>
        failCommit(r) ? { status: 500, json: { error: "injected commit failure" } } : "forward",
      );
      await using t = await startTestServer(proxy.url, { envToken: TEST_TOKEN });
      const id = await publish(t, REPOS.base, "quant-org/Tiny-MTP-Kept");
      const error = (await readSse(await stream(t, id))).at(-2) ?? "";
      expect(error).toMatch(/^\[error\]: uploading to quant-org\/Tiny-MTP-Kept: /);
      expect(proxy.requests.some((r) => r.method === "DELETE")).toBe(false);
      expect(fx.hub.listRepoFiles("quant-org/Tiny-MTP-Kept")).toEqual(["README.md"]);
    });
  });

  describe("request body limit", () => {
    it("answers a 200 MB body with 413 long before the client has sent it", async () => {
      const total = 200 * 1024 * 1024;
      const chunk = Buffer.alloc(1024 * 1024, 0x61);
      const { status, body, sentWhenAnswered } = await new Promise<{
        status: number;
        body: string;
        sentWhenAnswered: number;
      }>((resolve, reject) => {
        let sent = 0;
        const req = httpRequest(`${s.url}/api/detect`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
        });
        req.on("response", (res) => {
          const at = sent;
          const parts: Buffer[] = [];
          res.on("data", (c: Buffer) => parts.push(c));
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              body: Buffer.concat(parts).toString(),
              sentWhenAnswered: at,
            }),
          );
        });
        req.on("error", (err) => {
          if (sent < total) reject(err);
        });
        req.write('{"url":"');
        const pump = (): void => {
          while (sent < total) {
            sent += chunk.length;
            if (!req.write(chunk)) {
              req.once("drain", pump);
              return;
            }
          }
          req.end();
        };
        pump();
      });
      expect(status).toBe(413);
      expect(JSON.parse(body)).toEqual({ error: "request body is larger than 65536 bytes" });
      expect(sentWhenAnswered).toBeLessThan(32 * 1024 * 1024);
    });
  });

  describe("registration and catalog lookup", () => {
    it("registers a q4k quant with its assistant and finds it by source model", async () => {
      const r = await post(s.url, "/api/register", { url: REPOS.gemmaQ4k });
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({
        ok: true,
        key: "gemma-tiny-q4k",
        assistant_model_repo: REPOS.gemmaAssistant,
        catalog_path: s.catalogPath,
      });
      const block = YAML.parse(r.json["entry_block"] as string) as Record<string, unknown>[];
      expect(block).toEqual([
        {
          key: "gemma-tiny-q4k",
          hf_repo: REPOS.gemmaQ4k,
          output_name: "quant-org--Gemma-Tiny-Q4K",
          source_model: REPOS.gemmaBase,
          base_model: REPOS.gemmaBase,
          quant: "q4k",
          tier: "full",
          sidecar_repo: null,
          assistant_model_repo: REPOS.gemmaAssistant,
        },
      ]);
      const file = YAML.parse(await readFile(s.catalogPath, "utf8")) as unknown[];
      expect(file.at(-1)).toEqual(block[0]);
      const found = await post(s.url, "/api/catalog/find", {
        url: `https://huggingface.co/${REPOS.gemmaBase}`,
      });
      expect(found.status).toBe(200);
      expect(found.json).toEqual({ source_model: REPOS.gemmaBase, entries: block });
    });

    it("maps one source model to its full and expert-server entries", async () => {
      expect((await post(s.url, "/api/register", { url: REPOS.q4k })).status).toBe(200);
      expect((await post(s.url, "/api/register", { url: REPOS.expertServer })).status).toBe(200);
      const found = await post(s.url, "/api/catalog/find", { url: REPOS.base });
      const entries = found.json["entries"] as {
        key: string;
        tier: string;
        sidecar_repo: string;
      }[];
      expect(entries.map((e) => [e.key, e.tier])).toEqual([
        ["tiny-mtp-q4k", "full"],
        ["tiny-mtp-expert-server-q4k", "expert-server"],
      ]);
      expect(entries[0]?.sidecar_repo).toBe("quant-org/Tiny-MTP-MTP");
    });
  });

  describe("error rows of the spec", () => {
    /** One row of the spec's error table: what to send, and the answer it must get. */
    interface Row {
      readonly endpoint: string;
      readonly status: number;
      readonly condition: string;
      readonly run: () => Promise<{ status: number; json: Record<string, unknown> }>;
      /** A thunk where the pattern needs the fixture (only there once the tests run). */
      readonly error: RegExp | (() => RegExp);
      readonly extra?: Record<string, unknown>;
    }
    const hubPattern = (phase: string) =>
      new RegExp(`^${phase}: the model hub at ${fx.hub.url.replace(/[.]/g, "\\.")} `);
    const rows = (): Row[] => [
      {
        endpoint: "POST /api/config",
        status: 400,
        condition: "hf_token empty",
        run: () => post(s.url, "/api/config", { hf_token: "" }),
        error: /^hf_token must not be empty$/,
      },
      {
        endpoint: "POST /api/detect",
        status: 400,
        condition: "url empty",
        run: () => post(s.url, "/api/detect", { url: "" }),
        error: /^url must not be empty$/,
      },
      {
        endpoint: "POST /api/detect",
        status: 400,
        condition: "url unparseable",
        run: () => post(s.url, "/api/detect", { url: "https://example.com/a/b" }),
        error: /^cannot parse a model id/,
      },
      {
        endpoint: "POST /api/detect",
        status: 500,
        condition: "any other failure: a model the hub does not have",
        run: () => post(s.url, "/api/detect", { url: "owner/Missing" }),
        error: () => hubPattern("detecting owner/Missing"),
      },
      {
        endpoint: "POST /api/detect",
        status: 500,
        condition: "any other failure: the hub unreachable",
        run: async () => {
          await using down = await startTestServer(await unreachableHubUrl());
          return await post(down.url, "/api/detect", { url: REPOS.base });
        },
        error: /^detecting [^:]+: cannot reach the model hub at .*ECONNREFUSED/,
      },
      {
        endpoint: "POST /api/publish",
        status: 400,
        condition: "no token configured",
        run: async () => {
          await using bare = await startTestServer(fx.hub.url);
          return await post(bare.url, "/api/publish", {
            base_model: REPOS.base,
            sidecar_repo: "x/y",
          });
        },
        error: /no model-hub token configured/,
      },
      {
        endpoint: "POST /api/publish",
        status: 429,
        condition: "2 publish jobs already running",
        run: async () => {
          const hold = fx.hub.hold(
            (r) => r.method === "GET" && /model-\d+-of-\d+\.safetensors$/.test(r.path),
          );
          try {
            const a = await publish(s, REPOS.base, "quant-org/Tiny-MTP-R1");
            const b = await publish(s, REPOS.base, "quant-org/Tiny-MTP-R2");
            const third = await post(s.url, "/api/publish", {
              base_model: REPOS.base,
              sidecar_repo: "quant-org/Tiny-MTP-R3",
            });
            hold.release();
            for (const id of [a, b]) await readSse(await stream(s, id));
            return third;
          } finally {
            hold.release();
          }
        },
        error: /^2 publish jobs already running; retry when one finishes$/,
      },
      {
        endpoint: "POST /api/register",
        status: 400,
        condition: "url empty",
        run: () => post(s.url, "/api/register", { url: "" }),
        error: /^url must not be empty$/,
      },
      {
        endpoint: "POST /api/register",
        status: 400,
        condition: "url invalid",
        run: () => post(s.url, "/api/register", { url: "not a model" }),
        error: /^cannot parse a model id/,
      },
      {
        endpoint: "POST /api/register",
        status: 400,
        condition: "detected quant outside ALLOWED_QUANTS",
        run: () => post(s.url, "/api/register", { url: REPOS.q8k }),
        error: /"q8k".*allowed: q4k/,
      },
      {
        endpoint: "POST /api/register",
        status: 409,
        condition: "derived key already in the catalog",
        run: async () => {
          await post(s.url, "/api/register", { url: REPOS.q4k });
          return post(s.url, "/api/register", { url: REPOS.q4k });
        },
        error: /key "tiny-mtp-q4k"/,
      },
      {
        endpoint: "POST /api/register",
        status: 500,
        condition: "any other failure: a model the hub does not have",
        run: () => post(s.url, "/api/register", { url: "owner/Missing-Q4K" }),
        error: () => hubPattern("registering owner/Missing-Q4K"),
      },
      {
        endpoint: "POST /api/register",
        status: 500,
        condition: "any other failure: no base model can be resolved",
        run: () => post(s.url, "/api/register", { url: REPOS.gemmaAssistant }),
        error:
          /^could not resolve a full-precision base model for .* \(no usable base_model in its model card\)$/,
      },
      {
        endpoint: "POST /api/catalog/find",
        status: 400,
        condition: "url empty",
        run: () => post(s.url, "/api/catalog/find", { url: "" }),
        error: /^url must not be empty$/,
      },
      {
        endpoint: "POST /api/catalog/find",
        status: 400,
        condition: "model id unparseable",
        run: () => post(s.url, "/api/catalog/find", { url: "a/b/c" }),
        error: /^cannot parse a model id/,
      },
      {
        endpoint: "POST /api/catalog/find",
        status: 404,
        condition: "no entry matches; body also carries source_model",
        run: () => post(s.url, "/api/catalog/find", { url: "nobody/nothing" }),
        error: /^no catalog entry has source model nobody\/nothing$/,
        extra: { source_model: "nobody/nothing" },
      },
      {
        endpoint: "POST /api/catalog/find",
        status: 500,
        condition: "catalog failed to load",
        run: async () => {
          await using broken = await startTestServer(fx.hub.url, {
            env: { PUBLISHER_CATALOG: join(s.dir, "missing.yaml") },
          });
          return await post(broken.url, "/api/catalog/find", { url: REPOS.base });
        },
        error: /catalog .* failed to load/,
      },
      {
        endpoint: "GET /api/stream/{job_id}",
        status: 404,
        condition: "job id unknown or already evicted",
        run: async () => {
          const res = await fetch(`${s.url}/api/stream/does-not-exist`);
          return { status: res.status, json: (await res.json()) as Record<string, unknown> };
        },
        error: /^job not found$/,
      },
    ];

    it("every row of the spec's error table has a case here", () => {
      const seen = new Set(rows().map((r) => `${r.endpoint} ${r.status}`));
      expect([...seen].sort()).toEqual(
        [
          "POST /api/config 400",
          "POST /api/detect 400",
          "POST /api/detect 500",
          "POST /api/publish 400",
          "POST /api/publish 429",
          "POST /api/register 400",
          "POST /api/register 409",
          "POST /api/register 500",
          "POST /api/catalog/find 400",
          "POST /api/catalog/find 404",
          "POST /api/catalog/find 500",
          "GET /api/stream/{job_id} 404",
        ].sort(),
      );
    });

    for (const [i, row] of rows().entries()) {
      it(`${row.endpoint} ${row.status}: ${row.condition}`, async () => {
        const r = await rows()[i]!.run();
        expect(r.status, JSON.stringify(r.json)).toBe(row.status);
        expect(Object.keys(r.json).sort()).toEqual(
          ["error", ...Object.keys(row.extra ?? {})].sort(),
        );
        expect(r.json["error"]).toMatch(typeof row.error === "function" ? row.error() : row.error);
        for (const [k, v] of Object.entries(row.extra ?? {})) expect(r.json[k]).toEqual(v);
      });
    }
  });

  describe("the hub token never leaves in a body or a log line", () => {
    it("whatever field the token is typed into, on every endpoint, answers and the log are scrubbed", async () => {
      const t = TEST_TOKEN;
      const attempts: { path: string; body?: unknown; method?: string }[] = [
        { path: "/api/detect", body: { url: t } },
        { path: "/api/detect", body: { url: `${t}/model` } },
        { path: "/api/detect", body: { url: `owner/${t}` } },
        { path: "/api/detect", body: { url: `https://huggingface.co/owner/${t}` } },
        { path: "/api/register", body: { url: `owner/${t}` } },
        { path: "/api/register", body: { url: t } },
        { path: "/api/catalog/find", body: { url: `owner/${t}` } },
        { path: "/api/catalog/find", body: { url: t } },
        { path: "/api/publish", body: { base_model: `owner/${t}`, sidecar_repo: "x/y" } },
        { path: "/api/publish", body: { base_model: REPOS.base, sidecar_repo: `owner/${t}` } },
        { path: "/api/publish", body: { base_model: t, sidecar_repo: t } },
        { path: `/api/stream/${t}`, method: "GET" },
        { path: `/api/${t}`, method: "GET" },
        { path: `/${t}`, method: "GET" },
        { path: "/api/config", body: { hf_token: `${t} ` } },
      ];
      for (const a of attempts) {
        const res = await fetch(`${s.url}${a.path}`, {
          method: a.method ?? "POST",
          ...(a.body !== undefined
            ? { headers: { "Content-Type": "application/json" }, body: JSON.stringify(a.body) }
            : {}),
        });
        const text = await res.text();
        expect(text, `${a.path} ${JSON.stringify(a.body)}`).not.toContain(t);
        expect(text, `${a.path} ${JSON.stringify(a.body)}`).not.toContain(encodeURIComponent(t));
      }
      // The publish jobs those requests started end, and their lines are scrubbed too.
      await waitFor(() => (s.server.jobs.runningCount() === 0 ? true : undefined), {
        timeoutMs: 30_000,
        what: "jobs finished",
      });
      expect(s.logText()).not.toContain(t);
      expect(s.logText()).toContain("[redacted]");
    });
  });

  describe("token and local-only access", () => {
    it("persists the token with mode 0600, masks it and never returns or logs it", async () => {
      const envFile = join(s.dir, "config", ".env");
      expect((await stat(envFile)).mode & 0o777).toBe(0o600);
      expect(await readFile(envFile, "utf8")).toBe(`HF_TOKEN=${TEST_TOKEN}\n`);
      const config = (await (await fetch(`${s.url}/api/config`)).json()) as {
        hf_token_masked: string;
      };
      expect(config.hf_token_masked).toBe("hf_t…cdef");
      expect(await (await fetch(`${s.url}/api/status`)).json()).toEqual({ hf_token_set: true });
      expect(s.logText()).not.toContain(TEST_TOKEN);
      expect(s.logText()).toContain("hub token saved");
    });

    it("rejects a non-local Host (DNS rebinding) and a cross-site Origin with 403", async () => {
      const port = new URL(s.url).port;
      const raw = (headers: Record<string, string>): Promise<number> =>
        new Promise((resolve, reject) => {
          const req = httpRequest(
            { host: "127.0.0.1", port, path: "/api/status", headers },
            (res) => {
              res.resume();
              resolve(res.statusCode ?? 0);
            },
          );
          req.on("error", reject);
          req.end();
        });
      expect(await raw({ Host: `localhost:${port}` })).toBe(200);
      expect(await raw({ Host: `attacker.example:${port}` })).toBe(403);
      expect(await raw({ Host: `127.0.0.1:${port}`, Origin: "https://attacker.example" })).toBe(
        403,
      );
      expect(await raw({ Host: `127.0.0.1:${port}`, Origin: `http://localhost:${port}` })).toBe(
        200,
      );
    });

    it("binds to the loopback interface only", () => {
      expect(new URL(s.url).hostname).toBe("127.0.0.1");
    });
  });
});

describe("finished job retention", () => {
  it("evicts a finished job after 600 s: the stream answers 404 from then on", async () => {
    await using fx = await startHubFixture().then((f) =>
      Object.assign(f, { [Symbol.asyncDispose]: f.stop }),
    );
    const clock = new FakeClock();
    await using s = await startTestServer(fx.hub.url, { envToken: TEST_TOKEN, clock });
    const id = await publish(s, REPOS.base, "quant-org/Tiny-MTP-E");
    expect((await readSse(await stream(s, id))).slice(-2)).toEqual(["publish complete", "[done]"]);
    await clock.advance(599_000);
    const still = await readSse(await stream(s, id));
    expect(still.slice(-2)).toEqual(["publish complete", "[done]"]);
    await clock.advance(1_000);
    const gone = await stream(s, id);
    expect(gone.status).toBe(404);
    expect(await gone.json()).toEqual({ error: "job not found" });
  });
});
