// Draining a node before it stops (SIGTERM, POST /admin/drain): it tells the cluster in its
// heartbeat (gateways then send new requests to other ready instances, and here only while a model
// has none elsewhere: make before break), waits until its deployments are ready elsewhere and the
// requests in flight on its engines have ended, bounded by node.drain_timeout_ms, and only then
// stops. A deliberate second SIGTERM cuts the wait short.
import type { ClusterAgent } from "@ic/cluster";
import type { Logger } from "@ic/log";

export interface DrainOptions {
  /** Requests the engines of this node's instances still hold (processing or queued). */
  readonly busy: () => Promise<number>;
  /** Whether any instance has a rank on this node (nothing to wait for otherwise). */
  readonly hasInstances: () => boolean;
  /** Says so to the cluster at once (a heartbeat with `draining`). */
  readonly announce: () => void;
  /** How long gateways get to hear of it before the engines' counts are trusted. */
  readonly settleMs: number;
  /**
   * Once nothing is in flight, before the node stops: what it hands over (warm conversations'
   * caches), given the drain's deadline; a hand-off still running at the deadline is left behind.
   */
  readonly handOff?: (deadline: number) => Promise<unknown>;
  readonly timeoutMs: number;
  readonly pollMs?: number;
  readonly log: Logger;
}

export interface DrainResult {
  readonly waitedMs: number;
  /** Requests still in flight when it stopped waiting (0 unless it timed out or was cut short). */
  readonly left: number;
  readonly outcome: "idle" | "timeout" | "cut_short" | "nothing_to_drain";
}

export class Drain {
  private cut: (() => void) | undefined;
  private cutShort = false;
  private result: Promise<DrainResult> | undefined;

  constructor(private readonly o: DrainOptions) {}

  /** Starts draining (once); resolves when the node may stop. */
  run(): Promise<DrainResult> {
    this.result ??= this.drain();
    return this.result;
  }

  /** Stops waiting now (a second SIGTERM). */
  cancel(): void {
    this.cutShort = true;
    this.cut?.();
  }

  /** The hand-off, within the deadline (a second SIGTERM cuts it short too); it never throws. */
  private async handOff(deadline: number): Promise<void> {
    const f = this.o.handOff;
    if (!f) return;
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, deadline - Date.now()));
      this.cut = () => resolve();
    });
    try {
      await Promise.race([
        f(deadline).catch((e: unknown) =>
          this.o.log.warn({ err: (e as Error).message }, "draining: the hand-off failed"),
        ),
        bound,
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async drain(): Promise<DrainResult> {
    const started = Date.now();
    const o = this.o;
    o.announce();
    if (!o.hasInstances()) return { waitedMs: 0, left: 0, outcome: "nothing_to_drain" };
    const deadline = started + o.timeoutMs;
    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(0, Math.min(ms, deadline - Date.now())));
        this.cut = () => {
          clearTimeout(t);
          resolve();
        };
      });
    await sleep(o.settleMs);
    let left = 0;
    for (;;) {
      if (this.cutShort) return { waitedMs: Date.now() - started, left, outcome: "cut_short" };
      left = await o.busy();
      if (left === 0) {
        await this.handOff(deadline);
        return { waitedMs: Date.now() - started, left, outcome: "idle" };
      }
      if (Date.now() >= deadline)
        return { waitedMs: Date.now() - started, left, outcome: "timeout" };
      o.log.info({ in_flight: left }, "draining: waiting for requests in flight to end");
      await sleep(o.pollMs ?? 250);
    }
  }
}

/** Requests an engine holds, from its /metrics text (processing plus deferred); 0 when absent. */
export function engineBusy(metricsText: string): number {
  let n = 0;
  for (const line of metricsText.split("\n")) {
    const m = /^llamacpp:requests_(processing|deferred)(?:\{[^}]*\})? (\S+)/.exec(line);
    if (m) n += Number(m[2]) || 0;
  }
  return n;
}

/** How long a draining node's deployment may still point here before the log says it stays. */
const STAYING_AFTER_MS = 3000;

/** What a node's drain asks of its cluster agent and its gateway. */
export interface NodeDrainSources {
  readonly peerKey: string;
  readonly agent: Pick<ClusterAgent, "snapshot" | "publishHeartbeat">;
  /** Chat requests this node's gateway relays, by instance. */
  readonly relaying: () => Iterable<number>;
  readonly engineHeaders: (instanceId: string) => Record<string, string>;
  readonly timeoutMs: number;
  /** Cache moves this node is the source of, which a target still has to fetch from it. */
  readonly kvPending?: () => number;
  /** Its gateway moves the warm conversations of its instances elsewhere (before it stops). */
  readonly handOff?: (deadline: number) => Promise<unknown>;
  readonly log: Logger;
}

/**
 * The drain of a node: it waits for the requests on the engines of its instances and those its
 * gateway relays, and for the deployments served here when it began to be ready elsewhere (the
 * master places each elsewhere first when a node can take it).
 */
export function nodeDrain(o: NodeDrainSources): Drain {
  const { agent, peerKey } = o;
  const mine = () =>
    Object.values(agent.snapshot().instances).filter((i) =>
      i.assignments.some((a) => a.peer_key === peerKey),
    );
  const relaying = () => {
    let n = 0;
    for (const v of o.relaying()) n += v;
    return n;
  };
  const here = new Set(
    Object.values(agent.snapshot().deployments)
      .filter((d) => mine().some((i) => i.instance_id === d.instance_id))
      .map((d) => d.deployment_id),
  );
  const started = Date.now();
  const staying = new Set<string>();
  const movingElsewhere = () => {
    const s = agent.snapshot();
    // Alone in its session (one node, or the others gone): there is no node to move to.
    const alone = Object.values(s.members).every((m) => m.peer_key === peerKey);
    let n = 0;
    for (const id of here) {
      const d = s.deployments[id];
      const inst = s.instances[d?.instance_id ?? ""];
      if (d && inst?.assignments.some((a) => a.peer_key === peerKey)) {
        // Not placed elsewhere yet: the master gets STAYING_AFTER_MS to do it (waited for, as a
        // move); still pointing here after that, nothing can take it.
        if (!alone && Date.now() - started < STAYING_AFTER_MS) {
          n++;
          continue;
        }
        if (!staying.has(id)) {
          staying.add(id);
          o.log.warn(
            { deploymentId: id, modelId: d.model_id },
            "no other node can take this deployment now: this node serves it until its drain ends",
          );
        }
        continue;
      }
      if (inst && s.runners[`${inst.instance_id}/0`]?.state !== "RunnerReady") n++;
    }
    return n;
  };
  const engineRequests = async (instanceId: string): Promise<number> => {
    const endpoint = agent.snapshot().runners[`${instanceId}/0`]?.endpoint;
    if (!endpoint?.startsWith("http")) return 0;
    try {
      const res = await fetch(`${endpoint}/metrics`, {
        headers: o.engineHeaders(instanceId),
        signal: AbortSignal.timeout(2000),
      });
      return res.ok ? engineBusy(await res.text()) : 0;
    } catch {
      return 0; // the engine is gone: nothing of it to wait for
    }
  };
  // Gateways hear that a replacement is ready a moment after this node does; until then they may
  // still send a request here (make before break), so its engine's idle reading is trusted only a
  // settle period after the last deployment became ready elsewhere.
  const settleMs = 500;
  let movedAt: number | undefined;
  // An engine whose stream a gateway has just stopped to move it elsewhere reads idle a moment
  // before the gateway asks this node to save its slot: idle counts once it has lasted settleMs.
  let busyAt = 0;
  return new Drain({
    announce: () => agent.publishHeartbeat(),
    hasInstances: () => mine().length > 0 || relaying() > 0,
    busy: async () => {
      const moving = movingElsewhere();
      if (moving > 0) movedAt = undefined;
      else if (here.size > 0) movedAt ??= Date.now();
      const settling = movedAt !== undefined && Date.now() - movedAt < settleMs ? 1 : 0;
      const counts = await Promise.all(mine().map((i) => engineRequests(i.instance_id)));
      const working = counts.reduce((a, b) => a + b, 0) + relaying() + (o.kvPending?.() ?? 0);
      if (working > 0) busyAt = Date.now();
      const quieting = working === 0 && busyAt > 0 && Date.now() - busyAt < settleMs ? 1 : 0;
      return working + moving + settling + quieting;
    },
    settleMs,
    timeoutMs: o.timeoutMs,
    ...(o.handOff ? { handOff: o.handOff } : {}),
    log: o.log,
  });
}
