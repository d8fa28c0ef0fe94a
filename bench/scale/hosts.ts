// bench/scale's side of its agent hosts (agent-host.ts): spawning one, asking it over IPC, reading its
// CPU from /proc, and following every agent's status to time convergence.
import { fork } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { cpuMs } from "../lib/streaming.ts";
import { REPO_ROOT } from "../lib/report.ts";
import type { AgentSpec, AgentStatus, FromHost, ToHost } from "./wire.ts";

const HOST_MAIN = join(dirname(fileURLToPath(import.meta.url)), "agent-host.ts");

type Reply<T extends FromHost["t"]> = Extract<FromHost, { t: T }>;

export class AgentHost {
  readonly child: ChildProcess;
  private readonly waiting = new Map<string, (m: FromHost) => void>();
  private exited: Promise<void>;

  constructor(
    readonly label: string,
    readonly agents: readonly AgentSpec[],
    private readonly onStatus: (updates: AgentStatus[]) => void,
  ) {
    this.child = fork(HOST_MAIN, [], {
      cwd: REPO_ROOT,
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "pipe", "ipc"],
    });
    this.child.stderr?.on("data", (c: Buffer) => {
      for (const l of c.toString().split("\n"))
        if (l.trim()) process.stderr.write(`[${label}] ${l}\n`);
    });
    this.exited = new Promise((r) => this.child.once("exit", () => r()));
    this.child.on("message", (m: FromHost) => {
      if (m.t === "status") return this.onStatus(m.updates);
      if (m.t === "error") process.stderr.write(`[${label}] error: ${m.message}\n`);
      const w = this.waiting.get(m.t);
      if (w) {
        this.waiting.delete(m.t);
        w(m);
      }
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  send(m: ToHost): void {
    this.child.send(m);
  }

  /** Sends `m` and waits for the reply of kind `t`. */
  ask<T extends FromHost["t"]>(m: ToHost, t: T, timeoutMs = 60_000): Promise<Reply<T>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${this.label}: no ${t} reply to ${m.t} in ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiting.set(t, (r) => {
        clearTimeout(timer);
        resolve(r as Reply<T>);
      });
      this.send(m);
    });
  }

  /** CPU time (user + system, ms) of the host process, all its threads. */
  cpu(): number {
    return cpuMs({ pid: this.pid }).ms;
  }

  kill(): void {
    if (this.alive) this.child.kill("SIGKILL");
  }

  async stop(): Promise<void> {
    if (!this.alive) return;
    this.send({ t: "stop" });
    const t = setTimeout(() => this.kill(), 5000);
    await this.exited;
    clearTimeout(t);
  }
}

/** What `until` waits for: a condition on each agent's status, and one over them together. */
interface Condition {
  ok: (s: AgentStatus) => boolean;
  together: (ss: AgentStatus[]) => boolean;
}

/** The latest status of every agent; resolves waits for a condition over all of them. */
export class StatusBoard {
  readonly latest = new Map<number, AgentStatus>();
  /** Per session: when an agent first reported itself its master. */
  readonly masterSince = new Map<string, number>();
  /** Every status received, in order. */
  readonly history: AgentStatus[] = [];
  private waiters: { check: () => boolean; resolve: () => void }[] = [];

  update = (updates: AgentStatus[]): void => {
    for (const u of updates) {
      this.latest.set(u.i, u);
      this.history.push(u);
      if (u.master && u.session !== null && !this.masterSince.has(u.session))
        this.masterSince.set(u.session, u.at);
    }
    this.waiters = this.waiters.filter((w) => {
      if (!w.check()) return true;
      w.resolve();
      return false;
    });
  };

  /**
   * Waits until every agent in `indexes` satisfies `ok` (and `together` holds over them), then
   * returns when the last of them got there: the latest `at` among their statuses.
   */
  async until(
    indexes: readonly number[],
    { ok, together }: Condition,
    timeoutMs: number,
    what: string,
  ): Promise<{ at: number; statuses: AgentStatus[] }> {
    const current = (): AgentStatus[] | undefined => {
      const ss: AgentStatus[] = [];
      for (const i of indexes) {
        const s = this.latest.get(i);
        if (!s || !ok(s)) return undefined;
        ss.push(s);
      }
      return together(ss) ? ss : undefined;
    };
    if (!current()) {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          const bad = indexes.filter((i) => {
            const s = this.latest.get(i);
            return !s || !ok(s);
          });
          const groups = new Map<string, number>();
          for (const i of indexes) {
            const st = this.latest.get(i);
            const k = st
              ? `${st.session?.slice(0, 10)} synced=${st.synced} members=${st.members} clean=${st.clean}${st.master ? " master" : ""}`
              : "no status";
            groups.set(k, (groups.get(k) ?? 0) + 1);
          }
          reject(
            new Error(
              `timed out after ${timeoutMs} ms waiting for ${what}: ${bad.length} not there; ` +
                [...groups].map(([k, c]) => `${c}× ${k}`).join("; "),
            ),
          );
        }, timeoutMs);
        this.waiters.push({
          check: () => current() !== undefined,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
    }
    const ss = current()!;
    return { at: Math.max(...ss.map((s) => s.at)), statuses: ss };
  }
}
