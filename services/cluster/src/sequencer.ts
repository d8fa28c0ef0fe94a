// The master role's sequencing, on the elected node only: commands decided by the pure rules
// (@ic/state's decide) and their events emitted in order, the open chat tasks and the token windows
// (never replicated: a new master starts with none), and every tick the members' joins and departures
// and the re-placement of lost deployments with back-off (deployment-retry.ts).
import type { Logger } from "@ic/log";
import { nodeCapacities } from "@ic/placement";
import type { MemoryModel } from "@ic/placement";
import { toWireError } from "@ic/protocol";
import type {
  Clock,
  Command,
  CommandReply,
  ControlEvent,
  Deployment,
  Heartbeat,
  InstanceId,
  Member,
  NodeId,
  SessionId,
  TaskId,
} from "@ic/protocol";
import {
  checkTokenLimits,
  decide,
  DEFAULT_TASK_BOUNDS,
  evacuatingDeployments,
  failingInstances,
  idleUnloads,
  instanceUse,
  InstanceUsage,
  lostDeployments,
  scaleSets,
  scaleStep,
  DEFAULT_SCALE_WINDOWS,
  nodeIdFor,
  reconcile,
  TaskTable,
  TokenWindows,
} from "@ic/state";
import type { IdKind, ScaleMemo, ScaleWindows, TaskBounds } from "@ic/state";
import { afterAttempt, capacityView, retryDue } from "./deployment-retry.ts";
import type { RetryEntry } from "./deployment-retry.ts";
import { IntentKeeper } from "./intent-keeper.ts";
import { heardAt } from "./membership.ts";
import type { PeerView } from "./membership.ts";
import type { Replica } from "./replica.ts";
import type { AgentStream } from "./stream.ts";

/** The peers the sequencer decides with: who is live, and how each was last heard. */
export interface SequencerPeers {
  live(): PeerView[];
  get(peerKey: string): PeerView | undefined;
}

export interface SequencerOptions {
  /** The state it decides against (the master's own replica). */
  readonly replica: Pick<Replica, "state">;
  /** Sequences an event: indexed, applied to the replica, recorded and sent (master-role.ts). */
  readonly publish: (event: ControlEvent) => void;
  readonly peers: SequencerPeers;
  /** A failed task leaves the table when its event is applied. */
  readonly stream: Pick<AgentStream, "subscribe">;
  readonly selfKey: string;
  readonly livenessTimeoutMs: number;
  readonly clock: Pick<Clock, "now">;
  readonly log: Logger;
  readonly newId: (kind: IdKind) => string;
  readonly taskBounds?: Partial<TaskBounds> | undefined;
  readonly memory?: Partial<MemoryModel> | undefined;
  /** The intent store (absent: intent lives only in the replicas). */
  readonly intents?: IntentKeeper | undefined;
  /** How long load must stay high (low) before a set that follows load grows (shrinks). */
  readonly scaleWindows?: Partial<ScaleWindows> | undefined;
}

export class Sequencer {
  /** The open chat tasks (never replicated: a new master starts with none). */
  private readonly tasks: TaskTable;
  /** Each limited token's last minute of requests and tokens (a new master starts empty). */
  private readonly tokenWindows = new TokenWindows();
  /** Per lost deployment: when it was last attempted, the backoff, and the view it was tried on. */
  private readonly retries = new Map<string, RetryEntry>();
  /** Per instance: last use and requests served (what idle unloads and room for loads read). */
  private readonly usage = new InstanceUsage();
  /** Instances whose idle unload is on its way (its intent write may take a while). */
  private readonly unloading = new Set<string>();
  /** Per replica set that follows load: what the rule saw before (its windows). */
  private readonly scaleMemos = new Map<string, ScaleMemo>();
  /** Replica sets whose scaling step is on its way. */
  private readonly scaling = new Set<string>();
  readonly intents: IntentKeeper | undefined;

  constructor(private readonly o: SequencerOptions) {
    this.tasks = new TaskTable({ ...DEFAULT_TASK_BOUNDS, ...o.taskBounds });
    this.intents = o.intents;
    o.stream.subscribe("applied", ({ ev }) => {
      if (ev.event.type !== "TaskFailed") return;
      const t = this.tasks.end(ev.event.task_id);
      if (t) this.usage.ended(t.instance_id, o.clock.now());
    });
  }

  /** Chat tasks open now. */
  get openTasks(): number {
    return this.tasks.size;
  }

  /** A master stint ends or begins: its tasks and token windows go. */
  clear(): void {
    this.tasks.clear();
    this.tokenWindows.clear();
    this.usage.clear();
    this.unloading.clear();
    this.scaleMemos.clear();
    this.scaling.clear();
  }

  /** Every tick: joins and departures, lost deployments, expired tasks, the intent store. */
  supervise(now: number, departures: boolean, session: SessionId): void {
    this.superviseMembers(now, departures, session);
    this.reconcileDeployments(now);
    this.unloadIdle(now, session);
    this.followLoad(now, session);
    this.tasks.expire(now);
    this.intents?.supervise(now, session);
  }

  /**
   * The I/O shell around the pure `decide` (packages/state) for a command of this node's session
   * (the agent checked the session and the role): decides against the replica and the live
   * heartbeats, emits the events in order, and answers with the index reached (and the task id of a
   * CreateTask) or the typed refusal. A command that changes intent (a deployment, a model) is
   * written to the intent store first (async); every other command, the chat path's included, is
   * answered synchronously.
   */
  command(sessionId: SessionId, from: NodeId, cmd: Command): CommandReply | Promise<CommandReply> {
    try {
      // The tasks a CreateTask reports finished end first, whatever becomes of the new one: their
      // places count no more when its token's limits are checked, and a refusal loses none.
      if (cmd.type === "CreateTask" && cmd.finished) {
        const now = this.o.clock.now();
        for (const f of cmd.finished) this.endTask(f.task_id, f.tokens, now);
      }
      const d = this.decide(from, cmd, this.o.newId);
      if (!d.ok) return { ok: false, error: toWireError(d.error) };
      if (cmd.type === "LoadModel" && cmd.dry_run)
        return { ok: true, index: this.o.replica.state.index, events: d.events };
      if (this.intents && IntentKeeper.changes(d.events))
        return this.intents.persist(sessionId, from, cmd);
      return this.accept(d);
    } catch (e) {
      return { ok: false, error: toWireError(e) };
    }
  }

  /** The pure decision against this replica, at `now`. */
  decide(from: NodeId, cmd: Command, ids: (kind: IdKind) => string, now = this.o.clock.now()) {
    const live = () => this.o.peers.live().map((p) => p.heartbeat);
    return decide(this.o.replica.state, cmd, {
      from,
      // Read only by the placement re-check: not gathered for the chat path's task commands.
      get reports() {
        return live();
      },
      now,
      newId: ids,
      tasksOf: (id) => this.tasks.onInstances(new Set([id])),
      tokenCheck: (name, limits) =>
        checkTokenLimits(
          name,
          limits,
          { ...this.tokenWindows.totals(name, now), open: this.tasks.openFor(name) },
          (what, limit) => this.tokenWindows.secondsUntilBelow(name, what, limit, now),
        ),
      use: instanceUse(this.usage, (id) => this.tasks.openOn(id)),
      ...(this.o.memory ? { memory: this.o.memory } : {}),
    });
  }

  /**
   * Every tick: instances idle past their deployment's keep_alive are unloaded, each through its
   * own UnloadInstance command (the deployment's deletion is written to the intent store first; the
   * decision is made again then, and refused if a request began on it meanwhile).
   */
  private unloadIdle(now: number, session: SessionId): void {
    const state = this.o.replica.state;
    this.usage.observe(state, now);
    const open = (id: string) => this.tasks.openOn(id);
    for (const u of idleUnloads(state, now, this.usage, open)) {
      if (this.unloading.has(u.instance_id)) continue;
      this.unloading.add(u.instance_id);
      const from = nodeIdFor(session, this.o.selfKey);
      const cmd: Command = { type: "UnloadInstance", instance_id: u.instance_id, reason: u.reason };
      void Promise.resolve(this.command(session, from, cmd))
        .then((r) => {
          if (r.ok) this.o.log.info({ instance: u.instance_id, reason: u.reason }, "unloaded");
          else this.o.log.debug({ instance: u.instance_id, err: r.error }, "unload refused");
        })
        .finally(() => this.unloading.delete(u.instance_id));
    }
  }

  /**
   * Every tick: each replica set with a scale policy grows or shrinks by one when the pure rule
   * (scaling.ts) says so, through a ScaleReplicas command of its own (written to the intent store
   * first; decided again then). The load is what every gateway's last heartbeat says it has in
   * flight (exact when sent; the task table also holds requests whose end report waits up to 250 ms,
   * which at short requests reads as load that is not there).
   */
  private followLoad(now: number, session: SessionId): void {
    const windows = { ...DEFAULT_SCALE_WINDOWS, ...this.o.scaleWindows };
    // The heartbeats' sums are gathered only when a set follows load (most clusters have none).
    let outstanding: Map<string, number> | undefined;
    const inFlight = (id: string): number => {
      if (!outstanding) {
        outstanding = new Map();
        for (const p of this.o.peers.live())
          for (const [k, n] of Object.entries(p.heartbeat.outstanding ?? {}))
            outstanding.set(k, (outstanding.get(k) ?? 0) + n);
      }
      return outstanding.get(id) ?? 0;
    };
    const sets = scaleSets(this.o.replica.state, inFlight);
    const seen = new Set<string>();
    for (const set of sets) {
      seen.add(set.replica_set);
      if (this.scaling.has(set.replica_set)) continue;
      const step = scaleStep(set, this.scaleMemos.get(set.replica_set) ?? {}, now, windows);
      this.scaleMemos.set(set.replica_set, step.memo);
      if (!step.direction) continue;
      this.scaling.add(set.replica_set);
      const cmd: Command = {
        type: "ScaleReplicas",
        replica_set: set.replica_set,
        direction: step.direction,
        reason: step.reason,
      };
      void Promise.resolve(this.command(session, nodeIdFor(session, this.o.selfKey), cmd))
        .then((r) => {
          const at = { replica_set: set.replica_set, direction: step.direction };
          if (r.ok) this.o.log.info({ ...at, reason: step.reason }, "replicas follow load");
          // Refused when its bounds or requests in flight changed meanwhile: the rule looks again.
          else this.o.log.info({ ...at, err: r.error }, "a scaling step was refused");
        })
        .finally(() => this.scaling.delete(set.replica_set));
    }
    for (const k of this.scaleMemos.keys()) if (!seen.has(k)) this.scaleMemos.delete(k);
  }

  /** Applies an accepted decision: the task table, then the events. */
  accept(d: Extract<ReturnType<typeof decide>, { ok: true }>): CommandReply {
    const now = this.o.clock.now();
    if (d.opened) {
      this.tasks.add(d.opened);
      this.usage.began(d.opened.instance_id, now);
      if (d.opened.token !== undefined) this.tokenWindows.request(d.opened.token, now);
    }
    if (d.ended) this.endTask(d.ended, d.usedTokens, now);
    for (const e of d.events) this.o.publish(e);
    return {
      ok: true,
      index: this.o.replica.state.index,
      ...(d.opened ? { task_id: d.opened.task_id } : {}),
    };
  }

  /** A task that ended leaves the table; the tokens it used count against its token's minute. */
  private endTask(id: TaskId, tokens: number | undefined, now: number): void {
    const t = this.tasks.end(id);
    if (t) this.usage.ended(t.instance_id, now);
    if (t?.token !== undefined && tokens) this.tokenWindows.used(t.token, tokens, now);
  }

  private superviseMembers(now: number, departures: boolean, session: SessionId): void {
    const state = this.o.replica.state;
    // Joins: live peers that adopted this session but are not members yet.
    for (const p of this.o.peers.live()) {
      const hb = p.heartbeat;
      if (hb.session_id !== session) continue;
      const id = nodeIdFor(session, hb.peer_key);
      if (!state.members[id])
        this.o.publish({ type: "NodeJoined", member: memberFor(session, hb, now) });
    }
    // Departures: members silent past the liveness timeout. Their in-flight tasks fail first.
    if (!departures) return;
    for (const m of Object.values(this.o.replica.state.members)) {
      if (m.peer_key === this.o.selfKey) continue;
      const p = this.o.peers.get(m.peer_key);
      if (p && now - heardAt(p) <= this.o.livenessTimeoutMs) continue;
      const reason = p?.lostAt !== undefined ? "connection lost" : "heartbeat timeout";
      const lost = new Set(
        Object.values(this.o.replica.state.instances)
          .filter((i) => i.assignments.some((a) => a.node_id === m.node_id))
          .map((i) => i.instance_id),
      );
      for (const t of this.tasks.onInstances(lost)) {
        this.o.publish({
          type: "TaskFailed",
          task_id: t.task_id,
          reason: `node ${m.name} (${m.node_id}) was lost`,
        });
      }
      // What the departed node's gateway held ended with it (its clients were connected there).
      this.tasks.dropGateway(m.node_id);
      this.o.log.warn({ node: m.name, node_id: m.node_id }, `node lost (${reason})`);
      this.o.publish({ type: "NodeLeft", node_id: m.node_id, reason });
    }
  }

  /**
   * An instance whose runner gave up (its model failed to load or run there) is removed, and its
   * deployment placed on a node it has not failed on (reconcile), or given up.
   */
  private removeFailing(now: number): void {
    for (const f of failingInstances(this.o.replica.state, now)) {
      this.o.log.warn(
        {
          deployment: f.deployment_id,
          instance: f.instance_id,
          node: f.failure.node_name,
          error: f.failure.error,
        },
        "deployment failing: its instance failed to run; trying another node",
      );
      this.o.publish({
        type: "DeploymentFailing",
        deployment_id: f.deployment_id,
        failure: f.failure,
      });
      for (const t of this.tasks.onInstances(new Set([f.instance_id])))
        this.o.publish({
          type: "TaskFailed",
          task_id: t.task_id,
          reason: `the instance failed to run: ${f.failure.error}`,
        });
      this.o.publish({
        type: "InstanceDeleted",
        instance_id: f.instance_id,
        reason: `failed to run on ${f.failure.node_name}: ${f.failure.error}`,
      });
    }
  }

  /**
   * Master only, every tick: deployments whose instance is gone are placed again (pure reconcile) or
   * kept Pending with their refusal. A refused one is retried with backoff (1 s doubling to 30 s),
   * and sooner (after 1 s) when membership, health or memory changed since its last attempt.
   */
  private reconcileDeployments(now: number): void {
    this.removeFailing(now);
    const state = this.o.replica.state;
    const reports = this.o.peers.live().map((p) => p.heartbeat);
    // Lost deployments, and those on a draining node (placed elsewhere before it leaves).
    const lost = [...lostDeployments(state), ...evacuatingDeployments(state, reports)];
    if (lost.length === 0) {
      this.retries.clear();
      return;
    }
    const view = capacityView(nodeCapacities(state, reports));
    const due = (d: Deployment): boolean => retryDue(this.retries.get(d.deployment_id), now, view);
    const actions = reconcile(state, reports, {
      now,
      newInstanceId: () => this.o.newId("instance") as InstanceId,
      due,
      ...(this.o.memory ? { memory: this.o.memory } : {}),
    });
    for (const d of lost) {
      if (!due(d)) continue;
      this.retries.set(d.deployment_id, afterAttempt(this.retries.get(d.deployment_id), now, view));
    }
    for (const a of actions) {
      if (a.kind === "fail") {
        this.o.log.error({ deployment: a.deployment_id, reason: a.reason }, "deployment failed");
        this.retries.delete(a.deployment_id);
        this.o.publish({
          type: "DeploymentFailed",
          deployment_id: a.deployment_id,
          reason: a.reason,
        });
      } else if (a.kind === "place") {
        this.o.log.info(
          { deployment: a.deployment_id, instance: a.instance.instance_id, reason: a.reason },
          "deployment placed again",
        );
        this.retries.delete(a.deployment_id);
        this.o.publish({
          type: "InstancePlaced",
          instance: a.instance,
          deployment_id: a.deployment_id,
          reason: a.reason,
        });
      } else {
        this.o.log.warn(
          { deployment: a.deployment_id, code: a.refusal.code, message: a.refusal.message },
          "deployment pending",
        );
        this.o.publish({
          type: "DeploymentPending",
          deployment_id: a.deployment_id,
          refusal: a.refusal,
          reason: a.reason,
        });
      }
    }
  }
}

/** The member a heartbeat makes in a session, joining at `now`. */
export function memberFor(sessionId: string, hb: Heartbeat, now: number): Member {
  return {
    node_id: nodeIdFor(sessionId, hb.peer_key),
    peer_key: hb.peer_key,
    name: hb.name,
    api_url: hb.api_url,
    host: hb.host,
    started_at: hb.started_at,
    joined_at: now,
  };
}
