// Picks which ready instance of a model serves a request. Without a prefix key: fewest outstanding
// requests, then the lowest link latency from this node (a local rank 0 counts as 0), then the
// oldest.
// With one (prefix-key.ts), consistent hashing with bounded loads: the instances are ranked (when
// routing on the caches, prompt-cache.ts) by how much of the prompt their prompt cache holds, less
// the prefill queued there before the request's own (this gateway's requests not yet answering), less
// an eighth of a prompt per request in flight there and half of what taking the prompt would drop
// there, then by the prompts each can still take, then by rendezvous hash of the key and each
// instance id (the same order on every gateway), and the request goes to the first whose requests in
// flight from this gateway stay within `loadFactor` times the mean, or the mean plus LOAD_SLACK,
// whichever is more (counting this request), so a conversation keeps its replica (and its KV cache)
// while no replica is flooded or starved. Pure, so tables test it.
import { createHash } from "node:crypto";
import type { ReadyInstance } from "./readiness.ts";

/** How far above the mean load the preferred instance may go before a request moves on (25%). */
export const DEFAULT_LOAD_FACTOR = 1.25;
/**
 * Prompts of prefill one request in flight is taken to cost a request queued behind it, besides the
 * prefill it still has ahead (`pending`, counted whole): a request that is decoding adds a token to
 * each of the engine's batch steps, so a newcomer's prefill hardly waits for it. An instance holding
 * the whole prompt keeps it until it has about eight requests more in flight than one holding none;
 * the load bound (`loadFactor`, LOAD_SLACK) moves a request off a flooded instance before that. It
 * was half a prompt: with the cluster's counts, up to a heartbeat old, a conversation whose turns go
 * through several gateways was counted twice at its replica and moved off its cache at two requests'
 * difference (decisions.md, "The cache ranking counts the prefill queued").
 */
export const LOAD_WEIGHT = 0.125;
/**
 * What a held prompt the request would push out of an instance's cache is worth, as a share of its
 * characters: a group's or a conversation's next request would compute it again, if it comes. So a
 * new prompt goes where there is room (a replica with a free slot) before where it evicts.
 */
export const EVICT_WEIGHT = 0.5;
/**
 * Requests the preferred instance may hold above the mean in any case: a gateway's own counts are
 * small (a handful in flight), where 1.25x the mean is the mean itself and the luck of which
 * conversations are on this gateway right now would move some every turn.
 */
export const LOAD_SLACK = 2;

export interface BalanceInput {
  readonly outstanding: ReadonlyMap<string, number>;
  /** This node's peer key: an instance whose rank 0 runs here has latency 0. */
  readonly selfPeerKey: string;
  /** Measured round trip from this node to a peer (heartbeat links); undefined when unknown. */
  readonly rttMs: (peerKey: string) => number | undefined;
  /** The request's prefix key: requests with the same key prefer the same instance. */
  readonly prefixKey?: string | undefined;
  /**
   * The loads the prefix bound compares (default `outstanding`): the gateway passes its own requests
   * in flight, exact at every request. The cluster-wide counts add the other gateways' heartbeats,
   * up to a period old, and count a conversation twice while the gateway it just left still reports
   * its previous turn: a bound on them moves conversations that should stay. Each gateway bounding
   * its own share bounds the sum (1.25x the mean, plus LOAD_SLACK per gateway at most).
   */
  readonly boundLoad?: ReadonlyMap<string, number> | undefined;
  /**
   * The prompt caches (prompt-cache.ts): characters of the request's prompt each instance holds, and
   * the prompt's length. The instances are ranked by what they hold less LOAD_WEIGHT prompts per
   * request in flight there (`outstanding`, the cluster's, so that every gateway weighs alike: the
   * prefill a request saves against the queue it joins), then by the rendezvous hash. Absent: the
   * hash alone.
   */
  readonly cache?:
    | {
        readonly held: (instanceId: string) => number;
        readonly promptChars: number;
        /** Characters of held prompts the request would push out there (none: room). */
        readonly displaced?: (instanceId: string) => number;
        /** Prompts an instance can take before it drops one: between equals, the roomiest. */
        readonly room?: (instanceId: string) => number;
        /**
         * Characters of prompts queued there before this one's: this gateway's requests the engine
         * has not begun to answer, less what it held of them (request-load.ts `prefillAhead`).
         */
        readonly pending?: (instanceId: string) => number;
      }
    | undefined;
  /** Bound of the preferred instance's load, as a multiple of the mean (DEFAULT_LOAD_FACTOR). */
  readonly loadFactor?: number | undefined;
}

/** The instance to send the next request to; undefined only for an empty list. */
export function chooseInstance(
  ready: readonly ReadyInstance[],
  o: BalanceInput,
): ReadyInstance | undefined {
  const load = (r: ReadyInstance) => o.outstanding.get(r.instance.instance_id) ?? 0;
  if (o.prefixKey !== undefined && ready.length > 1) {
    const bound = o.boundLoad ?? o.outstanding;
    const inFlight = (r: ReadyInstance) => bound.get(r.instance.instance_id) ?? 0;
    const total = ready.reduce((n, r) => n + inFlight(r), 0) + 1;
    const mean = total / ready.length;
    const cap = Math.max(
      Math.ceil((o.loadFactor ?? DEFAULT_LOAD_FACTOR) * mean),
      Math.ceil(mean) + LOAD_SLACK,
    );
    const key = o.prefixKey;
    const cache = o.cache;
    const scored = ready.map((r) => ({
      r,
      held: cache?.held(r.instance.instance_id) ?? 0,
      dropped: cache?.displaced?.(r.instance.instance_id) ?? 0,
      room: cache?.room?.(r.instance.instance_id) ?? 0,
      pending: cache?.pending?.(r.instance.instance_id) ?? 0,
      score: rendezvous(key, r.instance.instance_id),
    }));
    // What an instance is worth: the prompt it holds, less the prefill queued there before it, less a
    // share of the prompt per request in flight (a new conversation goes where the queue is
    // shortest; the gateways learn where from the bus), less a share of the prompts it would drop.
    const value = cache
      ? (x: (typeof scored)[number]) =>
          x.held -
          x.pending -
          LOAD_WEIGHT * load(x.r) * cache.promptChars -
          EVICT_WEIGHT * x.dropped
      : () => 0;
    const ranked = scored.sort(
      (a, b) =>
        value(b) - value(a) ||
        b.room - a.room ||
        (a.score < b.score ? 1 : a.score > b.score ? -1 : 0),
    );
    const within = ranked.find((x) => inFlight(x.r) < cap);
    if (within) return within.r;
  }
  const latency = (r: ReadyInstance) => {
    const peer = r.instance.assignments[0]!.peer_key;
    return peer === o.selfPeerKey ? 0 : (o.rttMs(peer) ?? Number.POSITIVE_INFINITY);
  };
  const scored = ready.map((r) => ({ r, load: load(r), rtt: latency(r) }));
  scored.sort(
    (a, b) =>
      a.load - b.load ||
      (a.rtt === b.rtt ? 0 : a.rtt < b.rtt ? -1 : 1) ||
      a.r.instance.created_at - b.r.instance.created_at ||
      a.r.instance.instance_id.localeCompare(b.r.instance.instance_id),
  );
  return scored[0]?.r;
}

/** The rendezvous (highest random weight) score of an instance for a key: 48 bits of sha256. */
function rendezvous(key: string, instanceId: string): number {
  return createHash("sha256").update(key).update("\0").update(instanceId).digest().readUIntBE(0, 6);
}
