// A stream's KV cache follows it (issue 50; docs/api.md "Stream migration"): a stream that opted in
// to migration, on a node that started draining, moves to a ready instance off draining nodes as
// soon as there is one, instead of holding the drain until it ends. The source node saves the
// stream's slot (found by the sampling seed the gateway gave the request), the target node fetches
// and restores it (worker kv-move.ts), and the continuation names that slot (`id_slot`), so the
// target prefills only what the cache lacks. A stream that lost its engine re-prefills as before:
// the cache went with the engine. Everything here applies only where both engines' probes found
// they move caches; else streams behave as before.
import { randomInt } from "node:crypto";
import type {
  EngineTimings,
  InstanceId,
  KvRestoreReply,
  KvRestoreRequest,
  KvRestored,
  KvSaved,
  KvSaveReply,
  KvSaveRequest,
  PeerView,
} from "@ic/protocol";
import type { ReadyInstance } from "../readiness.ts";
import type { ChatContext, RequestContext } from "./request.ts";
import { pick } from "./routing.ts";
import { engineStreamCall } from "../streams/engine-stream.ts";

/** How a gateway asks nodes to save and restore slots (the node sends these on the bus). */
export interface KvMovePort {
  save(peerKey: string, req: KvSaveRequest): Promise<KvSaveReply>;
  restore(peerKey: string, req: KvRestoreRequest): Promise<KvRestoreReply>;
}

/** The seed a request is sent with (where caches move): the client's, else one the gateway draws. */
export function requestSeed(body: Record<string, unknown>): number | undefined {
  const seed = body.seed;
  if (seed === undefined || seed === null) {
    // As random as the engine's own default, and it names the slot that serves the stream.
    const drawn = randomInt(0, 2 ** 31 - 1);
    body.seed = drawn;
    return drawn;
  }
  return typeof seed === "number" && Number.isInteger(seed) && seed >= 0 ? seed : undefined;
}

/** Whether a peer's engine moves KV caches (its slot-restore probe passed). */
export function movesCaches(peer: PeerView | undefined): boolean {
  return peer?.heartbeat.telemetry?.engine.slot_restore?.supported === true;
}

const rank0Peer = (i: ReadyInstance): string | undefined =>
  i.instance.assignments.find((a) => a.rank === 0)?.peer_key;

/**
 * Where a stream on `source` moves now, or undefined while it stays: only when a node of `source`
 * is draining, its engine moves caches, and a ready instance off draining nodes whose engine moves
 * caches too is among `others`. The least loaded of those is the caller's pick (balancing).
 */
export function handoverTargets(
  source: ReadyInstance["instance"],
  others: readonly ReadyInstance[],
  live: readonly PeerView[],
): ReadyInstance[] {
  const peers = new Map(live.map((p) => [p.heartbeat.peer_key, p]));
  const draining = (key: string) => peers.get(key)?.heartbeat.draining === true;
  if (!source.assignments.some((a) => draining(a.peer_key))) return [];
  const sourcePeer = source.assignments.find((a) => a.rank === 0)?.peer_key;
  if (!sourcePeer || !movesCaches(peers.get(sourcePeer))) return [];
  return others.filter((i) => {
    if (i.instance.assignments.some((a) => draining(a.peer_key))) return false;
    const key = rank0Peer(i);
    return key !== undefined && movesCaches(peers.get(key));
  });
}

/** What one cache move did, for the stream's final event, the log and the metrics. */
export type KvMoveResult =
  | {
      readonly ok: true;
      readonly saved: KvSaved;
      readonly restored: KvRestored;
      readonly seconds: number;
    }
  | {
      readonly ok: false;
      readonly why: string;
      readonly bytes: number;
      readonly seconds: number;
      /** The file was larger than what was left of the budget (later moves will not fit either). */
      readonly overBudget?: true;
    };

/**
 * Saves the stream's slot on `from` (rank 0's node of the source instance), and restores it on
 * `to`'s, within `timeoutMs` in all and `budget` bytes. Never throws.
 */
export async function moveCache(
  port: KvMovePort,
  move: {
    readonly from: { readonly instanceId: InstanceId; readonly peerKey: string };
    readonly to: ReadyInstance;
    readonly seed: number;
    readonly timeoutMs: number;
    /** Bytes still allowed off the source node; a larger file is not moved. */
    readonly budget: number;
  },
): Promise<KvMoveResult> {
  const started = performance.now();
  const left = () => Math.max(1, Math.round(move.timeoutMs - (performance.now() - started)));
  const seconds = () => (performance.now() - started) / 1000;
  const failed = (why: string, bytes = 0, overBudget?: true): KvMoveResult => ({
    ok: false,
    why,
    bytes,
    seconds: seconds(),
    ...(overBudget ? { overBudget } : {}),
  });
  const toPeer = rank0Peer(move.to);
  if (!toPeer) return failed("the target has no rank 0");
  try {
    const s = await port.save(move.from.peerKey, {
      instance_id: move.from.instanceId,
      seed: move.seed,
      timeout_ms: left(),
    });
    if (!s.ok) return failed(`save: ${s.error.message}`);
    if (s.saved.bytes > move.budget)
      return failed(
        `the slot file (${s.saved.bytes} bytes) is over what is left of the drain's budget (${move.budget})`,
        0,
        true,
      );
    const r = await port.restore(toPeer, {
      instance_id: move.to.instance.instance_id,
      saved: s.saved,
      timeout_ms: left(),
    });
    if (!r.ok) return failed(`restore: ${r.error.message}`, s.saved.bytes);
    return { ok: true, saved: s.saved, restored: r.restored, seconds: seconds() };
  } catch (e) {
    return failed((e as Error).message);
  }
}

/** A stream's cache on its way: the instance it goes to, where it came from, how the move went. */
export interface CarriedCache {
  readonly target: ReadyInstance;
  readonly from: { readonly instanceId: InstanceId; readonly peerKey: string };
  readonly result: KvMoveResult;
}

/**
 * Moves a handed-over stream's cache from `lost` (its instance, whose rank-0 node is live and moves
 * caches) to the instance the continuation will go to: one of `planned`, picked as a request is.
 * The hand-over checked the stream can go on. Undefined where no cache can move (the gateway has no
 * port, the stream no seed, the source node is gone, no target restores caches): the continuation
 * then goes wherever it would have.
 */
export async function carryCache(
  ctx: ChatContext,
  request: RequestContext,
  lost: { readonly instanceId: string; readonly endpoint: string },
  planned: readonly ReadyInstance[],
): Promise<CarriedCache | undefined> {
  const port = ctx.o.kvMove;
  const seed = request.kvSeed;
  if (!port || seed === undefined) return;
  const live = ctx.o.cluster.livePeers();
  const peers = new Map(live.map((p) => [p.heartbeat.peer_key, p]));
  const source = ctx.o.cluster.snapshot().instances[lost.instanceId];
  const peerKey = source?.assignments.find((a) => a.rank === 0)?.peer_key;
  if (!source || !peerKey || !movesCaches(peers.get(peerKey))) return;
  const targets = planned.filter((i) => movesCaches(peers.get(rank0Peer(i) ?? "")));
  if (targets.length === 0) return;
  const target = pick(ctx, targets, live, request);
  const from = { instanceId: source.instance_id, peerKey };
  // The engine saves a slot once its task has stopped; a resumable stream's task goes on past its
  // connection (the engine keeps it for a resume) until it is stopped by name.
  if (request.resumable) await stopEngineStream(ctx, request, lost);
  const result = await moveCache(port, {
    from,
    to: target,
    seed,
    timeoutMs: ctx.limits.kv_move_timeout_ms,
    budget: ctx.kv.budgetLeft(peerKey, ctx.limits.kv_move_drain_budget_bytes),
  });
  if (!result.ok)
    ctx.o.log.warn(
      {
        command: request.commandId,
        from: from.instanceId,
        to: target.instance.instance_id,
        why: result.why,
      },
      "a stream's KV cache did not move; its continuation prefills it",
    );
  return { target, from, result };
}

/** Stops a resumable stream's generation on its engine (best effort, within the connect bound). */
async function stopEngineStream(
  ctx: ChatContext,
  request: RequestContext,
  lost: { readonly instanceId: string; readonly endpoint: string },
): Promise<void> {
  const s = { endpoint: lost.endpoint, instanceId: lost.instanceId, commandId: request.commandId };
  try {
    (await engineStreamCall(ctx, s, { method: "DELETE" })).resume();
  } catch (e) {
    ctx.o.log.debug(
      { command: request.commandId, err: (e as Error).message },
      "stopping the stream on its engine failed",
    );
  }
}

/** One cache move as the metrics count it (KvMoveStats). */
export interface KvMoveReport {
  readonly model: string;
  readonly outcome: "moved" | "failed";
  readonly bytes: number;
  readonly restoredTokens: number;
  /** Tokens the target still prefilled for the continuation (its timings.prompt_n). */
  readonly prefilledTokens: number | undefined;
  readonly seconds: number;
  /** The prefill the restored tokens spared, at the target's recent prefill rate, less the move. */
  readonly savedSeconds: number | undefined;
}

/** A move's result as the metrics count it (`prefilledTokens`: what the target still computed). */
export function moveReport(
  model: string,
  result: KvMoveResult,
  prefilledTokens: number | undefined,
): Omit<KvMoveReport, "savedSeconds"> {
  return {
    model,
    outcome: result.ok ? "moved" : "failed",
    bytes: result.ok ? result.saved.bytes : result.bytes,
    restoredTokens: result.ok ? result.restored.tokens : 0,
    prefilledTokens,
    seconds: result.seconds,
  };
}

/**
 * A handed-over stream ended: its cache move is counted, with what the target still prefilled
 * (the continuation's timings), and logged with its parts.
 */
export function reportCarried(
  ctx: ChatContext,
  request: Pick<RequestContext, "body" | "commandId">,
  c: CarriedCache,
  timings: EngineTimings | undefined,
): void {
  const { result } = c;
  const to = c.target.instance.instance_id;
  const r = ctx.kv.record(moveReport(request.body.model, result, timings?.prompt_n), c.from, to);
  const parts = result.ok
    ? {
        save_ms: result.saved.save_ms,
        fetch_ms: result.restored.fetch_ms,
        restore_ms: result.restored.restore_ms,
      }
    : { why: result.why };
  ctx.o.log.info(
    { command: request.commandId, ...r, ...parts, to },
    result.ok ? "a stream's KV cache moved with it" : "a stream's KV cache did not move with it",
  );
}

/** Per instance: prompt tokens per second of recent answers that prefilled at least this many. */
const RATE_MIN_TOKENS = 64;

/**
 * The cache moves of this gateway (the metrics read it), each instance's recent prefill rate (to
 * say what a move spared), and the bytes moved off each draining node (its budget).
 */
export class KvMoveStats {
  readonly totals = new Map<string, { moves: number; failed: number }>();
  bytes = 0;
  restoredTokens = 0;
  prefilledTokens = 0;
  seconds = 0;
  savedSeconds = 0;
  private readonly rates = new Map<string, number>();
  private readonly offNode = new Map<string, number>();

  /** An answer's timings: a prefill of enough tokens updates the instance's rate. */
  notePrefill(instanceId: string, t: EngineTimings | undefined): void {
    if (!t?.prompt_n || !t.prompt_ms || t.prompt_n < RATE_MIN_TOKENS) return;
    const rate = t.prompt_n / (t.prompt_ms / 1000);
    const prev = this.rates.get(instanceId);
    if (prev === undefined && this.rates.size >= 4096) this.rates.clear();
    this.rates.set(instanceId, prev === undefined ? rate : prev * 0.7 + rate * 0.3);
  }

  /** Bytes still allowed off a draining node, of `budget`. */
  budgetLeft(peerKey: string, budget: number): number {
    return Math.max(0, budget - (this.offNode.get(peerKey) ?? 0));
  }

  /** A move ended: counted, and (when it moved) charged to its source node's budget. */
  record(
    r: Omit<KvMoveReport, "savedSeconds">,
    from: { readonly peerKey: string },
    to: string,
  ): KvMoveReport {
    const rate = this.rates.get(to);
    const savedSeconds =
      r.outcome === "moved" && rate
        ? Math.max(0, (r.restoredTokens - (r.prefilledTokens ?? 0)) / rate - r.seconds)
        : undefined;
    const t = this.totals.get(r.model) ?? { moves: 0, failed: 0 };
    if (r.outcome === "moved") t.moves++;
    else t.failed++;
    if (!this.totals.has(r.model) && this.totals.size >= 1024) this.totals.clear();
    this.totals.set(r.model, t);
    this.bytes += r.bytes;
    this.offNode.set(from.peerKey, (this.offNode.get(from.peerKey) ?? 0) + r.bytes);
    if (r.outcome === "moved") {
      this.restoredTokens += r.restoredTokens;
      this.prefilledTokens += r.prefilledTokens ?? 0;
      this.seconds += r.seconds;
      this.savedSeconds += savedSeconds ?? 0;
    }
    return { ...r, savedSeconds };
  }
}

/** A stream that may be handed over: asked on each tick while it is registered. */
export interface HandoverCandidate {
  check(live: readonly PeerView[]): void;
}

/** How often the streams that may move are checked against the peers' draining flags. */
export const HANDOVER_CHECK_MS = 250;

/**
 * The streams of this gateway that may be handed over, checked together on one timer that runs
 * only while there is one (a burst of streams adds no timer each).
 */
export class HandoverWatch {
  private readonly streams = new Set<HandoverCandidate>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly livePeers: () => readonly PeerView[]) {}

  add(s: HandoverCandidate): () => void {
    this.streams.add(s);
    this.timer ??= setInterval(() => this.tick(), HANDOVER_CHECK_MS);
    this.timer.unref();
    return () => {
      this.streams.delete(s);
      if (this.streams.size === 0 && this.timer) {
        clearInterval(this.timer);
        this.timer = undefined;
      }
    };
  }

  get size(): number {
    return this.streams.size;
  }

  private tick(): void {
    const live = this.livePeers();
    if (!live.some((p) => p.heartbeat.draining)) return;
    for (const s of this.streams) s.check(live);
  }
}
