// The bounded queue between telemetry readings and the heartbeat.
// Invariants (TelemetryQueue): at most one pending sample per kind (latest wins: a newer sample
// replaces the pending one, counted as coalesced), at most `capacity` pending in all (beyond it the
// oldest pending is dropped), at most `maxInFlight` samples taken by heartbeats and not yet seen back
// on the bus (beyond it, or after `confirmTimeoutMs`, they count as dropped). A heartbeat carries the
// last taken value of every kind, so a drop never empties a heartbeat; it only means a newer reading
// did not make it out. Every counter is monotonic; GET /v1/diagnostics/telemetry shows them.
import type { HealthEntry, Link, Telemetry, TelemetryDiagnostics } from "@ic/protocol";

/** What a heartbeat carries from the telemetry path, one sample kind each. */
export interface TelemetrySamples {
  readonly readings: Telemetry;
  readonly health: HealthEntry[];
  readonly links: Link[];
}
export type TelemetryKind = keyof TelemetrySamples;
export const TELEMETRY_KINDS: readonly TelemetryKind[] = ["readings", "health", "links"];

export interface TelemetryQueueOptions {
  readonly now: () => number;
  /** Pending samples at most (one per kind); default: one slot per kind. */
  readonly capacity: number;
  /** Samples taken by heartbeats and not yet seen back on the bus, at most. */
  readonly maxInFlight: number;
  /** A taken sample whose heartbeat is not seen back within this long counts as dropped. */
  readonly confirmTimeoutMs: number;
  /** Latency samples the percentiles are taken over (the most recent ones). */
  readonly window: number;
}

/** Clock skew allowed between a heartbeat's `sent_at` and the moment it took its samples. */
const CONFIRM_SLACK_MS = 10;

interface Pending {
  readonly kind: TelemetryKind;
  readonly sampledAt: number;
  readonly admittedAt: number;
}
interface Taken extends Pending {
  readonly takenAt: number;
}
interface KindCounters {
  offered: number;
  admitted: number;
  rejected: number;
  coalesced: number;
  dropped: number;
  published: number;
  lastAdmittedAt: number | null;
  lastPublishedAt: number | null;
}

/** The most recent `size` values and the largest ever; percentiles by nearest rank. */
class LatencyWindow {
  private readonly values: number[] = [];
  private next = 0;
  private maxEver: number | null = null;

  constructor(private readonly size: number) {}

  add(ms: number): void {
    const v = Math.max(0, ms);
    if (this.values.length < this.size) this.values.push(v);
    else this.values[this.next] = v;
    this.next = (this.next + 1) % this.size;
    this.maxEver = this.maxEver === null ? v : Math.max(this.maxEver, v);
  }

  summary(): TelemetryDiagnostics["publish"]["latency"] {
    const sorted = [...this.values].sort((a, b) => a - b);
    const rank = (p: number) =>
      sorted.length === 0
        ? null
        : sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
    return {
      count: sorted.length,
      p50_ms: rank(0.5),
      p99_ms: rank(0.99),
      max_ms: sorted.length === 0 ? null : sorted[sorted.length - 1]!,
      max_ever_ms: this.maxEver,
    };
  }
}

/**
 * The telemetry path's bounded queue: samples are offered, admitted (latest wins per kind), taken
 * by a heartbeat, and published once that heartbeat is seen back on the bus. Pure bookkeeping over
 * an injected clock; the collector and the node wiring drive it.
 */
export class TelemetryQueue {
  private readonly o: TelemetryQueueOptions;
  private readonly pending = new Map<TelemetryKind, { meta: Pending; value: unknown }>();
  private readonly inFlight: Taken[] = [];
  /** The value of each kind the last heartbeat took (what heartbeats carry until a newer one). */
  private readonly current = new Map<TelemetryKind, unknown>();
  private readonly lastSampledAt = new Map<TelemetryKind, number>();
  private readonly kinds = new Map<TelemetryKind, KindCounters>();
  private readonly wait: LatencyWindow;
  private readonly latency: LatencyWindow;
  private stopped = false;
  private maxDepth = 0;
  private heartbeats = 0;
  private confirmedHeartbeats = 0;
  private lastPublishedAt: number | null = null;
  private readonly rejectedBy = { stale: 0, stopped: 0 };
  private readonly droppedBy = { overflow: 0, unconfirmed: 0, stopped: 0 };

  constructor(o: Partial<TelemetryQueueOptions> = {}) {
    this.o = {
      now: o.now ?? Date.now,
      capacity: o.capacity ?? TELEMETRY_KINDS.length,
      maxInFlight: o.maxInFlight ?? 4 * TELEMETRY_KINDS.length,
      confirmTimeoutMs: o.confirmTimeoutMs ?? 10_000,
      window: o.window ?? 512,
    };
    this.wait = new LatencyWindow(this.o.window);
    this.latency = new LatencyWindow(this.o.window);
  }

  private counters(kind: TelemetryKind): KindCounters {
    let k = this.kinds.get(kind);
    if (!k) {
      k = {
        offered: 0,
        admitted: 0,
        rejected: 0,
        coalesced: 0,
        dropped: 0,
        published: 0,
        lastAdmittedAt: null,
        lastPublishedAt: null,
      };
      this.kinds.set(kind, k);
    }
    return k;
  }

  /** Offers a sample taken at `sampledAt` (default now); false when it was not admitted. */
  offer<K extends TelemetryKind>(kind: K, value: TelemetrySamples[K], sampledAt?: number): boolean {
    const now = this.o.now();
    const at = sampledAt ?? now;
    const k = this.counters(kind);
    k.offered++;
    if (this.stopped) {
      k.rejected++;
      this.rejectedBy.stopped++;
      return false;
    }
    const newest = this.lastSampledAt.get(kind);
    if (newest !== undefined && at < newest) {
      k.rejected++;
      this.rejectedBy.stale++;
      return false;
    }
    this.lastSampledAt.set(kind, at);
    const prev = this.pending.get(kind);
    if (prev) {
      k.coalesced++;
      this.pending.delete(kind);
    } else if (this.pending.size >= this.o.capacity) {
      const [oldestKind, oldest] = [...this.pending.entries()].reduce((a, b) =>
        b[1].meta.admittedAt < a[1].meta.admittedAt ? b : a,
      );
      this.pending.delete(oldestKind);
      this.counters(oldest.meta.kind).dropped++;
      this.droppedBy.overflow++;
    }
    this.pending.set(kind, { meta: { kind, sampledAt: at, admittedAt: now }, value });
    k.admitted++;
    k.lastAdmittedAt = now;
    this.maxDepth = Math.max(this.maxDepth, this.pending.size);
    return true;
  }

  /**
   * A heartbeat takes every pending sample: the values it carries (the newest taken one of each
   * kind). The samples stay in flight until `confirm` sees that heartbeat back on the bus.
   */
  take(): Partial<TelemetrySamples> {
    const now = this.o.now();
    this.expire(now);
    if (this.pending.size > 0) {
      this.heartbeats++;
      for (const [kind, p] of this.pending) {
        this.current.set(kind, p.value);
        this.wait.add(now - p.meta.admittedAt);
        this.inFlight.push({ ...p.meta, takenAt: now });
      }
      this.pending.clear();
      while (this.inFlight.length > this.o.maxInFlight) this.dropInFlight(this.inFlight.shift()!);
    }
    return Object.fromEntries(this.current) as Partial<TelemetrySamples>;
  }

  /** This node's heartbeat sent at `sentAt` came back over the bus: what it took is published. */
  confirm(sentAt: number): void {
    const now = this.o.now();
    this.confirmedHeartbeats++;
    let i = 0;
    while (i < this.inFlight.length) {
      const t = this.inFlight[i]!;
      if (t.takenAt > sentAt + CONFIRM_SLACK_MS) {
        i++;
        continue;
      }
      this.inFlight.splice(i, 1);
      const k = this.counters(t.kind);
      k.published++;
      k.lastPublishedAt = now;
      this.lastPublishedAt = now;
      this.latency.add(now - t.admittedAt);
    }
    this.expire(now);
  }

  private expire(now: number): void {
    while (this.inFlight.length > 0 && now - this.inFlight[0]!.takenAt > this.o.confirmTimeoutMs)
      this.dropInFlight(this.inFlight.shift()!);
  }

  private dropInFlight(t: Taken): void {
    this.counters(t.kind).dropped++;
    this.droppedBy.unconfirmed++;
  }

  /** Later offers are refused; what is pending or in flight counts as dropped. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const p of this.pending.values()) this.counters(p.meta.kind).dropped++;
    for (const t of this.inFlight) this.counters(t.kind).dropped++;
    this.droppedBy.stopped += this.pending.size + this.inFlight.length;
    this.pending.clear();
    this.inFlight.length = 0;
  }

  snapshot(): Omit<TelemetryDiagnostics, "node" | "peer_key" | "heartbeat_ms" | "readings"> {
    const now = this.o.now();
    this.expire(now);
    const sum = (f: (k: KindCounters) => number) =>
      [...this.kinds.values()].reduce((s, k) => s + f(k), 0);
    const oldest = Math.min(...[...this.pending.values()].map((p) => p.meta.admittedAt));
    const dropped = this.droppedBy.overflow + this.droppedBy.unconfirmed + this.droppedBy.stopped;
    return {
      generated_at: now,
      admission: {
        offered: sum((k) => k.offered),
        admitted: sum((k) => k.admitted),
        rejected: { ...this.rejectedBy },
      },
      coalescing: { coalesced: sum((k) => k.coalesced) },
      drops: { total: dropped, ...this.droppedBy },
      queue: {
        capacity: this.o.capacity,
        depth: this.pending.size,
        max_depth: this.maxDepth,
        in_flight: this.inFlight.length,
        max_in_flight: this.o.maxInFlight,
        oldest_pending_age_ms: this.pending.size > 0 ? now - oldest : null,
      },
      publish: {
        published: sum((k) => k.published),
        heartbeats: this.heartbeats,
        confirmed_heartbeats: this.confirmedHeartbeats,
        last_published_at: this.lastPublishedAt,
        queue_wait: this.wait.summary(),
        latency: this.latency.summary(),
      },
      kinds: Object.fromEntries(
        TELEMETRY_KINDS.map((kind) => {
          const k = this.counters(kind);
          return [
            kind,
            {
              offered: k.offered,
              admitted: k.admitted,
              rejected: k.rejected,
              coalesced: k.coalesced,
              dropped: k.dropped,
              published: k.published,
              pending: this.pending.has(kind),
              last_admitted_at: k.lastAdmittedAt,
              last_published_at: k.lastPublishedAt,
            },
          ];
        }),
      ),
    };
  }
}
