// Supervises this node's own nats-server child: start with cluster routes, wait for readiness,
// restart with backoff if it dies, stop with SIGTERM then SIGKILL.
// Invariants: at most one child at a time; after the first start the client port is pinned so
// reconnecting clients find the restarted server; stop() is idempotent and ends supervision.
// The client and route ports both require credentials; they are passed in a 0600 config file, never
// on the command line (where `ps` shows them).
import { execa } from "execa";
import type { ResultPromise } from "execa";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as tcpConnect } from "node:net";
import type { Logger } from "@ic/log";

export interface Credentials {
  readonly user: string;
  readonly password: string;
}

/** A peer refused our route credentials (outbound) or someone presented wrong ones to us (inbound). */
export interface AuthFailure {
  readonly direction: "route-refused-by-peer" | "route-rejected" | "client-rejected";
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
  /** Credentials every route (ours to peers, peers' to us) must carry. */
  readonly routeAuth: Credentials;
  readonly log: Logger;
  readonly readyTimeoutMs?: number;
  readonly restartBackoffMs?: number;
  /** Called for every authentication failure nats-server reports. */
  readonly onAuthFailure?: (f: AuthFailure) => void;
}

const AUTH_LINE =
  /\[ERR\] (\S+) - (rid|cid):\d+ - (?:(Route Error 'Authorization Violation')|authentication error|(Authorization Violation))/;

/** Parses one nats-server log line into an authentication failure, if it is one. */
export function parseAuthFailure(line: string, now: number): AuthFailure | undefined {
  const m = AUTH_LINE.exec(line);
  if (!m) return undefined;
  const remote = m[1]!;
  if (m[3]) return { direction: "route-refused-by-peer", remote, at: now };
  return { direction: m[2] === "rid" ? "route-rejected" : "client-rejected", remote, at: now };
}

/** A nats config string literal (JSON quoting is valid there). */
const q = (v: string): string => JSON.stringify(v);

export type NatsServerState = "idle" | "starting" | "running" | "restarting" | "stopped";

export class NatsServer implements AsyncDisposable {
  private child: ResultPromise | undefined;
  private state: NatsServerState = "idle";
  private port = 0;
  private readonly portsDir = mkdtempSync(join(tmpdir(), "ic-nats-"));
  private restarts = 0;
  private restartTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: NatsServerOptions) {
    this.port = opts.clientPort;
  }

  /** Where this node's own services connect (no credentials in it). */
  get clientUrl(): string {
    return `nats://${dialable(this.opts.clientBind)}:${this.port}`;
  }

  get status(): { state: NatsServerState; restarts: number; pid: number | undefined } {
    return { state: this.state, restarts: this.restarts, pid: this.child?.pid };
  }

  async start(): Promise<void> {
    if (this.state !== "idle") return;
    this.state = "starting";
    await this.spawnOnce();
    this.state = "running";
  }

  /** Writes the server's config file (mode 0600) and returns the command line that loads it. */
  private args(): string[] {
    const o = this.opts;
    const lines = [
      `listen: ${q(`${hostForListen(o.clientBind)}:${this.port === 0 ? -1 : this.port}`)}`,
      `ports_file_dir: ${q(this.portsDir)}`,
      `authorization { user: ${q(o.clientAuth.user)}, password: ${q(o.clientAuth.password)} }`,
    ];
    if (o.clusterPort > 0) {
      const routeUser = encodeURIComponent(o.routeAuth.user);
      const routePass = encodeURIComponent(o.routeAuth.password);
      lines.push(
        "cluster {",
        `  name: ${q(o.clusterName)}`,
        `  listen: ${q(`${hostForListen(o.bind)}:${o.clusterPort}`)}`,
        `  advertise: ${q(`${o.host}:${o.clusterPort}`)}`,
        // Peers learn routes only from their own seed lists: a gossiped address may be unreachable.
        "  no_advertise: true",
        `  authorization { user: ${q(o.routeAuth.user)}, password: ${q(o.routeAuth.password)} }`,
        `  routes: [${o.routes.map((r) => q(`nats-route://${routeUser}:${routePass}@${r}`)).join(", ")}]`,
        "}",
      );
    }
    const file = join(this.portsDir, "nats.conf");
    writeFileSync(file, `${lines.join("\n")}\n`, { mode: 0o600 });
    return ["-c", file];
  }

  private async spawnOnce(): Promise<void> {
    const bin = this.opts.bin ?? "nats-server";
    const child = execa(bin, this.args(), {
      reject: false,
      stdio: ["ignore", "ignore", "pipe"],
      forceKillAfterDelay: 3000,
      cleanup: true,
    });
    this.child = child;
    const stderr: string[] = [];
    child.stderr?.on("data", (c: Buffer) => {
      const text = c.toString();
      if (stderr.length < 200) stderr.push(text);
      for (const line of text.split("\n")) {
        const auth = parseAuthFailure(line, Date.now());
        if (auth) this.opts.onAuthFailure?.(auth);
        else if (/\[(ERR|FTL)\]/.test(line)) this.opts.log.warn({ line }, "nats-server");
      }
    });
    let exited = false;
    void child.then((r) => {
      exited = true;
      if (this.child === child) this.onExit(r.exitCode, r.signal);
    });
    const deadline = Date.now() + (this.opts.readyTimeoutMs ?? 10_000);
    while (Date.now() < deadline) {
      if (exited) {
        throw new Error(`nats-server exited during startup: ${stderr.join("").slice(-2000)}`);
      }
      const port = this.readPort(child.pid);
      if (port && (await canConnect(dialable(this.opts.clientBind), port))) {
        this.port = port;
        this.opts.log.info({ pid: child.pid, port, routes: this.opts.routes }, "nats-server ready");
        return;
      }
      await sleep(25);
    }
    child.kill("SIGKILL");
    throw new Error(`nats-server not ready after ${this.opts.readyTimeoutMs ?? 10_000} ms`);
  }

  private readPort(pid: number | undefined): number | undefined {
    if (!pid) return undefined;
    const f = readdirSync(this.portsDir).find((n) => n.endsWith(`_${pid}.ports`));
    if (!f) return undefined;
    try {
      const doc = JSON.parse(readFileSync(join(this.portsDir, f), "utf8")) as {
        client?: string[];
        nats?: string[];
      };
      const url = (doc.nats ?? doc.client)?.[0];
      const m = url ? /:(\d+)$/.exec(url) : null;
      return m ? Number(m[1]) : undefined;
    } catch {
      return undefined; // file still being written
    }
  }

  private onExit(code: number | undefined, signal: string | undefined): void {
    this.child = undefined;
    if (this.state === "stopped") return;
    this.restarts += 1;
    this.state = "restarting";
    const delay = Math.min(
      5000,
      (this.opts.restartBackoffMs ?? 250) * 2 ** Math.min(this.restarts - 1, 4),
    );
    this.opts.log.error(
      { code, signal, restarts: this.restarts, delay },
      "nats-server died; restarting",
    );
    this.restartTimer = setTimeout(() => {
      this.spawnOnce().then(
        () => {
          if (this.state === "restarting") this.state = "running";
        },
        (e: unknown) => {
          this.opts.log.error({ err: e }, "nats-server restart failed");
          if (this.state !== "stopped") this.onExit(undefined, undefined);
        },
      );
    }, delay);
  }

  async stop(): Promise<void> {
    if (this.state === "stopped") return;
    this.state = "stopped";
    clearTimeout(this.restartTimer);
    const child = this.child;
    this.child = undefined;
    if (child) {
      child.kill("SIGTERM");
      await child;
    }
    rmSync(this.portsDir, { recursive: true, force: true });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** nats-server wants a bare IPv6 address in `listen`; brackets are for URLs. */
function hostForListen(address: string): string {
  return address.startsWith("[") ? address.slice(1, -1) : address;
}

/** An address a local client can dial to reach a listener bound to `bind`. */
function dialable(bind: string): string {
  return bind === "0.0.0.0" ? "127.0.0.1" : bind === "::" ? "::1" : bind;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect({ host, port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}
