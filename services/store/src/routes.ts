// The /store endpoints of a node (registered by the node on its HTTP app): the local storage report, purge-staging broadcast over the bus
// to every node (each node purges its own staging root; the store copy is never touched), and model
// pulls, forwarded over the bus to the store host (the node with store_path) from any node.
import type { Context, Hono } from "hono";
import type { Bus } from "@ic/bus";
import { parseJson, validationError } from "@ic/http";
import type { ClusterView } from "@ic/protocol";
import type { Logger } from "@ic/log";
import {
  askPeer,
  fromWireError,
  ModelIdSchema,
  PullBodySchema,
  PurgeStagingBodySchema,
  ServiceError,
  StorageReportSchema,
  toWireError,
} from "@ic/protocol";
import type {
  ClusterStorage,
  HealthEntry,
  ModelId,
  PeerAnswer,
  PeerApi,
  PeerAskOptions,
  PullRequest,
  PurgeReply,
  ReplyOf,
  StorageReport,
} from "@ic/protocol";
import { buildStorageReport } from "./client/storage-report.ts";
import { peerCopyRoutes, type PeerServeStats } from "./client/peer-routes.ts";
import type { StagingClient } from "./client/staging-client.ts";
import { nodeDisk } from "./disk.ts";
import type { StagingSettings } from "@ic/staging";
import type { PullManager } from "./host/pulls.ts";
import type { StoreHost } from "./host/store-host.ts";
import type { LooseEntry } from "./host/store-watch.ts";

export interface StoreRouteOptions {
  /** The purge broadcast's two ends (a loopback bus in tests). */
  readonly bus: Pick<Bus, "respond" | "requestMany">;
  readonly cluster: ClusterView;
  /** This node's staging client (the node's stager creates it once staging is configured). */
  readonly stager: { readonly staging: StagingClient };
  /** The event log's size, for the storage report. */
  readonly eventLog: { usage(): { readonly active_bytes: number; readonly archive_bytes: number } };
  readonly nodeCachePath: string;
  readonly settings: StagingSettings;
  readonly name: string;
  readonly log: Logger;
  readonly purgeWaitMs?: number;
  /** Live peers' APIs (this node excluded) and the token to ask them with: the cluster storage view. */
  readonly peers: PeerAskOptions & { readonly list: () => readonly PeerApi[] };
  /** Counts what this node serves of its staged copies to peers. */
  readonly peerServe?: PeerServeStats | undefined;
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
  const localReport = async (): Promise<StorageReport> => {
    const entries = await o.stager.staging.list();
    const usage = o.eventLog.usage();
    return buildStorageReport({
      nodeCachePath: o.nodeCachePath,
      entries,
      eventLogBytes: usage.active_bytes + usage.archive_bytes,
      volume: await nodeDisk.space(o.nodeCachePath),
      settings: o.settings,
      nowMs: Date.now(),
    });
  };
  app.get("/store/storage", async (c) => c.json(await localReport()));
  peerCopyRoutes(app, () => o.stager.staging, o.peerServe);

  // Every live node's report: this node's, then each peer's over its API (node token, 2 s each).
  app.get("/store/storage/cluster", async (c) => {
    const peers = o.peers.list();
    const [local, ...answers] = await Promise.all([
      localReport(),
      ...peers.map((p) => askPeer(p, "/store/storage", StorageReportSchema, o.peers)),
    ]);
    const out: ClusterStorage = { nodes: [{ name: o.name, report: local! }], unreachable: [] };
    peers.forEach((p, i) => {
      const a = answers[i] as PeerAnswer<StorageReport>;
      if (a.kind === "ok") out.nodes.push({ name: p.name, report: a.body });
      else
        out.unreachable.push({ node: p.name, error: a.kind === "failed" ? a.error : "HTTP 404" });
    });
    return c.json(out);
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

/** The store host answers pull requests from every node (its own included). */
export function servePulls(
  bus: Pick<Bus, "respond">,
  pulls: PullManager,
  store: Pick<StoreHost, "remove" | "checkQuant">,
  self: { readonly name: string; readonly apiUrl: string },
): () => void {
  const answer = async (req: PullRequest): Promise<ReplyOf<"storePulls">> => {
    switch (req.op) {
      case "remove": {
        const live = pulls
          .list()
          .find(
            (p) => p.model_id === req.model_id && (p.state === "queued" || p.state === "running"),
          );
        if (live)
          throw new ServiceError(
            "conflict",
            `a pull of ${req.model_id} is ${live.state}; cancel it first`,
          );
        if (!req.check_only) await store.remove(req.model_id);
        return { ok: true, pulls: [] };
      }
      case "start": {
        // An unknown quantization is a 400 naming the available ones, before anything is queued
        // (unless this very pull already runs: then the answer is the live pull or a conflict).
        const live = pulls.list().find((p) => p.model_id === req.model_id);
        if (req.quant !== undefined && !(live?.state === "queued" || live?.state === "running"))
          await store.checkQuant(req.model_id, req.quant, req.revision);
        const { pull, created } = pulls.start(req.model_id, req.revision, req.quant);
        return { ok: true, pulls: [pull], created };
      }
      case "cancel": {
        const p = pulls.cancel(req.model_id);
        if (!p) throw new ServiceError("not_found", `no pull of ${req.model_id} on the store host`);
        return { ok: true, pulls: [p.pull], dismissed: p.dismissed };
      }
      case "list":
        return { ok: true, pulls: pulls.list() };
      case "locate":
        return { ok: true, pulls: [], store_host: { name: self.name, api_url: self.apiUrl } };
    }
  };
  return bus.respond("storePulls", async (req) => {
    try {
      return await answer(req);
    } catch (e) {
      return { ok: false, error: toWireError(e) };
    }
  });
}

/**
 * POST/GET/DELETE /store/pulls and DELETE /store/models/{org}/{name} on every node; the store host
 * does the work.
 */
export function pullRoutes(
  app: Hono,
  o: { readonly bus: Pick<Bus, "request">; readonly cluster: Pick<ClusterView, "command"> },
): void {
  const ask = async (req: PullRequest): Promise<Extract<ReplyOf<"storePulls">, { ok: true }>> => {
    let reply: ReplyOf<"storePulls">;
    try {
      reply = await o.bus.request("storePulls", req, { timeoutMs: 10_000 });
    } catch (e) {
      throw new ServiceError(
        "unavailable",
        `no store host answered (a cluster pulls models into the store_path of its store node): ${
          e instanceof Error ? e.message : String(e)
        }`,
      );
    }
    if (!reply.ok) throw fromWireError(reply.error);
    return reply;
  };
  const idOf = (org: string, name: string) => {
    const id = ModelIdSchema.safeParse(`${org}/${name}`);
    if (!id.success) throw validationError(id.error, "model_id");
    return id.data;
  };
  /** A model id in a path that is not two segments (`a/b/c`) is bad input, not an unknown route. */
  const badPathId = (c: Context): never => {
    const rest = c.req.path.replace(/^\/store\/(pulls|models)\/?/, "");
    throw new ServiceError(
      "invalid_request",
      `model_id: must be <org>/<name> (two path segments), got ${JSON.stringify(rest)}`,
      { details: { issues: [{ path: "model_id", message: "must be <org>/<name>" }] } },
    );
  };
  app.post("/store/pulls", async (c) => {
    const body = await parseJson(c, PullBodySchema);
    const reply = await ask({
      op: "start",
      model_id: body.model_id,
      ...(body.revision ? { revision: body.revision } : {}),
      ...(body.quant ? { quant: body.quant } : {}),
    });
    return c.json({ pull: reply.pulls[0] }, reply.created === false ? 200 : 202);
  });
  app.get("/store/pulls", async (c) => c.json({ pulls: (await ask({ op: "list" })).pulls }));
  app.get("/store/host", async (c) => {
    const where = (await ask({ op: "locate" })).store_host;
    if (!where) throw new ServiceError("unavailable", "the store host did not say where it is");
    return c.json(where);
  });
  app.delete("/store/pulls/:org/:name", async (c) => {
    const id = idOf(c.req.param("org"), c.req.param("name"));
    const reply = await ask({ op: "cancel", model_id: id });
    return c.json({ pull: reply.pulls[0], dismissed: reply.dismissed ?? false });
  });
  app.delete("/store/pulls/*", badPathId);
  // A pull of it in progress refuses before anything changes; then out of the registry (the master
  // refuses while an instance, a deployment or a model it drafts for uses it), then off the disk.
  app.delete("/store/models/:org/:name", async (c) => {
    const id = idOf(c.req.param("org"), c.req.param("name"));
    await ask({ op: "remove", model_id: id, check_only: true });
    await o.cluster.command({ type: "DeregisterModel", model_id: id });
    await ask({ op: "remove", model_id: id });
    return c.json({ ok: true, model_id: id });
  });
  app.delete("/store/models/*", badPathId);
}

/** nodeHealth warnings for what lies unserved at the top of store_path (a file, a misnamed folder). Pure. */
export function looseEntryHealth(loose: readonly LooseEntry[]): HealthEntry[] {
  return loose.map((e) => ({
    code: "store_loose_file",
    severity: "warn",
    message: `${e.name} in store_path is not served`,
    remediation: e.hint,
  }));
}

/**
 * nodeHealth warnings of the store host for models whose directory was removed from store_path by
 * hand while something uses them (the master's refusal says what). Pure.
 */
export function missingModelHealth(missing: ReadonlyMap<ModelId, string>): HealthEntry[] {
  return [...missing].map(([id, refusal]) => ({
    code: "store_model_missing",
    severity: "warn",
    message: `the directory of ${id} was removed from store_path while it is in use (${refusal}); it is no longer served, and it stays registered until nothing uses it`,
    remediation: `put the model's directory back into store_path, or delete what uses ${id} (DELETE /instance/{id}); it then leaves the registry`,
  }));
}
