// Starts real node processes (services/node/src/main.ts) from a generated config file: the local
// cluster of `npm start` (local-cluster.ts) and, through @ic/testkit, every integration test.
// Each node runs in its own process group, so kill("SIGKILL") takes down the node, its nats-server
// and its runners at once -- like a machine that lost power.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import type { ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import type { WriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { stringify as stringifyYaml } from "yaml";
import { readConfigFile } from "@ic/config";
import { waitFor } from "@ic/process";
import { renewClientPool } from "@ic/tls";
import { buildNodeBundle, type NodeBundle } from "./node-bundle.ts";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
/**
 * The node's entry point, started by path (the launcher imports no service code): built once per
 * launcher process into a bundle (node-bundle.ts), which starts in a fraction of tsx's time.
 */
let bundle: Promise<NodeBundle> | undefined;
function nodeMain(): Promise<string> {
  bundle ??= buildNodeBundle(REPO_ROOT);
  return bundle.then((b) => b.main);
}

export interface NodeSpec {
  readonly name: string;
  /** Route port of this node's nats-server (peers connect to it). */
  readonly clusterPort: number;
  /** Route addresses of the peers (host:port). */
  readonly peers: readonly string[];
  /** Extra configuration merged into the generated file (any key of the config schema). */
  readonly config?: Record<string, unknown>;
  /**
   * The operator's own keys (npm start --config), merged over what an earlier launch kept and
   * under `config`; the launcher's keys (LAUNCHER_KEYS) must already be left out.
   */
  readonly userConfig?: Record<string, unknown>;
  readonly env?: Record<string, string>;
  /** Extra flags for the node's Node.js processes (e.g. `--cpu-prof`; NODE_OPTIONS refuses some). */
  readonly nodeArgs?: readonly string[];
  /** Where this node keeps its state; a temp dir by default. */
  readonly dataDir?: string;
  /** Pipe the node's log to the parent's stderr. */
  readonly verbose?: boolean;
  /** Append the node's log lines (its stdout and stderr, pino JSON) to this file. */
  readonly logFile?: string;
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

/** Merges `b` into `a` (objects merge key by key; arrays and values replace). */
export function deepMerge(
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
  private logStream: WriteStream | undefined;

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
    const nodeArgs = [...(this.spec.nodeArgs ?? []), await nodeMain(), "--config", this.configPath];
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
    if (this.spec.logFile && !this.logStream) {
      mkdirSync(dirname(this.spec.logFile), { recursive: true });
      this.logStream = createWriteStream(this.spec.logFile, { flags: "a", mode: 0o600 });
    }
    const onData = (c: Buffer) => {
      this.logStream?.write(c);
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

  /**
   * Graceful stop (SIGTERM), then SIGKILL of the group after the grace period. `to: "group"` sends
   * the SIGTERM to the node's whole process group, as Ctrl-C, `kill -- -PGID` or `tini -g` do.
   */
  async stop(graceMs = 15_000, to: "process" | "group" = "process"): Promise<void> {
    if (!this.child) return;
    if (this.running) {
      // This process's idle connections to the node would hold its drain until they time out.
      renewClientPool();
      if (to === "group") this.kill("SIGTERM");
      else this.child.kill("SIGTERM");
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
    this.logStream?.end();
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

const CONFIG_HEADER =
  "# Written by the local-cluster launcher at each start (packages/launcher).\n" +
  "# Keys set here (by hand, by npm start --config, or in the dashboard) are kept across launches\n" +
  "# on this data directory, except the ones the launcher owns: node.name/host/bind/api_port,\n" +
  "# bus ports and store_dir, cluster.peers/secret, store_path and the data paths.\n";

/** Keys the launcher decides at every start (names, ports, peers, the secret, file locations). */
export const LAUNCHER_KEYS: readonly string[] = [
  "node.name",
  "node.host",
  "node.bind",
  "node.api_port",
  "bus.client_port",
  "bus.cluster_port",
  "bus.store_dir",
  "cluster.peers",
  "cluster.secret",
  "cluster.secret_file",
  "node_cache_path",
  "store_path",
  "tracing.dir",
  "event_log.dir",
  "engine.runner_log_dir",
];

const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A copy of `doc` without the launcher's keys, and which of them it had. */
export function withoutLauncherKeys(doc: Record<string, unknown>): {
  kept: Record<string, unknown>;
  dropped: string[];
} {
  const kept = structuredClone(doc);
  const dropped: string[] = [];
  for (const key of LAUNCHER_KEYS) {
    const path = key.split(".");
    const parent = path
      .slice(0, -1)
      .reduce<unknown>((o, k) => (isMapping(o) ? o[k] : undefined), kept);
    const last = path.at(-1)!;
    if (isMapping(parent) && last in parent) {
      delete parent[last];
      dropped.push(key);
    }
  }
  return { kept, dropped };
}

/** An existing config file's keys, the launcher's own left out ({} when none or unreadable). */
function keptSettings(configPath: string): Record<string, unknown> {
  try {
    return withoutLauncherKeys(readConfigFile(configPath)).kept;
  } catch {
    return {};
  }
}

/** Writes the node's config file and returns an unstarted NodeProcess. */
export function prepareNode(spec: NodeSpec): NodeProcess {
  const owns = spec.dataDir === undefined;
  const dataDir = spec.dataDir ?? mkdtempSync(join(tmpdir(), `ic-${spec.name}-`));
  mkdirSync(dataDir, { recursive: true });
  const secret = spec.secret ?? newClusterSecret();
  // Only what the launcher must decide (names, ports, where files go); every other key keeps the
  // documented default of packages/config unless the caller's `config` sets it.
  const base: Record<string, unknown> = {
    node: { name: spec.name, host: "127.0.0.1", bind: "127.0.0.1", api_port: 0 },
    bus: { client_port: 0, cluster_port: spec.clusterPort, store_dir: join(dataDir, "jetstream") },
    cluster: { peers: [...spec.peers], secret },
    node_cache_path: join(dataDir, "staging"),
    logging: { enabled: true, level: "info" },
    tracing: { dir: join(dataDir, "traces") },
    event_log: { dir: join(dataDir, "events") },
    engine: { runner_log_dir: join(dataDir, "runners") },
  };
  const configPath = join(dataDir, "config.yaml");
  // Settings an operator set (by hand, with --config, in the dashboard's settings editor) survive a
  // relaunch on the same data directory; keys the caller sets still win.
  const cfg = deepMerge(
    deepMerge(deepMerge(base, keptSettings(configPath)), spec.userConfig ?? {}),
    spec.config ?? {},
  );
  writeFileSync(configPath, CONFIG_HEADER + stringifyYaml(cfg), { mode: 0o600 });
  return new NodeProcess({ ...spec, secret }, configPath, dataDir, owns);
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
