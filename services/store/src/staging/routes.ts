// A node's staging routes: its storage report (GET /store/storage, and every live node's at
// /store/storage/cluster), the purge of staged copies broadcast over the bus to every node (each
// purges its own staging root; the store's copy is never touched), and its staged copies served to
// peers (which pieces it holds, and byte ranges of them). Pulls and the store's files are the store
// host's (store-host/routes.ts).
import { open } from "node:fs/promises";
import type { Hono } from "hono";
import type { Bus } from "@ic/bus";
import { parseJson } from "@ic/http";
import type { Logger } from "@ic/log";
import {
  askPeer,
  PurgeStagingBodySchema,
  ServiceError,
  StorageReportSchema,
  toWireError,
} from "@ic/protocol";
import type {
  ClusterStorage,
  ClusterView,
  PeerAnswer,
  PeerApi,
  PeerAskOptions,
  PurgeReply,
  StorageReport,
} from "@ic/protocol";
import type { StagingSettings } from "@ic/staging";
import { nodeDisk } from "../disk.ts";
import { isErrno } from "../paths.ts";
import { filePathParam, modelIdParam } from "../route-params.ts";
import { parseRange } from "../transfer/range.ts";
import { fileResponse } from "../transfer/routes.ts";
import type { StagingClient } from "./staging-client.ts";
import { buildStorageReport } from "./storage-report.ts";

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

const NO_COUNT = { onBytes: () => undefined };

/** What this node served to peers since it started. */
export interface PeerServeStats {
  bytes_served: number;
  range_requests: number;
}

export function peerCopyRoutes(
  app: Hono,
  staging: () => StagingClient,
  stats: PeerServeStats = { bytes_served: 0, range_requests: 0 },
): void {
  app.get("/store/staged/:org/:name/pieces", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    const pieces = await staging().peerPieces(id);
    if (!pieces) throw new ServiceError("not_found", `no copy of ${id} on this node`);
    return c.json(pieces);
  });

  app.get("/store/staged/:org/:name/files/*", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    const path = filePathParam(c);
    const header = c.req.header("range") ?? "";
    const m = /^bytes=(\d{1,15})-(\d{1,15})$/.exec(header.trim());
    if (!m || Number(m[2]) < Number(m[1]))
      throw new ServiceError(
        "invalid_request",
        "a peer copy is read by ranges: send Range: bytes=<start>-<end>",
      );
    const src = await staging().peerFile(id, path, { start: Number(m[1]), end: Number(m[2]) });
    const size = src.file.bytes;
    const ifRange = c.req.header("if-range");
    if (ifRange !== undefined && ifRange !== `"${src.file.sha256}"`)
      throw new ServiceError("conflict", `this node's copy of ${id}/${path} is another version`);
    const range = parseRange(header, size);
    if (range.kind !== "partial")
      return fileResponse({ source: src.path, size, range, headers: {}, counters: NO_COUNT });
    // Opened before answering: a partial renamed into place meanwhile is read under its final name.
    const gone = (e: unknown): never => {
      if (isErrno(e, "ENOENT"))
        throw new ServiceError("conflict", `this node no longer holds ${id}/${path}`);
      throw e;
    };
    const fh = await open(src.path, "r").catch((e: unknown) =>
      isErrno(e, "ENOENT") && src.path !== src.finalPath
        ? open(src.finalPath, "r").catch(gone)
        : gone(e),
    );
    stats.range_requests++;
    return fileResponse({
      source: fh,
      size,
      range,
      headers: {
        "content-type": "application/octet-stream",
        ...(src.file.sha256 ? { etag: `"${src.file.sha256}"` } : {}),
      },
      counters: { onBytes: (n) => (stats.bytes_served += n) },
    });
  });
}
