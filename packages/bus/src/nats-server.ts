// Supervises this node's own nats-server child: start with cluster routes, wait for readiness,
// restart with backoff if it dies, stop with SIGTERM then SIGKILL.
// Invariants: at most one child at a time; after the first start the client port is pinned so
// reconnecting clients find the restarted server; stop() is idempotent and ends supervision.
import { execa } from "execa";
import type { ResultPromise } from "execa";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as tcpConnect } from "node:net";
import type { Logger } from "@ic/log";

export interface NatsServerOptions {
  readonly bin?: string | undefined;
  /** Address to bind (client and cluster listeners). */
  readonly host: string;
  /** 0 picks a free port (reported after start). */
  readonly clientPort: number;
  /** Route listener; 0 disables clustering for a lone node. */
  readonly clusterPort: number;
  readonly clusterName: string;
  /** Peers' route addresses (host:port). */
  readonly routes: readonly string[];
  readonly log: Logger;
  readonly readyTimeoutMs?: number;
  readonly restartBackoffMs?: number;
}

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

  get clientUrl(): string {
    return `nats://${this.opts.host === "0.0.0.0" ? "127.0.0.1" : this.opts.host}:${this.port}`;
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

  private args(): string[] {
    const o = this.opts;
    const a = ["-a", o.host, "-p", String(this.port === 0 ? -1 : this.port)];
    a.push("--ports_file_dir", this.portsDir, "--no_advertise=true");
    if (o.clusterPort > 0) {
      a.push("--cluster", `nats://${o.host}:${o.clusterPort}`, "--cluster_name", o.clusterName);
      if (o.routes.length > 0) a.push("--routes", o.routes.map((r) => `nats://${r}`).join(","));
    }
    return a;
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
        if (/\[(ERR|FTL)\]/.test(line)) this.opts.log.warn({ line }, "nats-server");
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
      if (port && (await canConnect("127.0.0.1", port))) {
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
