// Starts real node processes (services/node) on loopback for integration tests and the local launcher.
// Each node runs in its own process group, so kill("SIGKILL") takes down the node, its nats-server
// and its runners at once -- like a machine that lost power.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, waitFor } from "./ports.ts";
import { DelayRelay, NetLab } from "./netns/index.ts";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const NODE_MAIN = join(REPO_ROOT, "services/node/src/main.ts");

export interface NodeSpec {
  readonly name: string;
  /** Route port of this node's nats-server (peers connect to it). */
  readonly clusterPort: number;
  /** Route addresses of the peers (host:port). */
  readonly peers: readonly string[];
  /** Extra configuration merged into the generated file (any key of the config schema). */
  readonly config?: Record<string, unknown>;
  readonly env?: Record<string, string>;
  /** Extra flags for the node's Node.js processes (e.g. `--cpu-prof`; NODE_OPTIONS refuses some). */
  readonly nodeArgs?: readonly string[];
  /** Where this node keeps its state; a temp dir by default. */
  readonly dataDir?: string;
  /** Pipe the node's log to the parent's stderr. */
  readonly verbose?: boolean;
  /**
   * argv prefix the node's command runs under, e.g. `["ip", "netns", "exec", "iclk3x9a-node-1"]`
   * (`NetLab.wrap`). It must exec in place, so the process group still holds the whole node.
   */
  readonly wrap?: readonly string[];
  /** The cluster secret (shared by every node of a cluster); a random one by default. */
  readonly secret?: string;
  /** Bearer token `get`/`post` send (a token of the node's `auth.tokens`). */
  readonly apiToken?: string;
  /**
   * Address the test process dials instead of the node's advertised host (a lab host's IP: the
   * root namespace cannot resolve the names `node-1`, ... that the hosts use among themselves).
   */
  readonly reachAt?: string;
}

/** A fresh random cluster secret. */
export function newClusterSecret(): string {
  return randomBytes(24).toString("hex");
}

/** Fast timings for tests; the spec's defaults stay the defaults everywhere else. */
export const FAST_CLUSTER = {
  heartbeat_ms: 500,
  liveness_timeout_ms: 2000,
  election_timeout_ms: 1500,
  info_pending_wait_ms: 3000,
} as const;

function deepMerge(
  a: Record<string, unknown>,
  b: Record<string, unknown>,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    out[k] =
      prev &&
      typeof prev === "object" &&
      !Array.isArray(prev) &&
      v &&
      typeof v === "object" &&
      !Array.isArray(v)
        ? deepMerge(prev as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

export class NodeProcess implements AsyncDisposable {
  apiUrl = "";
  peerKey = "";
  natsUrl = "";
  readonly logLines: string[] = [];
  private child: ChildProcess | undefined;
  private exited: Promise<number | null> | undefined;

  constructor(
    readonly spec: NodeSpec,
    readonly configPath: string,
    readonly dataDir: string,
    /** A temp data dir made for this node is removed by dispose; a given one is kept. */
    private readonly ownsDataDir = false,
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }
  get running(): boolean {
    return (
      this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null
    );
  }

  async start(timeoutMs = 30_000): Promise<void> {
    const nodeArgs = [
      ...(this.spec.nodeArgs ?? []),
      "--import",
      "tsx",
      NODE_MAIN,
      "--config",
      this.configPath,
    ];
    // With a wrap (e.g. `ip netns exec <ns>`), the wrapper execs node in place: same pid, same group.
    const [wrapCmd, ...wrapArgs] = this.spec.wrap ?? [];
    const child = spawn(
      wrapCmd ?? process.execPath,
      wrapCmd ? [...wrapArgs, process.execPath, ...nodeArgs] : nodeArgs,
      {
        cwd: REPO_ROOT,
        env: { ...process.env, ...this.spec.env },
        stdio: ["ignore", "pipe", "pipe", "ipc"],
        detached: true,
      },
    );
    this.child = child;
    this.exited = new Promise((r) => child.once("exit", (code) => r(code)));
    const onData = (c: Buffer) => {
      for (const l of c.toString().split("\n")) {
        if (!l) continue;
        this.logLines.push(l);
        if (this.logLines.length > 5000) this.logLines.shift();
        if (this.spec.verbose) process.stderr.write(`[${this.spec.name}] ${l}\n`);
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    const started = new Promise<void>((resolveStarted, reject) => {
      child.on(
        "message",
        (m: { type?: string; api_url?: string; peer_key?: string; nats_url?: string }) => {
          // Also after /admin/restart: the supervisor forwards the fresh image's announcement.
          if (m.type === "started") {
            this.apiUrl = m.api_url ?? "";
            if (this.spec.reachAt && this.apiUrl) {
              const u = new URL(this.apiUrl);
              u.hostname = this.spec.reachAt;
              this.apiUrl = u.origin;
            }
            this.peerKey = m.peer_key ?? "";
            this.natsUrl = m.nats_url ?? "";
            resolveStarted();
          }
        },
      );
      child.once("exit", (code) =>
        reject(
          new Error(
            `node ${this.spec.name} exited with ${code} before starting:\n${this.logLines.slice(-30).join("\n")}`,
          ),
        ),
      );
    });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      started,
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`node ${this.spec.name} did not start in ${timeoutMs} ms`)),
          timeoutMs,
        );
      }),
    ]).finally(() => clearTimeout(timer));
  }

  /** Sends a signal to the whole process group (node, nats-server, runners). */
  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    const pid = this.child?.pid;
    if (!pid || !this.running) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // already gone
    }
  }

  /** Sends a signal to the node process alone (its children are on their own). */
  killProcess(signal: NodeJS.Signals = "SIGKILL"): void {
    const pid = this.child?.pid;
    if (!pid || !this.running) return;
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }

  /** Graceful stop (SIGTERM), then SIGKILL of the group after the grace period. */
  async stop(graceMs = 15_000): Promise<void> {
    if (!this.child) return;
    if (this.running) {
      this.child.kill("SIGTERM");
      const t = setTimeout(() => this.kill("SIGKILL"), graceMs);
      await this.exited;
      clearTimeout(t);
    }
    // Anything left in the group (e.g. after a crash of the node itself) goes too.
    this.kill("SIGKILL");
    const pid = this.child.pid;
    if (pid) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // group empty
      }
    }
  }

  async waitExit(): Promise<number | null> {
    return (await this.exited) ?? null;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop(5000);
    if (this.ownsDataDir) rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** Authorization header for the node's API (none when the node runs without tokens). */
  get authHeaders(): Record<string, string> {
    return this.spec.apiToken ? { authorization: `Bearer ${this.spec.apiToken}` } : {};
  }

  async get<T = unknown>(path: string, timeoutMs = 10_000): Promise<T> {
    const r = await fetch(`${this.apiUrl}${path}`, {
      headers: this.authHeaders,
      signal: AbortSignal.timeout(timeoutMs),
    });
    return (await r.json()) as T;
  }

  /** POSTs `body` as JSON to the node's API; the raw response (status, stream) is the caller's. */
  post(path: string, body: unknown, init: { signal?: AbortSignal } = {}): Promise<Response> {
    return fetch(`${this.apiUrl}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...this.authHeaders },
      body: JSON.stringify(body),
      ...init,
    });
  }
}

/** Writes the node's config file and returns an unstarted NodeProcess. */
export function prepareNode(spec: NodeSpec): NodeProcess {
  const owns = spec.dataDir === undefined;
  const dataDir = spec.dataDir ?? mkdtempSync(join(tmpdir(), `ic-${spec.name}-`));
  mkdirSync(dataDir, { recursive: true });
  const secret = spec.secret ?? newClusterSecret();
  const base: Record<string, unknown> = {
    node: { name: spec.name, host: "127.0.0.1", bind: "127.0.0.1", api_port: 0 },
    bus: { client_port: 0, cluster_port: spec.clusterPort },
    cluster: { peers: [...spec.peers], ...FAST_CLUSTER, secret },
    node_cache_path: join(dataDir, "staging"),
    logging: { enabled: true, level: "info" },
    tracing: { dir: join(dataDir, "traces") },
    event_log: { dir: join(dataDir, "events") },
    engine: {
      runner_log_dir: join(dataDir, "runners"),
      context_size: 512,
      restart_backoff_ms: 200,
    },
  };
  const cfg = deepMerge(base, spec.config ?? {});
  const configPath = join(dataDir, "config.yaml");
  // JSON is valid YAML, and the loader parses it as such.
  writeFileSync(configPath, `${JSON.stringify(cfg, null, 2)}\n`, { mode: 0o600 });
  return new NodeProcess({ ...spec, secret }, configPath, dataDir, owns);
}

export interface LocalCluster extends AsyncDisposable {
  readonly nodes: NodeProcess[];
  stop(): Promise<void>;
}

/** Starts `n` nodes on loopback, each with its own nats-server routed to all the others. */
export async function startCluster(
  n: number,
  opts: {
    config?: (i: number) => Record<string, unknown>;
    env?: Record<string, string> | ((i: number) => Record<string, string>);
    nodeArgs?: readonly string[];
    verbose?: boolean;
    namePrefix?: string;
  } = {},
): Promise<LocalCluster> {
  const ports: number[] = [];
  for (let i = 0; i < n; i++) ports.push(await freePort());
  const secret = newClusterSecret();
  const nodes = ports.map((p, i) =>
    prepareNode({
      name: `${opts.namePrefix ?? "node"}-${i + 1}`,
      clusterPort: p,
      peers: ports.filter((q) => q !== p).map((q) => `127.0.0.1:${q}`),
      secret,
      config: opts.config?.(i) ?? {},
      env: typeof opts.env === "function" ? opts.env(i) : (opts.env ?? {}),
      ...(opts.nodeArgs ? { nodeArgs: opts.nodeArgs } : {}),
      verbose: opts.verbose ?? process.env.IC_TEST_VERBOSE === "1",
    }),
  );
  const cluster: LocalCluster = {
    nodes,
    stop: async () => {
      await Promise.all(nodes.map((x) => x.stop(5000)));
    },
    [Symbol.asyncDispose]: async () => {
      await Promise.all(nodes.map((x) => x[Symbol.asyncDispose]()));
    },
  };
  try {
    // Start sequentially so seniority (and thus the first master) is deterministic: node-1.
    for (const node of nodes) await node.start();
  } catch (e) {
    await cluster.stop();
    throw e;
  }
  return cluster;
}

export interface HostCluster extends LocalCluster {
  readonly lab: NetLab;
  readonly secret: string;
  /** Token with every scope, as configured on every node (nodes' `get`/`post` send it). */
  readonly adminToken: string;
  /** Relays between hosts when `routeDelayMs` is set (closed with the cluster). */
  readonly relays: readonly DelayRelay[];
  /** The node on a lab host. */
  node(name: string): NodeProcess;
}

/** Adds the test's admin token to whatever tokens a test configured (arrays replace when merged). */
function withAdminToken(cfg: Record<string, unknown>, token: string): Record<string, unknown> {
  const auth = (cfg.auth ?? {}) as { tokens?: unknown[] };
  const admin = { name: "test-admin", token, scopes: ["admin", "read", "inference"] };
  return { ...cfg, auth: { ...auth, tokens: [...(auth.tokens ?? []), admin] } };
}

/** Ports every lab host uses: each host has its own address, so all can use the defaults. */
export const HOST_PORTS = { api: 8080, client: 4222, cluster: 6222 } as const;

/**
 * Starts `n` nodes, each on its own lab host (`node-1` ... in its own network namespace), configured
 * as deployed: `node.host` is the host's name, the API and route port listen on every interface
 * (bind 0.0.0.0) behind bearer tokens, the peers are named `node-k:6222`, one shared cluster secret.
 * With `routeDelayMs`, every route dials its peer through a user-space relay that adds that delay
 * each way (the kernel here has no netem).
 */
export async function startHostCluster(
  n: number,
  opts: {
    config?: (i: number) => Record<string, unknown>;
    env?: Record<string, string> | ((i: number) => Record<string, string>);
    routeDelayMs?: number;
    /** Start only these (0-based) nodes; the others stay prepared but stopped. */
    startOnly?: readonly number[];
    verbose?: boolean;
  } = {},
): Promise<HostCluster> {
  const lab = await NetLab.create({ hosts: n });
  const secret = newClusterSecret();
  const adminToken = `adm_${randomBytes(18).toString("hex")}`;
  const relays: DelayRelay[] = [];
  const nodes: NodeProcess[] = [];
  const cluster: HostCluster = {
    lab,
    secret,
    adminToken,
    relays,
    nodes,
    node: (name) => {
      const found = nodes.find((x) => x.spec.name === name);
      if (!found) throw new Error(`no node ${name}`);
      return found;
    },
    stop: async () => {
      await Promise.all(nodes.map((x) => x.stop(5000)));
    },
    [Symbol.asyncDispose]: async () => {
      await Promise.all(nodes.map((x) => x[Symbol.asyncDispose]()));
      await Promise.all(relays.map((r) => r.close()));
      await lab.dispose();
    },
  };
  try {
    for (const [i, h] of lab.hosts.entries()) {
      const peers: string[] = [];
      for (const other of lab.hosts) {
        if (other.name === h.name) continue;
        if (opts.routeDelayMs) {
          const relay = await DelayRelay.start({
            listenHost: lab.rootAddress,
            targetHost: other.address,
            targetPort: HOST_PORTS.cluster,
            delayMs: opts.routeDelayMs,
          });
          relays.push(relay);
          peers.push(relay.address);
        } else peers.push(`${other.name}:${HOST_PORTS.cluster}`);
      }
      nodes.push(
        prepareNode({
          name: h.name,
          clusterPort: HOST_PORTS.cluster,
          peers,
          secret,
          apiToken: adminToken,
          reachAt: h.address,
          wrap: lab.wrap(h.name),
          config: withAdminToken(
            deepMerge(
              {
                node: { host: h.name, bind: "0.0.0.0", api_port: HOST_PORTS.api },
                bus: { client_port: HOST_PORTS.client },
              },
              opts.config?.(i) ?? {},
            ),
            adminToken,
          ),
          env: typeof opts.env === "function" ? opts.env(i) : (opts.env ?? {}),
          verbose: opts.verbose ?? process.env.IC_TEST_VERBOSE === "1",
        }),
      );
    }
    // Sequential starts make seniority (and so the first master) deterministic: node-1.
    for (const [i, node] of nodes.entries())
      if (!opts.startOnly || opts.startOnly.includes(i)) await node.start();
  } catch (e) {
    await cluster[Symbol.asyncDispose]();
    throw e;
  }
  return cluster;
}

interface StateDoc {
  session: { session_id: string } | null;
  this_node: { synced: boolean; node_id: string | null };
  node_identities: { node_id: string; name: string; is_master: boolean }[];
}

/** Waits until every given node is synced to one session with exactly `count` members. */
export async function waitForConvergence(
  nodes: readonly NodeProcess[],
  count: number,
  timeoutMs = 20_000,
): Promise<StateDoc[]> {
  return waitFor(
    async () => {
      const docs = await Promise.all(nodes.map((n) => n.get<StateDoc>("/state")));
      const sessions = new Set(docs.map((d) => d.session?.session_id));
      const ok =
        sessions.size === 1 &&
        docs.every((d) => d.this_node.synced && d.node_identities.length === count);
      return ok ? docs : undefined;
    },
    { timeoutMs, intervalMs: 100, what: `${nodes.length} nodes converging on ${count} members` },
  );
}

/** Writes the tiny test model (and optionally its drafter) into `<store>/<org>--<name>/`. */
export async function seedStore(
  store: string,
  opts: { modelId?: string; drafterId?: string; layers?: number; slow?: boolean } = {},
): Promise<{ store: string; modelId: string; drafterId?: string }> {
  const { writeTinyModel } = await import("@ic/gguf");
  const modelId = opts.modelId ?? "test/tiny-llama";
  const dir = join(store, modelId.replace("/", "--"));
  mkdirSync(dir, { recursive: true });
  // `slow`: a wider model (~30 MB, F16) that generates a few hundred tokens per second on one thread,
  // so a stream stays open long enough for failure tests to kill a node mid-generation.
  const shape = opts.slow
    ? {
        nEmbd: 384,
        nHead: 6,
        nHeadKv: 2,
        nFf: 1536,
        nLayer: 6,
        weightType: "F16" as const,
        // Room for several long generations at once (llama-server splits -c across its slots).
        contextLength: 16384,
      }
    : {};
  await writeTinyModel(join(dir, "tiny-llama.gguf"), {
    ...shape,
    ...(opts.layers ? { nLayer: opts.layers } : {}),
  });
  if (opts.drafterId) {
    const ddir = join(store, opts.drafterId.replace("/", "--"));
    mkdirSync(ddir, { recursive: true });
    await writeTinyModel(join(ddir, "tiny-llama-drafter.gguf"), { drafter: true });
    writeFileSync(join(dir, "model.json"), JSON.stringify({ drafter: opts.drafterId }));
    return { store, modelId, drafterId: opts.drafterId };
  }
  return { store, modelId };
}

/** POST /place_instance and wait until rank 0 of the new instance is ready. */
export async function placeAndWait(
  node: NodeProcess,
  body: Record<string, unknown>,
  timeoutMs = 60_000,
): Promise<{ instance_id: string; assignments: { node_id: string; rank: number }[] }> {
  // The store host registers its models shortly after joining the session.
  await waitFor(
    async () => {
      const s = await node.get<{ models: { model_id: string }[] }>("/state");
      return s.models.some((m) => m.model_id === body.model_id) ? true : undefined;
    },
    { timeoutMs, intervalMs: 100, what: `model ${String(body.model_id)} registered` },
  );
  const r = await node.post("/place_instance", body);
  const placed = (await r.json()) as {
    instance?: { instance_id: string; assignments: { node_id: string; rank: number }[] };
  };
  if (r.status !== 200 || !placed.instance)
    throw new Error(`place_instance ${r.status}: ${JSON.stringify(placed)}`);
  const id = placed.instance.instance_id;
  await waitFor(
    async () => {
      const s = await node.get<{
        instances: {
          instance_id: string;
          runners: { rank: number; state: string; reason?: string }[];
        }[];
      }>("/state");
      const inst = s.instances.find((i) => i.instance_id === id);
      const failed = inst?.runners.find((x) => x.state === "RunnerFailed");
      if (failed) throw new Error(`runner failed: ${failed.reason}`);
      return inst?.runners.some((x) => x.rank === 0 && x.state === "RunnerReady")
        ? true
        : undefined;
    },
    { timeoutMs, intervalMs: 100, what: `instance ${id} ready` },
  );
  return placed.instance;
}
