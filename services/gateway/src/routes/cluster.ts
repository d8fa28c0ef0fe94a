// GET /state (and its live stream for the dashboard), GET /v1/ping, POST /admin/restart and
// POST /admin/drain.
import type { Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { ServiceError, StateQuerySchema } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";
import type { RequestLoad } from "../request-load.ts";
import { stateDocument } from "../view.ts";
import { validationError } from "@ic/http";

export interface ClusterRouteOptions {
  readonly cluster: ClusterView;
  readonly name: string;
  readonly now: () => number;
  /** Replaces the process image; called after the response has been sent. */
  readonly restart: () => void;
  /** Drain and stop this node (as on SIGTERM). */
  readonly drain: () => void;
  /** GET /state/stream: a document at least this often (the heartbeat period). */
  readonly streamPeriodMs: number;
  /** This gateway's requests in flight (`tasks_open`, per-instance `outstanding`). */
  readonly load?: RequestLoad;
}

/** Streams open at once per node; one more is 503 unavailable. */
export const MAX_STATE_STREAMS = 64;
/** After a change, the next document waits at least this long (a burst of events sends one). */
const STREAM_MIN_GAP_MS = 250;

export function clusterRoutes(app: Hono, o: ClusterRouteOptions): void {
  app.get("/state", (c) => {
    const q = StateQuerySchema.safeParse(c.req.query());
    if (!q.success) throw validationError(q.error, "query");
    return c.json(
      stateDocument(o.cluster, o.name, o.now(), {
        links: q.data.links === "1",
        ...(o.load ? { load: o.load } : {}),
      }),
    );
  });
  // The same document as an SSE stream: one `state` event at once, then one after each change of
  // the replica (at most every 250 ms) and at least every period (telemetry, last-heard ages).
  let open = 0;
  app.get("/state/stream", (c) => {
    const q = StateQuerySchema.safeParse(c.req.query());
    if (!q.success) throw validationError(q.error, "query");
    if (open >= MAX_STATE_STREAMS)
      throw new ServiceError(
        "unavailable",
        `this node already serves ${MAX_STATE_STREAMS} streams`,
      );
    open++;
    const links = q.data.links === "1";
    const period = o.streamPeriodMs;
    c.header("x-accel-buffering", "no");
    c.header("cache-control", "no-store");
    return streamSSE(c, async (stream) => {
      let closed = false;
      // A change while a document is being written is not lost: `dirty` skips the next wait.
      let dirty = false;
      let wake: (() => void) | undefined;
      const poke = () => {
        dirty = true;
        wake?.();
      };
      const unsubscribe = o.cluster.on({ event: poke, session: poke });
      stream.onAbort(() => {
        closed = true;
        poke();
      });
      try {
        while (!closed) {
          dirty = false;
          const doc = stateDocument(o.cluster, o.name, o.now(), {
            links,
            ...(o.load ? { load: o.load } : {}),
          });
          await stream.writeSSE({ event: "state", data: JSON.stringify(doc) });
          let timer: NodeJS.Timeout | undefined;
          if (!dirty && !closed)
            await new Promise<void>((r) => {
              wake = r;
              timer = setTimeout(r, period);
            });
          clearTimeout(timer);
          wake = undefined;
          if (!closed) await new Promise((r) => setTimeout(r, STREAM_MIN_GAP_MS));
        }
      } finally {
        open--;
        unsubscribe();
      }
    });
  });
  app.get("/v1/ping", (c) => c.json({ ok: true, peer_key: o.cluster.peerKey }));
  app.post("/admin/restart", (c) => {
    setTimeout(o.restart, 50).unref();
    return c.json({ ok: true, restarting: true, node: o.name }, 202);
  });

  app.post("/admin/drain", (c) => {
    setTimeout(o.drain, 50).unref();
    return c.json({ ok: true, draining: true, node: o.name }, 202);
  });
}
