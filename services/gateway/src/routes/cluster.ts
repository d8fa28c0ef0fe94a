// GET /state, GET /v1/ping and POST /admin/restart.
import type { Hono } from "hono";
import { StateQuerySchema } from "@ic/protocol";
import type { ClusterView } from "../ports.ts";
import { stateDocument } from "../view.ts";
import { validationError } from "../errors.ts";

export interface ClusterRouteOptions {
  readonly cluster: ClusterView;
  readonly name: string;
  readonly now: () => number;
  /** Replaces the process image; called after the response has been sent. */
  readonly restart: () => void;
}

export function clusterRoutes(app: Hono, o: ClusterRouteOptions): void {
  app.get("/state", (c) => {
    const q = StateQuerySchema.safeParse(c.req.query());
    if (!q.success) throw validationError(q.error, "query");
    return c.json(stateDocument(o.cluster, o.name, o.now(), { links: q.data.links === "1" }));
  });
  app.get("/v1/ping", (c) => c.json({ ok: true, peer_key: o.cluster.peerKey }));
  app.post("/admin/restart", (c) => {
    setTimeout(o.restart, 50).unref();
    return c.json({ ok: true, restarting: true, node: o.name }, 202);
  });
}
