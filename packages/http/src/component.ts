// A component is one service's part of a node: built from its own config section, started in the
// node's list order and stopped in reverse, with the HTTP routes it serves (their OpenAPI entries sit
// in the service's operations table beside them) and what it adds to the node's heartbeat.
import type { Hono } from "hono";
import type { Registry } from "prom-client";
import type { HealthEntry, HeartbeatMessage } from "@ic/protocol";
import type { Logger } from "@ic/log";

/** The heartbeat fields a component may fill (the cluster agent fills the rest). */
export type HeartbeatPart = Partial<
  Pick<
    HeartbeatMessage,
    | "telemetry"
    | "links"
    | "runners"
    | "loop_delay"
    | "pulls"
    | "outstanding"
    | "draining"
    | "engine_key"
    | "secret_proof"
  >
>;

export interface Component {
  readonly name: string;
  start?(): Promise<void> | void;
  stop?(): Promise<void> | void;
  /** Its routes on the node's API: an app of their own, which the node app mounts (node-app.ts). */
  routes?(): Hono;
  /**
   * Declares its own metrics in the node's registry (GET /metrics), once, after the node's
   * components started; a gauge reads its value when scraped (`collect`).
   */
  metrics?(registry: Registry): void;
  /**
   * Its fields of this node's heartbeat, and its entries in the node's health list (sent in each
   * heartbeat, shown by `doctor`). Called once per heartbeat.
   */
  heartbeat?(): HeartbeatPart & { readonly health?: readonly HealthEntry[] };
}

/**
 * The components of one node, in start order. `start` starts one and keeps it; `stop` stops those
 * started, last first, each once (a failure is logged and the next one still stops).
 */
export class ComponentStack {
  private readonly started: Component[] = [];
  private stopping: Promise<void> | undefined;

  constructor(private readonly log: Logger) {}

  async start<C extends Component>(c: C): Promise<C> {
    if (this.stopping) throw new Error(`${c.name}: not started, the node is stopping`);
    await c.start?.();
    this.started.push(c);
    return c;
  }

  /** The heartbeat fields of every component (a later one wins a field two fill). */
  heartbeat(): HeartbeatPart & { health: HealthEntry[] } {
    const part: HeartbeatPart = {};
    const health: HealthEntry[] = [];
    for (const c of this.started) {
      const { health: h, ...fields } = c.heartbeat?.() ?? {};
      Object.assign(part, fields);
      if (h) health.push(...h);
    }
    return { ...part, health };
  }

  /** Each started component's metrics, declared in `registry`. */
  declareMetrics(registry: Registry): void {
    for (const c of this.started) c.metrics?.(registry);
  }

  async stop(): Promise<void> {
    this.stopping ??= (async () => {
      for (const c of [...this.started].reverse()) {
        try {
          await c.stop?.();
        } catch (e) {
          this.log.warn({ err: e, component: c.name }, "stop failed");
        }
      }
    })();
    await this.stopping;
  }
}
