// The dashboard's charts over time: what this node's gateway served (requests by status class,
// completion tokens, time to first token) and every node's memory, sampled every
// `dashboard.sample_interval_ms` into a ring that holds the last hour. In memory only: a restarted
// node starts a new hour. GET /v1/diagnostics/series answers this node's ring, or with
// `scope=cluster` every live node's (each gateway counts only the requests it served).
import type { Hono } from "hono";
import { z } from "zod";
import { askPeer, ServiceError } from "@ic/protocol";
import type { PeerApi, PeerAskOptions } from "@ic/protocol";

/** What the chat path says of one finished request (NodeMetrics' observer computes it). */
export interface RequestOutcome {
  readonly status: number;
  /** Time to first token in ms (successful requests that produced one). */
  readonly ttftMs?: number | undefined;
  readonly completionTokens?: number | undefined;
}

export interface NodeMemory {
  readonly node: string;
  readonly used_bytes: number;
  readonly total_bytes: number;
}

export const SeriesSampleSchema = z.object({
  /** End of the interval (ms since the epoch). */
  t: z.number(),
  /** Requests that ended in the interval, by status class. */
  requests: z.object({ ok: z.number(), client_error: z.number(), server_error: z.number() }),
  /** Completion tokens of the interval, per second. */
  tokens_per_s: z.number(),
  /** Time to first token over the interval's successful requests (null when none). */
  ttft_p50_ms: z.number().nullable(),
  ttft_p95_ms: z.number().nullable(),
  memory: z.array(z.object({ node: z.string(), used_bytes: z.number(), total_bytes: z.number() })),
});
export type SeriesSample = z.infer<typeof SeriesSampleSchema>;

export const NodeSeriesSchema = z.object({
  node: z.string(),
  interval_ms: z.number(),
  samples: z.array(SeriesSampleSchema),
});
export type NodeSeries = z.infer<typeof NodeSeriesSchema>;

export const ClusterSeriesSchema = z.object({
  interval_ms: z.number(),
  nodes: z.array(NodeSeriesSchema),
  unreachable: z.array(z.object({ node: z.string(), error: z.string() })),
});

const HOUR_MS = 60 * 60 * 1000;
/** TTFTs kept per interval for its percentiles (a busier interval keeps an even sample of them). */
const TTFT_KEEP = 2048;

/** Nearest-rank percentile of ascending values. Pure. */
export function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export class SeriesRecorder {
  private readonly ring: SeriesSample[] = [];
  private readonly capacity: number;
  private requests = { ok: 0, client_error: 0, server_error: 0 };
  private tokens = 0;
  private ttfts: number[] = [];
  private seen = 0;
  private lastAt: number;

  constructor(
    readonly intervalMs: number,
    now: number,
    private readonly random: () => number = Math.random,
  ) {
    this.capacity = Math.max(1, Math.ceil(HOUR_MS / intervalMs));
    this.lastAt = now;
  }

  record(o: RequestOutcome): void {
    if (o.status < 400) this.requests.ok++;
    else if (o.status < 500) this.requests.client_error++;
    else this.requests.server_error++;
    if (o.completionTokens !== undefined && o.completionTokens > 0)
      this.tokens += o.completionTokens;
    if (o.ttftMs === undefined) return;
    // Reservoir sampling keeps the percentiles honest however many requests an interval has.
    this.seen++;
    if (this.ttfts.length < TTFT_KEEP) this.ttfts.push(o.ttftMs);
    else {
      const j = Math.floor(this.random() * this.seen);
      if (j < TTFT_KEEP) this.ttfts[j] = o.ttftMs;
    }
  }

  /** Closes the interval ending at `now` into a sample; the oldest beyond an hour is dropped. */
  sample(now: number, memory: readonly NodeMemory[]): SeriesSample {
    const seconds = Math.max(0.001, (now - this.lastAt) / 1000);
    const sorted = [...this.ttfts].sort((a, b) => a - b);
    const s: SeriesSample = {
      t: now,
      requests: this.requests,
      tokens_per_s: this.tokens / seconds,
      ttft_p50_ms: percentile(sorted, 50),
      ttft_p95_ms: percentile(sorted, 95),
      memory: [...memory],
    };
    this.ring.push(s);
    if (this.ring.length > this.capacity) this.ring.splice(0, this.ring.length - this.capacity);
    this.requests = { ok: 0, client_error: 0, server_error: 0 };
    this.tokens = 0;
    this.ttfts = [];
    this.seen = 0;
    this.lastAt = now;
    return s;
  }

  samples(): SeriesSample[] {
    return [...this.ring];
  }
}

export interface SeriesRouteOptions {
  readonly node: string;
  readonly recorder: SeriesRecorder;
  /** Live peers' APIs (this node excluded) for scope=cluster. */
  readonly peers: PeerAskOptions & { readonly list: () => readonly PeerApi[] };
}

export const SeriesQuerySchema = z
  .object({ scope: z.enum(["node", "cluster"]).default("node") })
  .strict();

/** GET /v1/diagnostics/series answers one of these (scope=node, scope=cluster). */
export const SeriesAnswerSchema = z.union([NodeSeriesSchema, ClusterSeriesSchema]);

export function seriesRoutes(app: Hono, o: SeriesRouteOptions): void {
  const own = (): NodeSeries => ({
    node: o.node,
    interval_ms: o.recorder.intervalMs,
    samples: o.recorder.samples(),
  });
  app.get("/v1/diagnostics/series", async (c) => {
    const q = SeriesQuerySchema.safeParse(c.req.query());
    if (!q.success)
      throw new ServiceError("invalid_request", "scope must be node or cluster", {
        details: { issues: q.error.issues.map((i) => i.message) },
      });
    if (q.data.scope === "node") return c.json(own());
    const answers = await Promise.all(
      o.peers.list().map(async (peer) => {
        const r = await askPeer(peer, "/v1/diagnostics/series", NodeSeriesSchema, o.peers);
        return { peer, r };
      }),
    );
    return c.json({
      interval_ms: o.recorder.intervalMs,
      nodes: [own(), ...answers.flatMap((a) => (a.r.kind === "ok" ? [a.r.body] : []))],
      unreachable: answers.flatMap((a) =>
        a.r.kind === "ok"
          ? []
          : [{ node: a.peer.name, error: a.r.kind === "failed" ? a.r.error : "not served" }],
      ),
    });
  });
}
