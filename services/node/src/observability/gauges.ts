// The gauges and counters /metrics reads at each scrape (prom-client collects them from the
// sources): this node's identity, bus and process guard, and the cluster's view (registered on the
// master's registry only).
import { Counter, Gauge } from "prom-client";
import type { Registry } from "prom-client";
import { RUNNER_STATES } from "@ic/protocol";
import type { MetricsSources } from "./metrics.ts";

/**
 * The node's own gauges: who it is, its bus connection and its process guard. (Readings, runners and
 * the telemetry path are the worker's components' metrics: services/worker/src/metrics.ts.)
 */
export function nodeGauges(registry: Registry, o: MetricsSources): void {
  identityGauge(registry, o);
  processGauges(registry, o);
  capacityCounter(registry, o);
}

/**
 * Loads and unloads of capacity that follows demand (docs/capacity.md), counted from the replicated
 * events this node applied: the cluster's decisions since this node started, the same on every node.
 */
function capacityCounter(registry: Registry, o: MetricsSources): void {
  const c = new Counter({
    name: "ic_capacity_events_total",
    help: "On-demand loads, unloads of idle instances (keep_alive) and for room (least recently used), and replicas added, retired, recalled or removed for load.",
    labelNames: ["action"],
    registers: [registry],
  });
  const deleted = { idle: "unload_idle", room: "unload_room", scale_down: "scale_down" } as const;
  for (const action of [
    "load",
    "scale_up",
    "scale_retire",
    "scale_recall",
    ...Object.values(deleted),
  ])
    c.inc({ action }, 0);
  o.cluster.on({
    event: ({ event: e }) => {
      if (e.type === "DeploymentCreated" && e.deployment.on_demand) c.inc({ action: "load" });
      else if (e.type === "DeploymentCreated" && e.deployment.scale && e.reason)
        c.inc({ action: "scale_up" });
      else if (e.type === "DeploymentRetiring") c.inc({ action: "scale_retire" });
      else if (e.type === "DeploymentRecalled") c.inc({ action: "scale_recall" });
      else if (e.type === "DeploymentDeleted" && e.cause) c.inc({ action: deleted[e.cause] });
    },
  });
}

/** Bus sends and the process guard. */
function processGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Counter({
    name: "ic_bus_send_failures_total",
    help: "Bus sends that failed (logged with subject and size), by operation, catalog name and code.",
    labelNames: ["op", "name", "code"],
    registers,
    collect() {
      this.reset();
      for (const f of o.bus?.().failures.values() ?? [])
        this.inc({ op: f.op, name: f.name, code: f.code }, f.count);
    },
  });
  new Gauge({
    name: "ic_bus_message_max_bytes",
    help: "Largest message this node sent on the bus, by catalog name.",
    labelNames: ["name"],
    registers,
    collect() {
      this.reset();
      for (const [name, bytes] of o.bus?.().largest ?? []) this.set({ name }, bytes);
    },
  });
  const traffic = [
    ["ic_bus_messages_total", "Messages", "inMsgs", "outMsgs"],
    ["ic_bus_bytes_total", "Payload bytes", "inBytes", "outBytes"],
  ] as const;
  for (const [name, what, inKey, outKey] of traffic)
    new Counter({
      name,
      help: `${what} this node's bus connection received (in) and sent (out) since it opened.`,
      labelNames: ["direction"],
      registers,
      collect() {
        this.reset();
        const t = o.bus?.().traffic;
        if (!t) return;
        this.inc({ direction: "in" }, t[inKey]);
        this.inc({ direction: "out" }, t[outKey]);
      },
    });
  new Counter({
    name: "ic_unhandled_rejections_total",
    help: "Promise rejections nobody handled (logged; the node kept serving).",
    registers,
    collect() {
      this.reset();
      this.inc(o.unhandledRejections?.() ?? 0);
    },
  });
}

/** This node: who it is and whether it is the master. */
function identityGauge(registry: Registry, o: MetricsSources): void {
  new Gauge({
    name: "ic_node_info",
    help: "This node (value 1): its peer key and whether it is the master.",
    labelNames: ["peer_key", "is_master"],
    registers: [registry],
    collect() {
      this.reset();
      this.set({ peer_key: o.peerKey, is_master: String(o.cluster.isMaster) }, 1);
    },
  });
}

/** The cluster as the master sees it (rendered on the master only). */
export function clusterGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  registry.setDefaultLabels({ node: o.name });
  const count = (name: string, help: string, read: () => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.set(read());
      },
    });
  count(
    "ic_cluster_members",
    "Members of the current session.",
    () => Object.keys(o.cluster.snapshot().members).length,
  );
  count(
    "ic_cluster_live_nodes",
    "Nodes heard within the liveness timeout (this one included).",
    () => o.cluster.livePeers().length,
  );
  count(
    "ic_cluster_models",
    "Registered models.",
    () => Object.keys(o.cluster.snapshot().models).length,
  );
  count(
    "ic_cluster_tasks_in_flight",
    "Chat tasks the master has open.",
    () => o.openTasks?.() ?? 0,
  );
  count(
    "ic_cluster_state_index",
    "Index of the last sequenced event.",
    () => o.cluster.snapshot().index,
  );
  clusterStateGauges(registry, o);
  sessionGauges(registry, o);
}

/** The replica's instances, runners and deployments by state. */
function clusterStateGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Gauge({
    name: "ic_cluster_instances",
    help: "Instances by whether their rank 0 is ready.",
    labelNames: ["ready"],
    registers,
    collect() {
      this.reset();
      const s = o.cluster.snapshot();
      let ready = 0;
      for (const id of Object.keys(s.instances))
        if (s.runners[`${id}/0`]?.state === "RunnerReady") ready++;
      this.set({ ready: "true" }, ready);
      this.set({ ready: "false" }, Object.keys(s.instances).length - ready);
    },
  });
  new Gauge({
    name: "ic_cluster_runners",
    help: "Runners in the cluster by state.",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      const runners = Object.values(o.cluster.snapshot().runners);
      for (const state of RUNNER_STATES)
        this.set({ state }, runners.filter((r) => r.state === state).length);
    },
  });
  new Gauge({
    name: "ic_cluster_deployments",
    help: "Placement intents by status.",
    labelNames: ["status"],
    registers,
    collect() {
      this.reset();
      const ds = Object.values(o.cluster.snapshot().deployments);
      for (const status of ["Placed", "Pending"] as const)
        this.set({ status }, ds.filter((d) => d.status === status).length);
    },
  });
}

/** The session: its id and master, and when it started. */
function sessionGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Gauge({
    name: "ic_cluster_session_info",
    help: "The current session (value 1) and its master.",
    labelNames: ["session_id", "master_node_id"],
    registers,
    collect() {
      this.reset();
      const s = o.cluster.snapshot().session;
      if (s) this.set({ session_id: s.session_id, master_node_id: s.master_node_id }, 1);
    },
  });
  new Gauge({
    name: "ic_cluster_session_started_seconds",
    help: "When the current session started (Unix time).",
    registers,
    collect() {
      this.reset();
      const s = o.cluster.snapshot().session;
      if (s) this.set(s.started_at / 1000);
    },
  });
}
