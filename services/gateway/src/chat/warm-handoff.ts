// Warm conversations leave a draining node with their caches (issue 50; docs/api.md "Stream
// migration"). When this node's drain has nothing left in flight and, just before it stops, the
// model of each of its instances is ready elsewhere: the conversations its engine most recently
// served (the prompt-cache map's newest prompts there, each naming its slot by the seed its request
// was sent with) are saved here and restored on the ready instances off draining nodes, round robin,
// at most as many per target as its engine has slots, within the drain's byte budget and its
// deadline. Each prompt restored is recorded on its new instance and told to the other gateways,
// so the conversation's next turn is routed there and its engine reuses the history.
import type { ClusterView, InstanceId } from "@ic/protocol";
import type { Logger } from "@ic/log";
import type { PromptCacheMap } from "../prompt-cache.ts";
import { readyInstances } from "../readiness.ts";
import type { ChatLimits } from "./request.ts";
import { routable } from "./routing.ts";
import { handoverTargets, moveCache, moveReport } from "./handover.ts";
import type { KvMovePort, KvMoveStats } from "./handover.ts";

export interface WarmHandOffOptions {
  readonly cluster: ClusterView;
  readonly port: KvMovePort;
  readonly cache: PromptCacheMap;
  readonly stats: KvMoveStats;
  readonly limits: Pick<
    ChatLimits,
    "kv_move" | "kv_move_timeout_ms" | "kv_move_drain_budget_bytes"
  >;
  readonly log: Logger;
}

/** What a hand-off did: conversations moved, and those that could not be. */
export interface WarmHandOffResult {
  readonly moved: number;
  readonly failed: number;
}

/**
 * Moves the warm conversations of this node's instances to the replicas taking them, until
 * `deadline` (ms since the epoch). Never throws; a move that fails is logged and skipped.
 */
export async function handOffWarm(
  o: WarmHandOffOptions,
  deadline: number,
): Promise<WarmHandOffResult> {
  const result = { moved: 0, failed: 0 };
  if (!o.limits.kv_move) return result;
  const self = o.cluster.peerKey;
  const snap = o.cluster.snapshot();
  const live = o.cluster.livePeers();
  const mine = Object.values(snap.instances).filter(
    (i) => i.assignments.find((a) => a.rank === 0)?.peer_key === self,
  );
  for (const source of mine) {
    const others = routable(readyInstances(snap, source.model_id), live).filter(
      (i) => i.instance.instance_id !== source.instance_id,
    );
    const targets = handoverTargets(source, others, live);
    const prompts = o.cache.warmest(source.instance_id);
    if (targets.length === 0 || prompts.length === 0) continue;
    /** Caches restored per target, and its engine's slots once known. */
    const filled = new Map<string, { n: number; slots: number }>();
    let k = 0;
    for (const prompt of prompts) {
      const open = targets.filter((t) => {
        const f = filled.get(t.instance.instance_id);
        return !f || f.n < f.slots;
      });
      const left = deadline - Date.now();
      const budget = o.stats.budgetLeft(self, o.limits.kv_move_drain_budget_bytes);
      if (open.length === 0 || left <= 0 || budget <= 0) break;
      const to = open[k++ % open.length]!;
      const from = { instanceId: source.instance_id as InstanceId, peerKey: self };
      const r = await moveCache(o.port, {
        from,
        to,
        seed: prompt.seed,
        timeoutMs: Math.min(o.limits.kv_move_timeout_ms, left),
        budget,
      });
      const toId = to.instance.instance_id;
      o.stats.record(moveReport(source.model_id, r, undefined), from, toId);
      if (!r.ok) {
        result.failed++;
        if (r.overBudget) break;
        o.log.warn(
          { from: source.instance_id, to: toId, why: r.why },
          "a warm conversation's KV cache did not move",
        );
        continue;
      }
      result.moved++;
      const f = filled.get(toId) ?? { n: 0, slots: r.restored.slots };
      filled.set(toId, { n: f.n + 1, slots: r.restored.slots });
      o.cache.moved(toId, prompt);
      o.log.info(
        {
          from: source.instance_id,
          to: toId,
          tokens: r.restored.tokens,
          bytes: r.saved.bytes,
          seconds: r.seconds,
        },
        "a warm conversation's KV cache moved to the replica taking it",
      );
    }
  }
  return result;
}
