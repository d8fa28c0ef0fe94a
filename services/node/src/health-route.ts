// GET /health: whether this node can take part in the cluster, for compose, systemd and load-balancer
// checks. Public like GET /v1/ping; 200 once the node has started and holds its session's state, else 503 saying why.
import type { Hono } from "hono";
import { ServiceError } from "@ic/protocol";

export const HEALTH_PATH = "/health";

/** Where the node is in its lifecycle. */
export type NodePhase = "starting" | "started" | "draining" | "stopping";

/** What the check needs of the cluster agent. */
export interface HealthAgent {
  /** The replica holds the state of the session this node is in. */
  readonly synced: boolean;
  /**
   * Members of the session this node has not heard a heartbeat from yet (names): it cannot reach
   * their engines (their keys come in heartbeats), so it is not ready to serve until none is left.
   */
  unheardMembers?(): string[];
  readonly sessionId: string | null;
  readonly isMaster: boolean;
}

export interface HealthOptions {
  readonly agent: HealthAgent;
  /** The node's name (config `node.name`). */
  readonly name: string;
  readonly phase: () => NodePhase;
}

/** The 200 body. */
export interface Healthy {
  readonly ok: true;
  readonly node: string;
  readonly session_id: string;
  readonly is_master: boolean;
}

/** Why a node is not healthy (the 503's `details.reason`). */
export type Unhealthy = "starting" | "draining" | "stopping" | "no_session" | "syncing";

/** Pure: the answer for a phase and the agent's view. */
export function healthOf(
  phase: NodePhase,
  agent: HealthAgent,
  name: string,
): { healthy: Healthy } | { reason: Unhealthy; message: string } {
  if (phase === "starting") return { reason: "starting", message: `node ${name} is starting` };
  if (phase === "stopping") return { reason: "stopping", message: `node ${name} is stopping` };
  if (phase === "draining")
    return {
      reason: "draining",
      message: `node ${name} is draining: it takes no new requests and stops once those in flight end`,
    };
  if (agent.sessionId === null)
    return {
      reason: "no_session",
      message: `node ${name} is not in a session yet (waiting for the election)`,
    };
  if (!agent.synced)
    return {
      reason: "syncing",
      message: `node ${name} is joining session ${agent.sessionId} (its state is not synced yet)`,
    };
  const unheard = agent.unheardMembers?.() ?? [];
  if (unheard.length > 0)
    return {
      reason: "syncing",
      message: `node ${name} is joining session ${agent.sessionId} (not heard from ${unheard.join(", ")} yet)`,
    };
  return {
    healthy: { ok: true, node: name, session_id: agent.sessionId, is_master: agent.isMaster },
  };
}

export function healthRoutes(app: Hono, o: HealthOptions): void {
  app.get(HEALTH_PATH, (c) => {
    const h = healthOf(o.phase(), o.agent, o.name);
    if ("healthy" in h) return c.json(h.healthy);
    throw new ServiceError("unavailable", h.message, {
      details: { reason: h.reason },
      ...(h.reason === "stopping" || h.reason === "draining" ? {} : { retryAfterS: 1 }),
    });
  });
}
