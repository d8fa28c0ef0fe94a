// bench/scale's bus: a few real nats-servers (NatsServer of @ic/bus) clustered by routes, every one
// seeded with every other's route, and their message counters from the monitoring endpoint.
import { silentLogger } from "@ic/log";
import { NatsServer } from "@ic/bus";
import type { Credentials } from "@ic/bus";
import { freePorts } from "@ic/testkit";

export interface Counters {
  /** Messages and bytes clients published into the bus (each message once, where it entered). */
  readonly published: number;
  readonly publishedBytes: number;
  /** Messages and bytes the servers handed to clients (a message counts once per subscriber). */
  readonly delivered: number;
  readonly deliveredBytes: number;
  /** Messages the servers forwarded to each other over routes. */
  readonly routed: number;
  /** Times a server found a client too slow to take what it was sent (it then drops it). */
  readonly slowConsumers: number;
}

interface Varz {
  slow_consumers: number;
  in_msgs: number;
  out_msgs: number;
  in_bytes: number;
  out_bytes: number;
}
interface Routez {
  routes: { in_msgs: number; out_msgs: number; in_bytes: number; out_bytes: number }[] | null;
}

export class BenchBus implements AsyncDisposable {
  private constructor(readonly servers: readonly NatsServer[]) {}

  static async start(
    count: number,
    auth: { client: Credentials; route: Credentials },
  ): Promise<BenchBus> {
    const ports = await freePorts(count);
    const servers = ports.map(
      (port, i) =>
        new NatsServer({
          bind: "127.0.0.1",
          host: "127.0.0.1",
          clientBind: "127.0.0.1",
          clientPort: 0,
          clusterPort: port,
          clusterName: "bench-scale",
          routes: ports.filter((_, j) => j !== i).map((p) => `127.0.0.1:${p}`),
          clientAuth: auth.client,
          routeAuth: auth.route,
          log: silentLogger(),
          monitor: true,
        }),
    );
    const bus = new BenchBus(servers);
    try {
      await Promise.all(servers.map((s) => s.start()));
      if (count > 1) await bus.waitForRoutes(count - 1, 10_000);
    } catch (e) {
      await bus.stop();
      throw e;
    }
    return bus;
  }

  get pids(): number[] {
    return this.servers.map((s) => s.status.pid).filter((p): p is number => p !== undefined);
  }

  private async get<T>(s: NatsServer, path: string): Promise<T> {
    const r = await fetch(`${s.monitorUrl!}${path}`);
    return (await r.json()) as T;
  }

  /** Until every server has a route to every other one. */
  private async waitForRoutes(n: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const counts = await Promise.all(
        this.servers.map(async (s) => (await this.get<Routez>(s, "/routez")).routes?.length ?? 0),
      );
      if (counts.every((c) => c >= n)) return;
      if (Date.now() > deadline) throw new Error(`routes not up: ${counts.join(", ")}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Totals over every server: client traffic is the server's counters less its routes'. */
  async counters(): Promise<Counters> {
    let published = 0;
    let publishedBytes = 0;
    let delivered = 0;
    let deliveredBytes = 0;
    let routed = 0;
    let slowConsumers = 0;
    for (const s of this.servers) {
      const [v, r] = await Promise.all([
        this.get<Varz>(s, "/varz"),
        this.get<Routez>(s, "/routez"),
      ]);
      let rin = 0;
      let rinB = 0;
      let rout = 0;
      let routB = 0;
      for (const x of r.routes ?? []) {
        rin += x.in_msgs;
        rinB += x.in_bytes;
        rout += x.out_msgs;
        routB += x.out_bytes;
      }
      published += v.in_msgs - rin;
      publishedBytes += v.in_bytes - rinB;
      delivered += v.out_msgs - rout;
      deliveredBytes += v.out_bytes - routB;
      routed += rout;
      slowConsumers += v.slow_consumers;
    }
    return { published, publishedBytes, delivered, deliveredBytes, routed, slowConsumers };
  }

  async stop(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

export function rate(a: Counters, b: Counters, seconds: number): Counters {
  return {
    published: (b.published - a.published) / seconds,
    publishedBytes: (b.publishedBytes - a.publishedBytes) / seconds,
    delivered: (b.delivered - a.delivered) / seconds,
    deliveredBytes: (b.deliveredBytes - a.deliveredBytes) / seconds,
    routed: (b.routed - a.routed) / seconds,
    slowConsumers: b.slowConsumers - a.slowConsumers,
  };
}
