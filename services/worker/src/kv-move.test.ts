// The engine side of moving KV caches, against scripted engines (an HTTP server answering /slots and
// the slot actions as llama-server does, writing and reading the files) and the source node's file
// route served over HTTP. The real engines are in tests/cluster/kv-move.integration.test.ts.
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { httpStatusFor, ServiceError } from "@ic/protocol";
import type { InstanceId, KvSaved, ModelId } from "@ic/protocol";
import {
  FILE_TTL_MS,
  flagsDigest,
  freeSlot,
  KvMoves,
  PENDING_MS,
  shapeMismatch,
  slotOfSeed,
} from "./kv-move.ts";
import type { EngineSlot, KvEngine } from "./kv-move.ts";

const slot = (id: number, o: Partial<EngineSlot> = {}): EngineSlot => ({
  id,
  n_ctx: 4096,
  is_processing: false,
  ...o,
});

describe("slotOfSeed", () => {
  it.each([
    { what: "the one with the seed", slots: [slot(0), slot(1, { params: { seed: 7 } })], want: 1 },
    {
      what: "the processing one of two with the seed",
      slots: [
        slot(0, { params: { seed: 7 } }),
        slot(1, { params: { seed: 7 }, is_processing: true }),
      ],
      want: 1,
    },
    { what: "none without the seed", slots: [slot(0, { params: { seed: 8 } })], want: undefined },
  ])("$what", ({ slots, want }) => {
    expect(slotOfSeed(slots, 7)?.id).toBe(want);
  });
});

describe("freeSlot", () => {
  it.each([
    {
      what: "the idle slot holding least",
      slots: [
        slot(0, { n_prompt_tokens: 900 }),
        slot(1, { n_prompt_tokens: 20 }),
        slot(2, { is_processing: true }),
      ],
      want: 1,
    },
    {
      what: "none when every slot is busy",
      slots: [slot(0, { is_processing: true })],
      want: undefined,
    },
    {
      what: "not one a cache was restored into lately, while another is idle",
      slots: [slot(0), slot(1, { n_prompt_tokens: 300 })],
      avoid: [0],
      want: 1,
    },
    {
      what: "one restored into lately when it is the only idle one",
      slots: [slot(0), slot(1, { is_processing: true })],
      avoid: [0],
      want: 0,
    },
  ])(
    "$what",
    ({ slots, avoid, want }: { slots: EngineSlot[]; avoid?: number[]; want?: number }) => {
      expect(freeSlot(slots, new Set(avoid ?? []))?.id).toBe(want);
    },
  );
});

describe("shapeMismatch", () => {
  const shape = {
    model_id: "m/x" as ModelId,
    model_bytes: 100,
    slot_ctx: 4096,
    engine_flags: flagsDigest([]),
  };
  it.each([
    { what: "the same shape", other: {}, want: undefined },
    { what: "another model", other: { model_id: "m/y" as ModelId }, want: /model m\/x/ },
    { what: "another model file", other: { model_bytes: 101 }, want: /quantization/ },
    { what: "another slot context", other: { slot_ctx: 2048 }, want: /slot context/ },
    {
      what: "other flags",
      other: { engine_flags: flagsDigest(["-ctk", "q8_0"]) },
      want: /arguments/,
    },
  ])("$what", ({ other, want }) => {
    const why = shapeMismatch(shape, { ...shape, ...other });
    if (want === undefined) expect(why).toBeUndefined();
    else expect(why).toMatch(want);
  });
});

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** An engine as llama-server answers /slots and the slot actions, its files in `dir`. */
async function scriptedEngine(slots: EngineSlot[], fileBytes = 3000) {
  const dir = mkdtempSync(join(tmpdir(), "ic-kv-engine-"));
  const calls: string[] = [];
  const endpoint = await listen((req, res) => {
    const url = new URL(req.url!, "http://x");
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      calls.push(`${req.method} ${url.pathname}${url.search} ${req.headers.authorization ?? ""}`);
      const json = (v: unknown, status = 200) => {
        res.writeHead(status, { "content-type": "application/json" });
        res.end(JSON.stringify(v));
      };
      if (url.pathname === "/slots") return json(slots);
      const file = (JSON.parse(body || "{}") as { filename?: string }).filename!;
      if (url.searchParams.get("action") === "save") {
        writeFileSync(join(dir, file), randomBytes(fileBytes));
        return json({ n_saved: 1700, timings: { save_ms: 2.5 } });
      }
      if (!existsSync(join(dir, file))) return json({ error: { message: "no file" } }, 400);
      return json({
        n_restored: readFileSync(join(dir, file)).length / 3,
        timings: { restore_ms: 1 },
      });
    });
  });
  const engine: KvEngine = { endpoint, dir, modelId: "m/x" as ModelId, modelBytes: 100 };
  return { engine, calls, dir };
}

/** The source node's GET /kv/files/{file}, as the node app serves it (typed errors as statuses). */
async function fileRoute(moves: KvMoves) {
  return listen((req, res) => {
    const file = req.url!.split("/").at(-1)!;
    const presented = req.headers.authorization;
    const token =
      presented === undefined ? undefined : presented === "Bearer node" ? "cluster-node" : "alice";
    try {
      const answer = moves.serve(file, token);
      res.writeHead(answer.status);
      Readable.fromWeb(answer.body as WebReadableStream).pipe(res);
    } catch (e) {
      const err = e as ServiceError;
      res.writeHead(httpStatusFor(err.code));
      res.end(err.code);
    }
  });
}

const instance = "i-1" as InstanceId;

async function pair(
  o: { sourceBytes?: number; targetModelBytes?: number; maxBytes?: number } = {},
) {
  const source = await scriptedEngine(
    [slot(0), slot(1, { is_processing: true, params: { seed: 7 } })],
    o.sourceBytes,
  );
  const target = await scriptedEngine([
    slot(0, { is_processing: true }),
    slot(1, { n_prompt_tokens: 5 }),
  ]);
  const common = { log: silentLogger(), extraArgs: [], maxBytes: o.maxBytes ?? 1_000_000 };
  const a = new KvMoves({
    ...common,
    engine: (id) => (id === instance ? source.engine : undefined),
    engineHeaders: { authorization: "Bearer engine-a" },
    apiUrl: "http://unset",
  });
  const apiUrl = await fileRoute(a);
  const targetEngine = { ...target.engine, modelBytes: o.targetModelBytes ?? 100 };
  const b = new KvMoves({
    ...common,
    engine: (id) => (id === instance ? targetEngine : undefined),
    engineHeaders: { authorization: "Bearer engine-b" },
    apiUrl: "http://unset-b",
    token: () => "node",
  });
  const save = async (): Promise<KvSaved> => {
    const r = await a.save({ instance_id: instance, seed: 7, timeout_ms: 5000 });
    if (!r.ok) throw new Error(r.error.message);
    return { ...r.saved, api_url: apiUrl };
  };
  return { a, b, source, target, save, apiUrl };
}

describe("KvMoves", () => {
  it("saves the seed's slot, and the target fetches, checks, restores into its idle slot and removes the file", async () => {
    const { b, source, target, save } = await pair();
    const saved = await save();
    expect(saved).toMatchObject({ bytes: 3000, tokens: 1700, save_ms: 2.5 });
    expect(saved.shape).toEqual({
      model_id: "m/x",
      model_bytes: 100,
      slot_ctx: 4096,
      engine_flags: flagsDigest([]),
    });
    expect(source.calls.at(-1)).toBe("POST /slots/1?action=save Bearer engine-a");
    const r = await b.restore({ instance_id: instance, saved, timeout_ms: 5000 });
    expect(r).toMatchObject({ ok: true, restored: { slot: 1, tokens: 1000 } });
    expect(target.calls.at(-1)).toBe("POST /slots/1?action=restore Bearer engine-b");
    expect(readdirSync(target.dir)).toEqual([]);
    // Served once: the source's copy is gone, and asking again finds nothing.
    await expect.poll(() => readdirSync(source.dir)).toEqual([]);
    const again = await b.restore({ instance_id: instance, saved, timeout_ms: 5000 });
    expect(again).toMatchObject({ ok: false, error: { code: "download_failed" } });
    expect(again.ok || again.error.message).toMatch(/answered 404/);
  });

  it("refuses a file whose bytes are not what the source said, and keeps nothing of it", async () => {
    const { b, source, target, save } = await pair();
    const saved = await save();
    writeFileSync(join(source.dir, saved.file), randomBytes(3000));
    const r = await b.restore({ instance_id: instance, saved, timeout_ms: 5000 });
    expect(r).toMatchObject({ ok: false, error: { code: "download_failed" } });
    expect(r.ok || r.error.message).toMatch(/sha256/);
    expect(readdirSync(target.dir)).toEqual([]);
    expect(target.calls.some((c) => c.includes("restore"))).toBe(false);
  });

  it("fetches no file over its bound, and restores none of another shape", async () => {
    const big = await pair({ sourceBytes: 5000, maxBytes: 4000 });
    const over = await big.b.restore({
      instance_id: instance,
      saved: await big.save(),
      timeout_ms: 5000,
    });
    expect(over).toMatchObject({ ok: false, error: { code: "invalid_request" } });
    const other = await pair({ targetModelBytes: 200 });
    const r = await other.b.restore({
      instance_id: instance,
      saved: await other.save(),
      timeout_ms: 5000,
    });
    expect(r).toMatchObject({ ok: false, error: { code: "conflict" } });
    expect(r.ok || r.error.message).toMatch(/200/);
  });

  it("answers typed errors: no slot with the seed, no such engine here", async () => {
    const { a } = await pair();
    expect(await a.save({ instance_id: instance, seed: 8, timeout_ms: 5000 })).toMatchObject({
      ok: false,
      error: { code: "not_found", message: "no slot of i-1 served seed 8" },
    });
    expect(
      await a.save({ instance_id: "i-2" as InstanceId, seed: 7, timeout_ms: 5000 }),
    ).toMatchObject({ ok: false, error: { code: "not_found" } });
  });

  it("counts a saved file as pending until a target fetched it (a drain waits for it), for PENDING_MS at most", async () => {
    const { a, b, save } = await pair();
    expect(a.pending()).toBe(0);
    const saved = await save();
    expect(a.pending()).toBe(1);
    expect(a.pending(Date.now() + PENDING_MS)).toBe(0);
    expect(await b.restore({ instance_id: instance, saved, timeout_ms: 5000 })).toMatchObject({
      ok: true,
    });
    await expect.poll(() => a.pending()).toBe(0);
  });

  it("serves files to the node token only, and sweeps those nobody fetched", async () => {
    const { a, source, save } = await pair();
    const saved = await save();
    expect(() => a.serve(saved.file, "alice")).toThrow(ServiceError);
    expect(() => a.serve("../../etc/passwd", "cluster-node")).toThrow(/no such slot file/);
    await a.sweep(Date.now() + FILE_TTL_MS - 1000);
    expect(readdirSync(source.dir)).toEqual([saved.file]);
    await a.sweep(Date.now() + FILE_TTL_MS);
    expect(readdirSync(source.dir)).toEqual([]);
    expect(() => a.serve(saved.file, "cluster-node")).toThrow(/no such slot file/);
  });
});
