// Supervises this node's own nats-server child on the shared supervisor loop (@ic/process): start with
// cluster routes, wait for readiness (ports file + a TCP connect), restart with jittered backoff if it
// dies, stop with SIGTERM then SIGKILL.
// Invariants: at most one child at a time, and one restart per death (the loop decides once per
// run); start() resolves when the first run is ready and rejects -- ending supervision, nothing
// restarts behind it -- when the first run exits, misses its deadline or is stopped; after the first
// start the client port is pinned so reconnecting clients find the restarted server; stop() is
// idempotent, ends supervision and leaves no process behind. The child dies with the node (pdeathsig)
// and, given `childrenDir`, is recorded for the orphan sweep.
// The client and route ports both require credentials; they are passed in a 0600 config file, never
// on the command line (where `ps` shows them).
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { canConnect, supervise } from "@ic/process";
import { GiB } from "@ic/protocol";
import type { Child, RestartPolicy, RunOutcome } from "@ic/process";
import type { Logger } from "@ic/log";

export interface Credentials {
  readonly user: string;
  readonly password: string;
}

/** A peer refused our route credentials (outbound) or someone presented wrong ones to us (inbound). */
export interface AuthFailure {
  readonly direction:
    | "route-refused-by-peer"
    | "route-rejected"
    | "client-rejected"
    /** The TLS handshake of a route failed (a certificate from another CA, or none), either way. */
    | "route-tls-failed";
  /** The remote address as nats-server logged it (host:port). */
  readonly remote: string;
  readonly at: number;
}

export interface NatsServerOptions {
  readonly bin?: string | undefined;
  /** Address the route listener binds to. */
  readonly bind: string;
  /** Advertised route address (what peers dial); `bind` may be 0.0.0.0. */
  readonly host: string;
  /** Address the client listener binds to (the node's own services connect there). */
  readonly clientBind: string;
  /** 0 picks a free port (reported after start). */
  readonly clientPort: number;
  /** Route listener; 0 disables clustering for a lone node. */
  readonly clusterPort: number;
  readonly clusterName: string;
  /** Peers' route addresses (host:port). */
  readonly routes: readonly string[];
  /** Credentials clients must present on the client port. */
  readonly clientAuth: Credentials;
  /** Credentials every route (ours to peers, peers' to us) must carry; not used with `routeTls`. */
  readonly routeAuth: Credentials;
  /**
   * TLS on the routes, both ways: this server's certificate and key, and the CA a peer's certificate
   * must be signed by (`verify`: a route without such a certificate is refused). Routes are then
   * authenticated by their certificates alone: no route password, so a rotation of the cluster
   * secret never touches them. Absent: clear text, and `routeAuth`.
   */
  readonly routeTls?: {
    readonly certFile: string;
    readonly keyFile: string;
    readonly caFile: string;
  };
  readonly log: Logger;
  readonly readyTimeoutMs?: number;
  /** First restart delay (doubling per death in a row, jittered, at most 5 s). */
  readonly restartBackoffMs?: number;
  /** A run that stayed up this long resets the restart backoff. */
  readonly healthyUptimeMs?: number;
  /** Where the child is recorded for the orphan sweep (`childrenDir(...)` of @ic/process). */
  readonly childrenDir?: string | undefined;
  /** Called for every authentication failure nats-server reports. */
  readonly onAuthFailure?: (f: AuthFailure) => void;
  /**
   * JetStream (the intent store's key-value bucket): file storage under `storeDir`, this server
   * named `serverName` (stable across restarts: JetStream's replication knows its peers by it).
   * Clustered when the server has routes; a server with none runs it alone, without a route port
   * (JetStream cannot cluster without routes).
   */
  readonly jetstream?: {
    readonly storeDir: string;
    readonly serverName: string;
    readonly maxMemoryBytes?: number;
    readonly maxFileBytes?: number;
  };
  /**
   * Also serve nats-server's HTTP monitoring (/varz, /routez, ...) on `clientBind`, a free port
   * (`monitorUrl`); off by default. Benchmarks read message counts there.
   */
  readonly monitor?: boolean;
}

const AUTH_LINE =
  /\[ERR\] (\S+) - (rid|cid):\d+ - (?:(Route Error 'Authorization Violation')|authentication error|(Authorization Violation)|(TLS route handshake error))/;

/** Parses one nats-server log line into an authentication failure, if it is one. */
export function parseAuthFailure(line: string, now: number): AuthFailure | undefined {
  const m = AUTH_LINE.exec(line);
  if (!m) return undefined;
  const remote = m[1]!;
  if (m[3]) return { direction: "route-refused-by-peer", remote, at: now };
  if (m[5]) return { direction: "route-tls-failed", remote, at: now };
  return { direction: m[2] === "rid" ? "route-rejected" : "client-rejected", remote, at: now };
}

/** A nats config string literal (JSON quoting is valid there). */
const q = (v: string): string => JSON.stringify(v);

export type NatsServerState = "idle" | "starting" | "running" | "restarting" | "stopped";

const STOP_GRACE_MS = 3000;
/** Kept of the child's stderr for a startup failure's message. */
const STDERR_KEEP = 200;

export class NatsServer implements AsyncDisposable {
  private child: Child | undefined;
  private state: NatsServerState = "idle";
  private port = 0;
  private monitorPort: number | undefined;
  private readonly portsDir = mkdtempSync(join(tmpdir(), "ic-nats-"));
  private restarts = 0;
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(private readonly opts: NatsServerOptions) {
    this.port = opts.clientPort;
  }

  /** Where this node's own services connect (no credentials in it). */
  get clientUrl(): string {
    return `nats://${dialable(this.opts.clientBind)}:${this.port}`;
  }

  /** The HTTP monitoring endpoint, once running with `monitor` set. */
  get monitorUrl(): string | undefined {
    return this.monitorPort === undefined
      ? undefined
      : `http://${dialable(this.opts.clientBind)}:${this.monitorPort}`;
  }

  get status(): { state: NatsServerState; restarts: number; pid: number | undefined } {
    return { state: this.state, restarts: this.restarts, pid: this.child?.pid };
  }

  /** Resolves once the server accepts connections; rejects (and ends supervision) if it never does. */
  async start(): Promise<void> {
    if (this.state !== "idle") return;
    this.state = "starting";
    const o = this.opts;
    const readyTimeoutMs = o.readyTimeoutMs ?? 10_000;
    const policy: RestartPolicy = {
      backoffMs: o.restartBackoffMs ?? 250,
      maxBackoffMs: 5000,
      healthyUptimeMs: o.healthyUptimeMs ?? 30_000,
      maxCrashes: Infinity,
      onDeadline: "restart",
      firstRunMustBeReady: true,
    };
    let stderr: string[] = [];
    let firstReady!: { resolve: () => void; reject: (e: Error) => void };
    const ready = new Promise<void>((resolve, reject) => (firstReady = { resolve, reject }));
    const result = supervise({
      signal: this.abort.signal,
      command: () => ({
        bin: o.bin ?? "nats-server",
        args: this.args(),
        stdout: "ignore",
        stderr: "pipe",
      }),
      recordIn: o.childrenDir,
      ready: (child) => this.accepting(child),
      readyPollMs: 25,
      readyDeadlineMs: readyTimeoutMs,
      stopGraceMs: STOP_GRACE_MS,
      policy,
      onSpawn: (child) => {
        this.child = child;
        stderr = [];
        child.stderr?.on("data", (c: Buffer) => {
          const text = c.toString();
          if (stderr.length < STDERR_KEEP) stderr.push(text);
          for (const line of text.split("\n")) {
            const auth = parseAuthFailure(line, Date.now());
            if (auth) o.onAuthFailure?.(auth);
            else if (/\[(ERR|FTL)\]/.test(line)) o.log.warn({ line }, "nats-server");
          }
        });
      },
      onReady: (child) => {
        this.state = "running";
        o.log.info({ pid: child.pid, port: this.port, routes: o.routes }, "nats-server ready");
        firstReady.resolve();
      },
      onOutcome: (outcome, next) => {
        this.child = undefined;
        if (next.action === "restart") {
          this.restarts += 1;
          this.state = "restarting";
          o.log.error(
            { ...exitFields(outcome), restarts: this.restarts, delay: next.delayMs },
            "nats-server died; restarting",
          );
        } else {
          firstReady.reject(startupError(outcome, stderr.join(""), readyTimeoutMs));
        }
      },
    });
    this.loop = result
      .then(
        () => {},
        (e: unknown) => {
          o.log.error({ err: e }, "nats-server supervision failed");
          firstReady.reject(e instanceof Error ? e : new Error(String(e)));
        },
      )
      .finally(() => {
        this.state = "stopped";
        rmSync(this.portsDir, { recursive: true, force: true });
      });
    await ready;
  }

  /** Whether this server opens a route port: JetStream cannot cluster without routes. */
  private get clustered(): boolean {
    const o = this.opts;
    return o.clusterPort > 0 && (o.jetstream === undefined || o.routes.length > 0);
  }

  /** Ready once the ports file names the client port and it accepts a connection. */
  private async accepting(child: Child): Promise<boolean> {
    const ports = this.readPorts(child.pid);
    const port = ports?.client;
    if (!port || !(await canConnect(dialable(this.opts.clientBind), port))) return false;
    if (this.opts.monitor && ports.monitoring === undefined) return false;
    this.port = port;
    this.monitorPort = ports.monitoring;
    return true;
  }

  /** Writes the server's config file (mode 0600) and returns the command line that loads it. */
  private args(): string[] {
    const o = this.opts;
    const lines = [
      `listen: ${q(`${hostForListen(o.clientBind)}:${this.port === 0 ? -1 : this.port}`)}`,
      `ports_file_dir: ${q(this.portsDir)}`,
      `authorization { user: ${q(o.clientAuth.user)}, password: ${q(o.clientAuth.password)} }`,
    ];
    if (o.monitor) lines.push(`http: ${q(`${hostForListen(o.clientBind)}:-1`)}`);
    if (o.jetstream) {
      const js = o.jetstream;
      lines.push(
        `server_name: ${q(js.serverName)}`,
        "jetstream {",
        `  store_dir: ${q(js.storeDir)}`,
        `  max_memory_store: ${js.maxMemoryBytes ?? 64 * 1024 * 1024}`,
        `  max_file_store: ${js.maxFileBytes ?? GiB}`,
        "}",
      );
    }
    if (this.clustered) {
      const creds = o.routeTls
        ? ""
        : `${encodeURIComponent(o.routeAuth.user)}:${encodeURIComponent(o.routeAuth.password)}@`;
      lines.push(
        "cluster {",
        `  name: ${q(o.clusterName)}`,
        `  listen: ${q(`${hostForListen(o.bind)}:${o.clusterPort}`)}`,
        `  advertise: ${q(`${o.host}:${o.clusterPort}`)}`,
        // Peers learn routes only from their own seed lists: a gossiped address may be unreachable.
        "  no_advertise: true",
        ...(o.routeTls
          ? []
          : [
              `  authorization { user: ${q(o.routeAuth.user)}, password: ${q(o.routeAuth.password)} }`,
            ]),
        ...(o.routeTls
          ? [
              "  tls {",
              `    cert_file: ${q(o.routeTls.certFile)}`,
              `    key_file: ${q(o.routeTls.keyFile)}`,
              `    ca_file: ${q(o.routeTls.caFile)}`,
              "    verify: true",
              "    timeout: 5",
              "  }",
            ]
          : []),
        `  routes: [${o.routes.map((r) => q(`nats-route://${creds}${r}`)).join(", ")}]`,
        "}",
      );
    }
    const file = join(this.portsDir, "nats.conf");
    writeFileSync(file, `${lines.join("\n")}\n`, { mode: 0o600 });
    return ["-c", file];
  }

  private readPorts(
    pid: number | undefined,
  ): { client: number | undefined; monitoring: number | undefined } | undefined {
    if (!pid) return undefined;
    const f = readdirSync(this.portsDir).find((n) => n.endsWith(`_${pid}.ports`));
    if (!f) return undefined;
    try {
      const doc = JSON.parse(readFileSync(join(this.portsDir, f), "utf8")) as {
        client?: string[];
        nats?: string[];
        monitoring?: string[];
      };
      return {
        client: portOf((doc.nats ?? doc.client)?.[0]),
        monitoring: portOf(doc.monitoring?.[0]),
      };
    } catch {
      return undefined; // file still being written
    }
  }

  async stop(): Promise<void> {
    this.abort.abort();
    if (this.loop) await this.loop;
    this.state = "stopped";
    rmSync(this.portsDir, { recursive: true, force: true });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

function exitFields(o: RunOutcome): { code?: number; signal?: string; outcome: string } {
  if (o.kind !== "exited" && o.kind !== "crashed") return { outcome: o.kind };
  return {
    outcome: o.kind,
    ...(o.code !== undefined ? { code: o.code } : {}),
    ...(o.signal !== undefined ? { signal: o.signal } : {}),
  };
}

/** Why the first run did not give a server (start() rejects with it). */
function startupError(o: RunOutcome, stderr: string, readyTimeoutMs: number): Error {
  switch (o.kind) {
    case "deadline":
      return new Error(`nats-server not ready after ${readyTimeoutMs} ms`);
    case "stopped":
      return new Error("nats-server stopped during startup");
    case "crashed":
    case "exited":
      return new Error(
        `nats-server exited during startup: ${"error" in o && o.error ? o.error : stderr.slice(-2000)}`,
      );
  }
}

function portOf(url: string | undefined): number | undefined {
  const m = url ? /:(\d+)$/.exec(url) : null;
  return m ? Number(m[1]) : undefined;
}

/** nats-server wants a bare IPv6 address in `listen`; brackets are for URLs. */
function hostForListen(address: string): string {
  return address.startsWith("[") ? address.slice(1, -1) : address;
}

/** An address a local client can dial to reach a listener bound to `bind`. */
function dialable(bind: string): string {
  return bind === "0.0.0.0" ? "127.0.0.1" : bind === "::" ? "::1" : bind;
}
