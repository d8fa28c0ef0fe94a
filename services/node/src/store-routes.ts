// The /store endpoints of a node: the local storage report, and purge-staging broadcast over the bus
// to every node (each node purges its own staging root; the store copy is never touched).
import type { Hono } from "hono";
import type { Bus } from "@ic/bus";
import type { EventLog } from "@ic/eventlog";
import { parseJson } from "@ic/gateway";
import type { ClusterView } from "@ic/gateway";
import type { Logger } from "@ic/log";
import { PurgeStagingBodySchema, toWireError } from "@ic/protocol";
import type { PurgeReply } from "@ic/protocol";
import { buildStorageReport, nodeDisk } from "@ic/store";
import type { StagingSettings } from "@ic/store";
import type { StoreStager } from "./store-stager.ts";

export interface StoreRouteOptions {
  /** The purge broadcast's two ends (a loopback bus in tests). */
  readonly bus: Pick<Bus, "respond" | "requestMany">;
  readonly cluster: ClusterView;
  readonly stager: Pick<StoreStager, "staging">;
  readonly eventLog: EventLog;
  readonly nodeCachePath: string;
  readonly settings: StagingSettings;
  readonly name: string;
  readonly log: Logger;
  readonly purgeWaitMs?: number;
}

/** Answers purge broadcasts for this node; returns the unsubscribe function. */
export function servePurge(o: StoreRouteOptions): () => void {
  return o.bus.respond("storePurge", async (req): Promise<PurgeReply> => {
    try {
      const out = await o.stager.staging.purge(req.model_id);
      o.log.info(
        { model: req.model_id ?? "(all idle)", deleted: out.deleted, freed_bytes: out.freed_bytes },
        "purged staging",
      );
      return {
        peer_key: o.cluster.peerKey,
        name: o.name,
        ok: true,
        deleted: out.deleted,
        freed_bytes: out.freed_bytes,
        skipped_in_use: out.skipped_in_use,
      };
    } catch (e) {
      return {
        peer_key: o.cluster.peerKey,
        name: o.name,
        ok: false,
        deleted: [],
        freed_bytes: 0,
        skipped_in_use: [],
        error: toWireError(e),
      };
    }
  });
}

export function storeRoutes(app: Hono, o: StoreRouteOptions): void {
  app.get("/store/storage", async (c) => {
    const entries = await o.stager.staging.list();
    const usage = o.eventLog.usage();
    const report = buildStorageReport({
      nodeCachePath: o.nodeCachePath,
      entries,
      eventLogBytes: usage.active_bytes + usage.archive_bytes,
      volume: await nodeDisk.space(o.nodeCachePath),
      settings: o.settings,
      nowMs: Date.now(),
    });
    return c.json(report);
  });

  app.post("/store/purge-staging", async (c) => {
    const body = await parseJson(c, PurgeStagingBodySchema);
    const members = o.cluster.livePeers().map((p) => p.heartbeat);
    const replies = await o.bus.requestMany(
      "storePurge",
      body.modelId ? { model_id: body.modelId } : {},
      { maxWaitMs: o.purgeWaitMs ?? 10_000, expected: members.length },
    );
    const answered = new Set(replies.map((r) => r.peer_key));
    return c.json({
      ok: replies.every((r) => r.ok) && answered.size === members.length,
      model_id: body.modelId ?? null,
      nodes: replies,
      not_answered: members.filter((m) => !answered.has(m.peer_key)).map((m) => m.name),
      deleted_bytes: replies.reduce((s, r) => s + r.freed_bytes, 0),
    });
  });
}
