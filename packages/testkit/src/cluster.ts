// Real node processes for integration tests: the launcher (@ic/launcher) with
// test settings, clusters on loopback or on lab hosts (network namespaces), and fixtures for them.
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  deepMerge,
  freePort,
  newClusterSecret,
  prepareNode as prepareLaunchedNode,
} from "@ic/launcher";
import type { NodeProcess, NodeSpec } from "@ic/launcher";
import { waitFor } from "./ports.ts";
import { DelayRelay, NetLab } from "./netns/index.ts";
import type { LabHost } from "./netns/index.ts";
import { makeClusterCerts } from "./certs.ts";
import type { ClusterCerts } from "./certs.ts";

export {
  buildBundle,
  deepMerge,
  newClusterSecret,
  NodeProcess,
  REPO_ROOT,
  waitForConvergence,
} from "@ic/launcher";
export type { NodeSpec } from "@ic/launcher";

/** Fast timings for tests; the spec's defaults stay the defaults everywhere else. */
export const FAST_CLUSTER = {
  heartbeat_ms: 500,
  liveness_timeout_ms: 2000,
  election_timeout_ms: 1500,
  info_pending_wait_ms: 3000,
} as const;

/**
 * Writes a test node's config and returns an unstarted NodeProcess: the launcher's (services/node)
 * with test settings under the test's own `config`: fast cluster timings, a small context, a short
 * restart backoff, a short drain.
 */
export function prepareNode(spec: NodeSpec): NodeProcess {
  const testDefaults = {
    cluster: FAST_CLUSTER,
    engine: { context_size: 512, restart_backoff_ms: 200, ...testEngineThreads() },
    // A test's stop does not wait a minute for generations it left running.
    node: { drain_timeout_ms: 3000 },
    // The dashboard's charts take a sample a second (10 s by default).
    dashboard: { sample_interval_ms: 1000 },
  };
  return prepareLaunchedNode({ ...spec, config: deepMerge(testDefaults, spec.config ?? {}) });
}

/**
 * `engine.threads` from IC_TEST_ENGINE_THREADS, which the test suite sets (vitest.config.ts) and the
 * benchmarks do not: their engines keep the engine's own thread count.
 */
function testEngineThreads(): { threads?: number } {
  const n = Number(process.env.IC_TEST_ENGINE_THREADS);
  return Number.isInteger(n) && n > 0 ? { threads: n } : {};
}

/** Merges `patch` (section by section) into a prepared, not yet started node's config file. */
export function patchConfig(
  node: NodeProcess,
  patch: Record<string, Record<string, unknown>>,
): void {
  const cfg = parseYaml(readFileSync(node.configPath, "utf8")) as Record<
    string,
    Record<string, unknown>
  >;
  for (const [k, v] of Object.entries(patch)) cfg[k] = { ...cfg[k], ...v };
  writeFileSync(node.configPath, stringifyYaml(cfg), { mode: 0o600 });
}

export interface LocalCluster extends AsyncDisposable {
  readonly nodes: NodeProcess[];
  stop(): Promise<void>;
}

/**
 * The end of a test's cluster: kill -9 of each node's process group (node, nats-server, runners), as
 * a power cut. A graceful stop of every node at once drains each into a cluster that is going away
 * too (up to 3 s waiting for deployments to move, up to 6 s for connections to close, then the 5 s
 * grace): about 4 s per cluster that no test asserts anything about. A test that is about a stop
 * calls `stop()` itself.
 */
function killForTeardown(nodes: readonly NodeProcess[]): void {
  for (const n of nodes) n.kill("SIGKILL");
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
      killForTeardown(nodes);
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
  /** The cluster CA and node certificates (null with `tls: false`): trusted by this process. */
  readonly certs: ClusterCerts | null;
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
 * (bind 0.0.0.0) behind bearer tokens and TLS (a cluster CA and node certificates from
 * scripts/make-secrets.mjs, trusted by this process), the peers are named `node-k:6222`, one shared
 * cluster secret.
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
    /**
     * TLS between the nodes, as deployed (default true): a cluster CA and a certificate per node
     * from scripts/make-secrets.mjs; false runs them with `tls.allow_plaintext`.
     */
    tls?: boolean;
    verbose?: boolean;
    /** Node flags of node `i` (e.g. `--cpu-prof` for a benchmark's profile). */
    nodeArgs?: (i: number) => readonly string[];
    /**
     * Lab hosts with no node, after the nodes' (e.g. `operator`): a client on its own machine, such
     * as a browser, which then sees neither the nodes' nor the test machine's interfaces change.
     */
    clientHosts?: readonly string[];
  } = {},
): Promise<HostCluster> {
  const nodeNames = Array.from({ length: n }, (_, i) => `node-${i + 1}`);
  const lab = await NetLab.create({ hosts: [...nodeNames, ...(opts.clientHosts ?? [])] });
  const nodeHosts = lab.hosts.slice(0, n);
  const secret = newClusterSecret();
  const certs = opts.tls === false ? null : hostCerts(lab, nodeHosts);
  const adminToken = `adm_${randomBytes(18).toString("hex")}`;
  const relays: DelayRelay[] = [];
  const nodes: NodeProcess[] = [];
  const cluster = hostClusterHandle({ lab, secret, adminToken, relays, certs, nodes });
  try {
    for (const [i, h] of nodeHosts.entries()) {
      const peers = await hostPeers({ lab, nodeHosts, h }, opts.routeDelayMs, relays);
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
            deepMerge(hostConfig(h, certs), opts.config?.(i) ?? {}),
            adminToken,
          ),
          env: typeof opts.env === "function" ? opts.env(i) : (opts.env ?? {}),
          ...(opts.nodeArgs ? { nodeArgs: opts.nodeArgs(i) } : {}),
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

/**
 * Each certificate is valid for the host's name and address, and the root namespace's address
 * (where delay relays listen: a route dialled through one checks the peer's certificate by it).
 */
function hostCerts(lab: NetLab, nodeHosts: readonly LabHost[]): ClusterCerts {
  return makeClusterCerts(
    nodeHosts.map((h) => ({ name: h.name, hosts: [h.name, h.address, lab.rootAddress] })),
  );
}

/** The cluster of `startHostCluster` over its parts, filled in (nodes, relays) as they start. */
function hostClusterHandle(parts: {
  lab: NetLab;
  secret: string;
  adminToken: string;
  relays: DelayRelay[];
  certs: ClusterCerts | null;
  nodes: NodeProcess[];
}): HostCluster {
  const { lab, relays, nodes } = parts;
  return {
    ...parts,
    node: (name) => {
      const found = nodes.find((x) => x.spec.name === name);
      if (!found) throw new Error(`no node ${name}`);
      return found;
    },
    stop: async () => {
      await Promise.all(nodes.map((x) => x.stop(5000)));
    },
    [Symbol.asyncDispose]: async () => {
      killForTeardown(nodes);
      await Promise.all(nodes.map((x) => x[Symbol.asyncDispose]()));
      await Promise.all(relays.map((r) => r.close()));
      await lab.dispose();
    },
  };
}

/**
 * The route peers of host `h`: every other node's host by name, or with `delayMs` a delay relay
 * (started here, added to `relays`) in front of each.
 */
async function hostPeers(
  { lab, nodeHosts, h }: { lab: NetLab; nodeHosts: readonly LabHost[]; h: LabHost },
  delayMs: number | undefined,
  relays: DelayRelay[],
): Promise<string[]> {
  const peers: string[] = [];
  for (const other of nodeHosts) {
    if (other.name === h.name) continue;
    if (delayMs) {
      const relay = await DelayRelay.start({
        listenHost: lab.rootAddress,
        targetHost: other.address,
        targetPort: HOST_PORTS.cluster,
        delayMs,
      });
      relays.push(relay);
      peers.push(relay.address);
    } else peers.push(`${other.name}:${HOST_PORTS.cluster}`);
  }
  return peers;
}

/** A lab host's node config as deployed, before the test's own config is merged in. */
function hostConfig(h: LabHost, certs: ClusterCerts | null): Record<string, unknown> {
  return {
    node: { host: h.name, bind: "0.0.0.0", api_port: HOST_PORTS.api },
    bus: { client_port: HOST_PORTS.client },
    tls: certs ? certs.tlsConfig(h.name) : { allow_plaintext: true },
  };
}

/**
 * A big model in a store without using the disk: the tiny model's GGUF header and tensors, then
 * sparse zeros up to `bytes`, with the manifest a store host of the version before piece hashes
 * wrote (`manifest: "pre-pieces"`; its sha256 is made up, so a backfill that finishes finds the
 * file changed) or one whose size is wrong (`"wrong-size"`: the files differ from it). Reading it
 * costs a store host's hashing what a real file of that size would.
 */
export async function seedBigSparseModel(
  store: string,
  o: { modelId: string; bytes: number; manifest: "pre-pieces" | "wrong-size" },
): Promise<void> {
  const { writeTinyModel } = await import("@ic/gguf");
  const dir = join(store, o.modelId.replace("/", "--"));
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "big.gguf");
  await writeTinyModel(file);
  truncateSync(file, o.bytes);
  const listed = o.manifest === "wrong-size" ? o.bytes + 4096 : o.bytes;
  const manifest = {
    model_id: o.modelId,
    files: [{ path: "big.gguf", bytes: listed, sha256: "0".repeat(64) }],
    total_bytes: listed,
    registered_at: new Date(0).toISOString(),
    source: "local",
  };
  writeFileSync(join(dir, ".ic-manifest.json"), JSON.stringify(manifest));
}

/** Writes the tiny test model (and optionally its drafter) into `<store>/<org>--<name>/`. */
export async function seedStore(
  store: string,
  opts: {
    modelId?: string;
    drafterId?: string;
    layers?: number;
    slow?: boolean;
    /** The token embedding renamed: the header reads fine (it registers), llama.cpp refuses to load it. */
    unloadable?: boolean;
    /** The tools model (a template with tools; it answers with a tool call): see TinyModelOptions. */
    tools?: boolean;
    /** A vision projector beside it (`tiny-llama-mmproj.gguf`): the model takes images. */
    mmproj?: boolean;
    /** The model's trained context (the slow model's is 16384, the other's its generator's). */
    contextLength?: number;
  } = {},
): Promise<{ store: string; modelId: string; drafterId?: string }> {
  const { writeTinyModel, writeTinyProjector } = await import("@ic/gguf");
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
  const file = join(dir, "tiny-llama.gguf");
  await writeTinyModel(file, {
    ...shape,
    ...(opts.layers ? { nLayer: opts.layers } : {}),
    ...(opts.tools ? { tools: true } : {}),
    ...(opts.contextLength ? { contextLength: opts.contextLength } : {}),
  });
  if (opts.mmproj)
    await writeTinyProjector(join(dir, "tiny-llama-mmproj.gguf"), {
      ...("nEmbd" in shape ? { textEmbd: shape.nEmbd } : {}),
    });
  if (opts.unloadable) {
    const bytes = readFileSync(file);
    const at = bytes.indexOf("token_embd.weight");
    if (at < 0) throw new Error("the tiny model has no token_embd.weight to rename");
    bytes.write("token_embX.weight", at);
    writeFileSync(file, bytes);
  }
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
  // As a client would: a retryable 503 (the intent store electing its leaders after a node left,
  // a session starting) is retried until the deadline; anything else is the answer.
  const deadline = Date.now() + timeoutMs;
  let r: Response;
  let placed: {
    instance?: { instance_id: string; assignments: { node_id: string; rank: number }[] };
    error?: { retryable?: boolean };
  };
  for (;;) {
    r = await node.post("/place_instance", body);
    placed = (await r.json()) as typeof placed;
    if (r.status !== 503 || !placed.error?.retryable || Date.now() > deadline) break;
    await new Promise((res) => setTimeout(res, 250));
  }
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

/** What waitForReadyInstances reads of GET /state. */
interface ReadyState {
  readonly instances: readonly {
    readonly instance_id: string;
    readonly runners: readonly { readonly rank: number; readonly state: string }[];
  }[];
}

/**
 * Deletes every instance and deployment, as a client would: each id any of `observers` still lists
 * is deleted through `via`, again until none lists any (a DELETE answered with a retryable error,
 * the intent store still re-electing, is simply sent again). A timeout names the last refusals.
 */
export async function deleteEveryInstance(
  via: NodeProcess,
  observers: readonly NodeProcess[] = [via],
  timeoutMs = 30_000,
): Promise<void> {
  interface Listed {
    instances: { instance_id: string }[];
    deployments: { instance_id: string }[];
  }
  const answers: string[] = [];
  await waitFor(
    async () => {
      const docs = await Promise.all(observers.map((n) => n.get<Listed>("/state")));
      const ids = new Set(
        docs.flatMap((d) => [
          ...d.instances.map((i) => i.instance_id),
          ...d.deployments.map((x) => x.instance_id),
        ]),
      );
      if (ids.size === 0) return true;
      for (const id of ids) {
        const res = await fetch(`${via.apiUrl}/instance/${id}`, {
          method: "DELETE",
          headers: via.authHeaders,
        });
        if (!res.ok) answers.push(`${res.status} ${await res.text()}`);
        else await res.arrayBuffer();
      }
      return undefined;
    },
    { timeoutMs, intervalMs: 500, what: "every instance and deployment deleted" },
  ).catch((e: unknown) => {
    throw new Error(`${String(e)}; last DELETE answers: ${answers.slice(-3).join(" | ")}`);
  });
}
/**
 * Waits until `count` instances have their rank 0 RunnerReady, as the first of `nodes` that is
 * running and answers sees it, and returns that /state document. On timeout the message names the
 * runners it saw last.
 */
export async function waitForReadyInstances<S extends ReadyState>(
  nodes: NodeProcess | readonly NodeProcess[],
  count: number,
  timeoutMs = 60_000,
): Promise<S> {
  const asked = Array.isArray(nodes) ? (nodes as readonly NodeProcess[]) : [nodes as NodeProcess];
  let seen = "nothing yet";
  return waitFor(
    async () => {
      for (const n of asked) {
        if (!n.running) continue;
        const s = await n.get<S>("/state").catch(() => undefined);
        if (!s) continue;
        seen = JSON.stringify(s.instances.map((i) => [i.instance_id, i.runners]));
        const ready = s.instances.filter((i) =>
          i.runners.some((r) => r.rank === 0 && r.state === "RunnerReady"),
        );
        return ready.length === count ? s : undefined;
      }
      return undefined;
    },
    {
      timeoutMs,
      intervalMs: 100,
      get what() {
        return `${count} ready instance(s) (runners last seen: ${seen})`;
      },
    },
  );
}
