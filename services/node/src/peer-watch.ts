// The watch connection: every follower holds one long-lived HTTP request open to its master's API
// (GET /cluster/watch). A killed process's sockets close at once, seconds before its heartbeats are
// missed, so either end that sees the connection drop asks its cluster agent to probe the other over
// the bus (ClusterAgent.connectionLost), which declares it gone only when no probe is answered.
// A cut network or a frozen host closes nothing: those are still found by the liveness timeouts.
import { request as httpRequest } from "node:http";
import type { ClientRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { trustedTls } from "@ic/tls";
import type { Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { z } from "zod";
import { validationError } from "@ic/http";
import type { Logger } from "@ic/log";
import type { PeerView } from "@ic/cluster";
import { ServiceError } from "@ic/protocol";

/** What the watch needs of the cluster agent. */
export interface WatchAgent {
  readonly peerKey: string;
  masterPeer(): PeerView | undefined;
  connectionLost(peerKey: string, startedAt: number | undefined, via: string): Promise<boolean>;
}

export const WATCH_PATH = "/cluster/watch";
/** Watch connections one node serves at most (one per follower when it is master). */
export const MAX_WATCHERS = 4096;
const KEEPALIVE_MS = 15_000;

export const WatchQuerySchema = z.object({
  peer_key: z.string().min(1).max(200),
  started_at: z.coerce.number().finite(),
});

/**
 * Serves GET /cluster/watch: an SSE stream that stays open (a comment every 15 s) until either end
 * goes. When it closes, the agent probes the peer that held it.
 */
export function watchRoutes(app: Hono, o: { agent: WatchAgent; log: Logger }): void {
  let open = 0;
  app.get(WATCH_PATH, (c) => {
    const parsed = WatchQuerySchema.safeParse(c.req.query());
    if (!parsed.success) throw validationError(parsed.error, "query");
    const { peer_key, started_at } = parsed.data;
    if (open >= MAX_WATCHERS)
      throw new ServiceError("unavailable", `this node already serves ${MAX_WATCHERS} watches`);
    open++;
    c.header("x-accel-buffering", "no");
    return streamSSE(c, async (stream) => {
      let closed = false;
      const done = new Promise<void>((r) =>
        stream.onAbort(() => {
          closed = true;
          r();
        }),
      );
      try {
        await stream.write(": watching\n\n");
        while (!closed) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([done, new Promise((r) => (timer = setTimeout(r, KEEPALIVE_MS)))]);
          clearTimeout(timer);
          if (!closed) await stream.write(": keepalive\n\n");
        }
      } finally {
        open--;
        void o.agent
          .connectionLost(peer_key, started_at, "its watch connection closed")
          .catch((e: unknown) => o.log.warn({ err: e }, "probe after a closed watch failed"));
      }
    });
  });
}

export interface PeerWatchOptions {
  readonly agent: WatchAgent;
  readonly log: Logger;
  readonly self: { readonly peerKey: string; readonly startedAt: number };
  /** The cluster's node token, read at each connection (a reload may rotate it); absent when anonymous. */
  readonly token?: (() => string) | undefined;
  /** How often the target (the current master) is checked. */
  readonly checkMs?: number;
  /** Pause before a dropped or refused watch is opened again. */
  readonly retryMs?: number;
}

interface Watch {
  readonly peerKey: string;
  readonly startedAt: number;
  readonly req: ClientRequest;
  /** Closed by us (the master changed, or stop): not a failure signal. */
  dropped: boolean;
}

/** The follower's end: one watch to the current master, moved when the master changes. */
export class PeerWatch {
  private current: Watch | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** No new watch to this peer before this time (after a drop or a refusal). */
  private retryAt = new Map<string, number>();
  private stopped = false;
  private readonly log: Logger;

  constructor(private readonly o: PeerWatchOptions) {
    this.log = o.log.child({ component: "peer-watch" });
  }

  start(): void {
    this.timer = setInterval(() => this.reconcile(), this.o.checkMs ?? 200);
    this.reconcile();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
    this.close();
  }

  /** The master watched now (for tests and diagnostics). */
  get watching(): string | undefined {
    return this.current?.peerKey;
  }

  private close(): void {
    const w = this.current;
    this.current = undefined;
    if (!w) return;
    w.dropped = true;
    w.req.destroy();
  }

  private reconcile(): void {
    if (this.stopped) return;
    const m = this.o.agent.masterPeer();
    const target = m?.lostAt === undefined && m?.heartbeat.api_url ? m.heartbeat : undefined;
    const cur = this.current;
    if (cur && target && cur.peerKey === target.peer_key && cur.startedAt === target.started_at)
      return;
    this.close();
    if (!target) return;
    if ((this.retryAt.get(target.peer_key) ?? 0) > Date.now()) return;
    try {
      this.open(target.peer_key, target.started_at, target.api_url);
    } catch (e) {
      // A URL it cannot dial (a peer's malformed api_url): retried later, never thrown out of the timer.
      this.retryAt.set(target.peer_key, Date.now() + (this.o.retryMs ?? 1000));
      this.log.warn({ err: e, api_url: target.api_url }, "watch not opened");
    }
  }

  private open(peerKey: string, startedAt: number, apiUrl: string): void {
    const url = new URL(WATCH_PATH, apiUrl);
    url.searchParams.set("peer_key", this.o.self.peerKey);
    url.searchParams.set("started_at", String(this.o.self.startedAt));
    // Over TLS with the cluster CA when the master's API is https (agent: false, so it says which CAs).
    const tls = url.protocol === "https:";
    const req = (tls ? httpsRequest : httpRequest)(url, {
      method: "GET",
      agent: false,
      ...(tls ? trustedTls() : {}),
      headers: {
        accept: "text/event-stream",
        ...(this.o.token ? { authorization: `Bearer ${this.o.token()}` } : {}),
      },
    });
    const w: Watch = { peerKey, startedAt, req, dropped: false };
    this.current = w;
    let settled = false;
    const ended = (why: string, signal: boolean) => {
      if (settled) return;
      settled = true;
      if (this.current === w) this.current = undefined;
      this.retryAt.set(peerKey, Date.now() + (this.o.retryMs ?? 1000));
      if (w.dropped || this.stopped) return;
      if (!signal) {
        this.log.debug({ peer_key: peerKey, why }, "watch not opened");
        return;
      }
      this.log.info({ peer_key: peerKey, why }, "watch connection to the master dropped; probing");
      void this.o.agent
        .connectionLost(peerKey, startedAt, `the watch connection to it ${why}`)
        .catch((e: unknown) => this.log.warn({ err: e }, "probe after a dropped watch failed"));
    };
    req.on("response", (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        ended(`was answered ${res.statusCode}`, false);
        return;
      }
      res.on("data", () => undefined);
      res.on("end", () => ended("ended", true));
      res.on("close", () => ended("closed", true));
      res.on("error", (e) => ended(`failed (${e.message})`, true));
    });
    // Refused or reset before an answer: the master's host is up but nothing listens (a killed
    // process) -- as good a signal as a drop; the probe decides.
    req.on("error", (e: NodeJS.ErrnoException) => {
      const signal = e.code === "ECONNREFUSED" || e.code === "ECONNRESET";
      ended(signal ? `was ${e.code === "ECONNREFUSED" ? "refused" : "reset"}` : e.message, signal);
    });
    req.end();
  }
}
