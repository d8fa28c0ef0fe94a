// Measures which peers this node can reach directly and how fast (HTTP ping to each peer's API).
// Placement builds its link graph from these measurements.
import type { Link } from "@ic/protocol";

export interface LinkTarget {
  readonly peer_key: string;
  readonly api_url: string;
}

export class LinkProber {
  private links = new Map<string, Link>();

  constructor(private readonly timeoutMs = 1000) {}

  get current(): Link[] {
    return [...this.links.values()];
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
          return {
            peer_key: t.peer_key,
            rtt_ms: Math.round((performance.now() - started) * 100) / 100,
          };
        } catch {
          return null;
        }
      }),
    );
    const next = new Map<string, Link>();
    for (const l of results) if (l) next.set(l.peer_key, l);
    this.links = next;
  }
}
