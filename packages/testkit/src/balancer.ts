// A load balancer for tests and benchmarks, as operators put one in front of the nodes (compose,
// nginx, HAProxy): it sends to the nodes whose GET /health answered 200 at its last check (every
// `checkMs`), round robin, and sends a request to another node only when its connection was
// refused (nothing was sent: what nginx's proxy_next_upstream does for a POST). Everything else,
// an error status or a broken stream included, reaches the client as it is. It keeps a connection
// pool of its own, as a balancer does: a node's drain waits for that pool's idle keep-alive
// connections (the case http-quiesce.ts is for), whatever the test process does with its own.
import { fetch as poolFetch } from "undici";
import type { NodeProcess } from "@ic/launcher";
import { clientPool } from "@ic/tls";

export class HealthCheckedBalancer {
  private healthy = new Set<NodeProcess>();
  private turn = 0;
  private stopped = false;
  private readonly loop: Promise<void>;
  /** Requests sent again to another node because a connection was refused. */
  refused = 0;
  /** The balancer's own keep-alive pool, trusting the cluster CA as this process does. */
  private readonly pool = clientPool();

  constructor(
    private readonly nodes: readonly NodeProcess[],
    checkMs = 100,
  ) {
    this.loop = (async () => {
      while (!this.stopped) {
        const up = await Promise.all(nodes.map((n) => this.check(n)));
        this.healthy = new Set(nodes.filter((_, i) => up[i]));
        await new Promise((r) => setTimeout(r, checkMs));
      }
    })();
  }

  private async check(n: NodeProcess): Promise<boolean> {
    try {
      const r = await poolFetch(`${n.apiUrl}/health`, {
        signal: AbortSignal.timeout(1000),
        dispatcher: this.pool,
      });
      await r.arrayBuffer();
      return r.status === 200;
    } catch {
      return false;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    await this.pool.close();
  }

  /**
   * POST `path` with a JSON body through a healthy node (the node's own token); `sent` hears which
   * node got it (last: the one that answered or failed).
   */
  async post(
    path: string,
    body: unknown,
    headers: Record<string, string> = {},
    sent?: (node: NodeProcess) => void,
  ): Promise<Response> {
    for (let tries = 0; ; tries++) {
      const healthy = this.nodes.filter((n) => this.healthy.has(n));
      const node = healthy[this.turn++ % Math.max(1, healthy.length)] ?? this.nodes[0]!;
      sent?.(node);
      try {
        // undici's Response is the one global fetch returns (Node bundles undici).
        return (await poolFetch(`${node.apiUrl}${path}`, {
          method: "POST",
          headers: { ...node.authHeaders, "content-type": "application/json", ...headers },
          body: JSON.stringify(body),
          dispatcher: this.pool,
        })) as unknown as Response;
      } catch (e) {
        const code = (e as { cause?: { code?: string } }).cause?.code;
        if (code !== "ECONNREFUSED" || tries >= 5) throw e;
        this.refused++;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }
}
