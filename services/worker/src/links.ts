// Measures which peers this node can reach directly and how fast (HTTP ping to each peer's API).
// Placement builds its link graph from these measurements; balancing prefers near instances.
//
// A link's round trip is the median of its last RTT_WINDOW measurements: one late answer (a busy
// event loop on either side) does not move it, so the heartbeat's links stay unchanged and off the
// wire (services/cluster/src/link-report.ts). A failed ping drops the link and its history at once.
import type { Link } from "@ic/protocol";

export interface LinkTarget {
  readonly peer_key: string;
  readonly api_url: string;
}

/** Measurements per peer that a reported round trip is the median of. */
export const RTT_WINDOW = 5;

/** The last RTT_WINDOW round trips of each peer, and their medians. */
export class RttWindows {
  private readonly samples = new Map<string, number[]>();

  /** One round: `measured` holds every peer that answered; the others are dropped. */
  update(measured: ReadonlyMap<string, number>): Link[] {
    for (const k of this.samples.keys()) if (!measured.has(k)) this.samples.delete(k);
    const out: Link[] = [];
    for (const [peer, rtt] of measured) {
      const w = this.samples.get(peer) ?? [];
      w.push(rtt);
      if (w.length > RTT_WINDOW) w.shift();
      this.samples.set(peer, w);
      out.push({ peer_key: peer, rtt_ms: median(w) });
    }
    return out;
  }
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : Math.round(((s[m - 1]! + s[m]!) / 2) * 100) / 100;
}

export class LinkProber {
  private links: Link[] = [];
  private readonly windows = new RttWindows();

  constructor(private readonly timeoutMs = 1000) {}

  get current(): Link[] {
    return this.links;
  }

  async probe(targets: readonly LinkTarget[]): Promise<void> {
    const results = await Promise.all(
      targets.map(async (t) => {
        const started = performance.now();
        try {
          const r = await fetch(`${t.api_url}/v1/ping`, {
            signal: AbortSignal.timeout(this.timeoutMs),
          });
          await r.arrayBuffer();
          if (!r.ok) return null;
          return [t.peer_key, Math.round((performance.now() - started) * 100) / 100] as const;
        } catch {
          return null;
        }
      }),
    );
    const measured = new Map<string, number>();
    for (const r of results) if (r) measured.set(r[0], r[1]);
    this.links = this.windows.update(measured);
  }
}
