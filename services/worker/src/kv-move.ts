// Moving a conversation's KV cache between nodes, the engine side (issue 50; docs/api.md "Stream
// migration"). On the source node: save the slot that served a stream to a file in the instance's
// slot directory and serve it once to the target (GET /kv/files/{file}, the cluster's node token
// only). On the target node: check that the cache fits this engine (the same model file, slot
// context and cache-shaping flags), fetch the file (bounded in size, verified by its sha256),
// restore it into a free slot and remove it. Files nobody fetched go after FILE_TTL_MS.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { KvFileNameSchema, ServiceError, toWireError } from "@ic/protocol";
import type {
  KvCacheShape,
  KvRestored,
  KvRestoreReply,
  KvRestoreRequest,
  KvSaved,
  KvSaveReply,
  KvSaveRequest,
} from "@ic/protocol";
import type { Bus } from "@ic/bus";
import { requestToken, routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import type { ApiOperation, ModelId } from "@ic/protocol";

/** Saved files the target has not fetched are removed after this long. */
export const FILE_TTL_MS = 120_000;

/**
 * An instance's slot directory (`<runner_log_dir>/kv/<instance>`: saved KV caches on their way to
 * or from another node), emptied for a new engine (files of an earlier run are stale), and the size
 * of the model file the engine loads, which a saved cache names.
 */
export async function slotDirFor(
  runnerLogDir: string,
  instanceId: string,
  modelPath: string,
): Promise<{ dir: string; modelBytes: number }> {
  const dir = join(runnerLogDir, "kv", instanceId);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  return { dir, modelBytes: (await stat(modelPath)).size };
}

/** Slot files are read and written in runs of this size (they run to gigabytes; small ones cost CPU). */
const READ_CHUNK = 1024 * 1024;

/** The local engine of an instance that saves and restores slots (Worker.kvEngine). */
export interface KvEngine {
  readonly endpoint: string;
  readonly dir: string;
  readonly modelId: ModelId;
  readonly modelBytes: number;
}

export interface KvMoveOptions {
  readonly engine: (instanceId: string) => KvEngine | undefined;
  /** Headers for this node's engines (their API key). */
  readonly engineHeaders: Record<string, string>;
  /** This node's API base URL (the target fetches from it). */
  readonly apiUrl: string;
  /** The node token this node presents to a peer's API (absent: the cluster has no tokens). */
  readonly token?: (() => string) | undefined;
  /** Largest slot file this node fetches. */
  readonly maxBytes: number;
  /** The engine flags that shape a cache (`engine.extra_args`): both sides must agree. */
  readonly extraArgs: readonly string[];
  readonly log: Logger;
}

/** One slot of llama-server's GET /slots, as far as it is read here. */
export interface EngineSlot {
  readonly id: number;
  readonly n_ctx: number;
  readonly is_processing: boolean;
  readonly n_prompt_tokens?: number;
  readonly params?: { readonly seed?: number };
}

/** The slot that served a stream: the one whose sampling seed is the stream's (processing first). */
export function slotOfSeed(slots: readonly EngineSlot[], seed: number): EngineSlot | undefined {
  const mine = slots.filter((s) => s.params?.seed === seed);
  return mine.find((s) => s.is_processing) ?? mine[0];
}

/**
 * The slot a restored cache goes to: an idle one, not one a cache was restored into lately (`avoid`:
 * /slots does not count a restored cache in `n_prompt_tokens`), the one holding least (its cache is
 * the cheapest to lose); undefined when every slot is busy.
 */
export function freeSlot(
  slots: readonly EngineSlot[],
  avoid: ReadonlySet<number> = new Set(),
): EngineSlot | undefined {
  const rank = (s: EngineSlot) => (avoid.has(s.id) ? 1 : 0);
  return slots
    .filter((s) => !s.is_processing)
    .sort((a, b) => rank(a) - rank(b) || (a.n_prompt_tokens ?? 0) - (b.n_prompt_tokens ?? 0))[0];
}

/** A slot a cache was restored into is not chosen for the next restore for this long. */
export const RESTORED_MS = 300_000;

/** Why a saved cache cannot go into an engine of `local` shape (undefined: it can). */
export function shapeMismatch(saved: KvCacheShape, local: KvCacheShape): string | undefined {
  if (saved.model_id !== local.model_id)
    return `the cache is of model ${saved.model_id}, this instance serves ${local.model_id}`;
  if (saved.model_bytes !== local.model_bytes)
    return `the cache is of a model file of ${saved.model_bytes} bytes, this engine loaded ${local.model_bytes} (another quantization or build)`;
  if (saved.slot_ctx !== local.slot_ctx)
    return `the cache is of a slot context of ${saved.slot_ctx} tokens, this engine's is ${local.slot_ctx}`;
  if (saved.engine_flags !== local.engine_flags)
    return "the engines were started with different extra arguments (cache types may differ)";
  return undefined;
}

/** sha256 of the engine's extra arguments, hex (KvCacheShape.engine_flags). */
export function flagsDigest(extraArgs: readonly string[]): string {
  return createHash("sha256").update(JSON.stringify(extraArgs)).digest("hex");
}

/** A file saved here counts toward a drain's wait this long while its target has not fetched it. */
export const PENDING_MS = 15_000;

export class KvMoves {
  /** Files saved here and not yet fetched: name → path and when it was saved. */
  private readonly files = new Map<string, { path: string; at: number }>();
  private readonly flags: string;
  /** Saves running and files being served now. */
  private busy = 0;
  /** Per engine endpoint, the slots caches were restored into lately, and when. */
  private readonly restoredInto = new Map<string, Map<number, number>>();

  constructor(private readonly o: KvMoveOptions) {
    this.flags = flagsDigest(o.extraArgs);
  }

  /**
   * Moves this node is part of as their source: saves running, files being served, and files saved
   * within PENDING_MS that no target fetched yet. A draining node waits for them (it must still
   * answer the fetch) before it stops.
   */
  pending(now = Date.now()): number {
    let n = this.busy;
    for (const f of this.files.values()) if (now - f.at < PENDING_MS) n++;
    return n;
  }

  /** The source side: saves the slot that served the stream with `seed`. Never throws. */
  async save(req: KvSaveRequest): Promise<KvSaveReply> {
    this.busy++;
    try {
      return { ok: true, saved: await this.saveSlot(req) };
    } catch (e) {
      return { ok: false, error: toWireError(asServiceError(e, "saving the slot")) };
    } finally {
      this.busy--;
    }
  }

  /** The target side: fetches, checks and restores a saved cache into a free slot. Never throws. */
  async restore(req: KvRestoreRequest): Promise<KvRestoreReply> {
    try {
      return { ok: true, restored: await this.restoreSlot(req) };
    } catch (e) {
      return { ok: false, error: toWireError(asServiceError(e, "restoring the slot")) };
    }
  }

  /**
   * GET /kv/files/{file}: a saved file, once, to the holder of the cluster's node token
   * (`tokenName`: the name of the token presented; undefined in a cluster without tokens).
   */
  serve(file: string, tokenName: string | undefined): Response {
    if (tokenName !== undefined && tokenName !== "cluster-node")
      throw new ServiceError("forbidden", "slot files are for the cluster's nodes only");
    const name = KvFileNameSchema.safeParse(file);
    const held = name.success ? this.files.get(name.data) : undefined;
    if (!name.success || !held) throw new ServiceError("not_found", "no such slot file here");
    this.files.delete(name.data);
    const body = createReadStream(held.path, { highWaterMark: READ_CHUNK });
    // Served once: the file goes when it has been read (or failed to be).
    this.busy++;
    body.on("close", () => {
      this.busy--;
      void rm(held.path, { force: true });
    });
    return new Response(Readable.toWeb(body) as ReadableStream, {
      headers: { "content-type": "application/octet-stream" },
    });
  }

  /** Removes saved files nobody fetched within FILE_TTL_MS. */
  async sweep(now = Date.now()): Promise<void> {
    for (const [name, f] of this.files)
      if (now - f.at >= FILE_TTL_MS) {
        this.files.delete(name);
        await rm(f.path, { force: true });
      }
  }

  private async saveSlot(req: KvSaveRequest): Promise<KvSaved> {
    const engine = this.engineOf(req.instance_id);
    const deadline = Date.now() + req.timeout_ms;
    const slots = await this.slots(engine, deadline);
    const slot = slotOfSeed(slots, req.seed);
    if (!slot)
      throw new ServiceError("not_found", `no slot of ${req.instance_id} served seed ${req.seed}`);
    const file = `kv-${randomBytes(16).toString("hex")}.bin`;
    const path = join(engine.dir, file);
    // A slot still generating is saved once its task has stopped (the gateway stopped reading it).
    let r: { n_saved?: number; timings?: { save_ms?: number } };
    let digest: { bytes: number; sha256: string };
    try {
      r = await this.engineCall(
        engine,
        `/slots/${slot.id}?action=save`,
        { filename: file },
        deadline,
      );
      digest = await digestFile(path);
    } catch (e) {
      await rm(path, { force: true }); // what a save cut short left
      throw e;
    }
    const { bytes, sha256 } = digest;
    this.files.set(file, { path, at: Date.now() });
    return {
      file,
      bytes,
      sha256,
      tokens: r.n_saved ?? 0,
      api_url: this.o.apiUrl,
      shape: this.shapeOf(engine, slot),
      save_ms: r.timings?.save_ms ?? 0,
    };
  }

  private async restoreSlot(req: KvRestoreRequest): Promise<KvRestored> {
    const { saved } = req;
    const engine = this.engineOf(req.instance_id);
    const deadline = Date.now() + req.timeout_ms;
    if (saved.bytes > this.o.maxBytes)
      throw new ServiceError(
        "invalid_request",
        `the slot file is ${saved.bytes} bytes, over this node's bound of ${this.o.maxBytes}`,
      );
    const slots = await this.slots(engine, deadline);
    const lately = this.restoredInto.get(engine.endpoint) ?? new Map<number, number>();
    for (const [id, at] of lately) if (Date.now() - at >= RESTORED_MS) lately.delete(id);
    const target = freeSlot(slots, new Set(lately.keys()));
    if (!target) throw new ServiceError("unavailable", "every slot of the engine is busy");
    const why = shapeMismatch(saved.shape, this.shapeOf(engine, target));
    if (why) throw new ServiceError("conflict", why);
    const path = join(engine.dir, saved.file);
    const started = performance.now();
    try {
      await this.fetchFile(saved, path, deadline);
      const fetchMs = performance.now() - started;
      const r = await this.engineCall<{ n_restored?: number; timings?: { restore_ms?: number } }>(
        engine,
        `/slots/${target.id}?action=restore`,
        { filename: saved.file },
        deadline,
      );
      lately.set(target.id, Date.now());
      if (!this.restoredInto.has(engine.endpoint)) {
        if (this.restoredInto.size >= 64) this.restoredInto.clear();
        this.restoredInto.set(engine.endpoint, lately);
      }
      return {
        slot: target.id,
        slots: slots.length,
        tokens: r.n_restored ?? 0,
        fetch_ms: fetchMs,
        restore_ms: r.timings?.restore_ms ?? 0,
      };
    } finally {
      await rm(path, { force: true });
      await rm(`${path}.part`, { force: true });
    }
  }

  /** Fetches a saved file from its node into `path`: its size bounded, its digest checked. */
  private async fetchFile(saved: KvSaved, path: string, deadline: number): Promise<void> {
    const token = this.o.token?.();
    const res = await fetch(`${saved.api_url.replace(/\/$/, "")}/kv/files/${saved.file}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
      signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())),
    });
    if (!res.ok || !res.body)
      throw new ServiceError(
        "download_failed",
        `the source node answered ${res.status} for the slot file: ${(await res.text()).slice(0, 200)}`,
      );
    const hash = createHash("sha256");
    let bytes = 0;
    // TLS hands the body over in records of 16 KiB: written as they come, a file of gigabytes
    // costs a disk write each; they go to the file in runs of READ_CHUNK.
    let run: Buffer[] = [];
    let runBytes = 0;
    const bound = new Transform({
      transform(chunk: Buffer, _enc, done) {
        bytes += chunk.length;
        if (bytes > saved.bytes)
          return done(new ServiceError("download_failed", "the slot file is longer than said"));
        hash.update(chunk);
        run.push(chunk);
        runBytes += chunk.length;
        if (runBytes < READ_CHUNK) return done();
        const out = Buffer.concat(run, runBytes);
        [run, runBytes] = [[], 0];
        done(null, out);
      },
      flush(done) {
        done(null, runBytes > 0 ? Buffer.concat(run, runBytes) : undefined);
      },
    });
    await pipeline(
      Readable.fromWeb(res.body as WebReadableStream),
      bound,
      createWriteStream(`${path}.part`, { mode: 0o600 }),
    );
    const sha256 = hash.digest("hex");
    if (bytes !== saved.bytes || sha256 !== saved.sha256)
      throw new ServiceError(
        "download_failed",
        `the slot file arrived as ${bytes} bytes with sha256 ${sha256}; ${saved.bytes} bytes with ${saved.sha256} were said`,
      );
    await rename(`${path}.part`, path);
  }

  private engineOf(instanceId: string): KvEngine {
    const engine = this.o.engine(instanceId);
    if (!engine)
      throw new ServiceError(
        "not_found",
        `instance ${instanceId} has no ready engine here that saves and restores slots`,
      );
    return engine;
  }

  private shapeOf(engine: KvEngine, slot: EngineSlot): KvCacheShape {
    return {
      model_id: engine.modelId,
      model_bytes: engine.modelBytes,
      slot_ctx: slot.n_ctx,
      engine_flags: this.flags,
    };
  }

  private async slots(engine: KvEngine, deadline: number): Promise<EngineSlot[]> {
    const res = await fetch(`${engine.endpoint}/slots`, {
      headers: this.o.engineHeaders,
      signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())),
    });
    if (!res.ok) throw new ServiceError("upstream_failed", `the engine's /slots: ${res.status}`);
    const slots = (await res.json()) as EngineSlot[];
    if (!Array.isArray(slots)) throw new ServiceError("upstream_failed", "the engine's /slots");
    return slots;
  }

  private async engineCall<T>(
    engine: KvEngine,
    path: string,
    body: unknown,
    deadline: number,
  ): Promise<T> {
    const res = await fetch(`${engine.endpoint}${path}`, {
      method: "POST",
      headers: { ...this.o.engineHeaders, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())),
    });
    const text = await res.text();
    if (!res.ok)
      throw new ServiceError("upstream_failed", `the engine's ${path}: ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  }
}

/**
 * The engine side of moving KV caches as a node component: the bus requests addressed to this node
 * (`kvSave`, `kvRestore`), the file route, and the sweep of files nobody fetched.
 */
export function kvMoveComponent(
  o: KvMoveOptions & { readonly bus: Pick<Bus, "respond">; readonly peerKey: string },
): Component & { readonly moves: KvMoves } {
  const moves = new KvMoves(o);
  let offs: (() => void)[] = [];
  let sweep: NodeJS.Timeout | undefined;
  return {
    name: "kv-move",
    moves,
    start() {
      offs = [
        o.bus.respond("kvSave", (req) => moves.save(req), { suffix: o.peerKey }),
        o.bus.respond("kvRestore", (req) => moves.restore(req), { suffix: o.peerKey }),
      ];
      sweep = setInterval(() => void moves.sweep(), FILE_TTL_MS / 4);
      sweep.unref();
    },
    stop() {
      for (const off of offs) off();
      clearInterval(sweep);
    },
    routes: () =>
      routesOf((app) =>
        app.get("/kv/files/:file", (c) => moves.serve(c.req.param("file"), requestToken(c)?.name)),
      ),
  };
}

/** The route of this file (docs/api.md, "Node to node"). */
export const KV_MOVE_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/kv/files/{file}",
    summary:
      "node to node: a saved slot (KV cache) on its way to another node, served once to the cluster's node token",
    scope: "read",
    responses: {
      "200": { description: "the slot file", contentType: "application/octet-stream" },
    },
  },
];

/** A file's size and sha256 (hex), read once. */
async function digestFile(path: string): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path, { highWaterMark: READ_CHUNK }), hash);
  return { bytes: (await stat(path)).size, sha256: hash.digest("hex") };
}

function asServiceError(e: unknown, doing: string): ServiceError {
  if (e instanceof ServiceError) return e;
  const err = e as Error & { cause?: { message?: string; code?: string } };
  if (err.name === "TimeoutError")
    return new ServiceError("upstream_timeout", `${doing} took longer than its bound`);
  // fetch's own error says only "fetch failed": the reason is its cause (ECONNREFUSED, a reset).
  const cause = err.cause?.code ?? err.cause?.message;
  return new ServiceError(
    "internal",
    `${doing} failed: ${err.message}${cause ? ` (${cause})` : ""}`,
  );
}
