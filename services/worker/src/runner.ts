// Supervises one llama.cpp process of one instance rank: llama-server for rank 0, ggml-rpc-server otherwise.
// Invariants: at most one child per supervisor; a run ends as ready->exited, crashed, or deadline;
// crashes restart with jittered exponential backoff that resets after a healthy uptime; a warmup
// overrun logs a CRITICAL diagnosis and ends in RunnerFailed without restarting; stop() is idempotent
// and leaves no process behind (SIGTERM, then SIGKILL after the grace period). The process writes its
// output straight into its log file (the file is its stdout and stderr), so the engine's per-request
// logging never passes through this node's event loop; failures quote the file's tail.
import { execa } from "execa";
import type { ResultPromise } from "execa";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { open } from "node:fs/promises";
import { dirname } from "node:path";
import { connect as tcpConnect } from "node:net";
import type { RunnerState } from "@ic/protocol";
import type { Logger } from "@ic/log";

export interface RunnerSpec {
  readonly instanceId: string;
  readonly rank: number;
  readonly role: "server" | "rpc";
  readonly bin: string;
  readonly args: readonly string[];
  /** The address the process listens on (the node's own address, never 0.0.0.0). */
  readonly host: string;
  /** The address other nodes use for the endpoint (the node's `node.host`, a name or an IP). */
  readonly advertiseHost?: string;
  readonly port: number;
  /** Variables the process gets on top of the allow-listed ones (see `engineEnvironment`). */
  readonly env?: Readonly<Record<string, string>>;
  readonly warmupDeadlineMs: number;
  readonly restartBackoffMs: number;
  readonly healthyUptimeMs: number;
  /** Consecutive crashes (without a healthy uptime) before the runner is declared failed. */
  readonly maxCrashes: number;
  readonly logFile: string;
  readonly gracefulStopMs?: number;
}

export interface RunnerStatus {
  readonly state: RunnerState;
  readonly reason?: string;
  readonly endpoint?: string;
  readonly restarts: number;
  readonly pid?: number;
}

export type RunOutcome =
  | {
      readonly kind: "exited";
      readonly code: number | undefined;
      readonly signal: string | undefined;
      readonly uptimeMs: number;
    }
  | {
      readonly kind: "crashed";
      readonly code: number | undefined;
      readonly signal: string | undefined;
    }
  | { readonly kind: "deadline" }
  | { readonly kind: "stopped" };

/** Pure: what to do after a run ended. */
export function nextRunnerAction(
  outcome: RunOutcome,
  crashes: number,
  spec: Pick<RunnerSpec, "restartBackoffMs" | "healthyUptimeMs" | "maxCrashes">,
  random: () => number = Math.random,
):
  | { action: "restart"; delayMs: number; crashes: number }
  | { action: "fail"; reason: string }
  | { action: "none" } {
  switch (outcome.kind) {
    case "stopped":
      return { action: "none" };
    case "deadline":
      return { action: "fail", reason: "warmup exceeded its deadline" };
    case "exited":
    case "crashed": {
      const healthy = outcome.kind === "exited" && outcome.uptimeMs >= spec.healthyUptimeMs;
      const n = healthy ? 1 : crashes + 1;
      if (n > spec.maxCrashes) {
        return {
          action: "fail",
          reason: `crashed ${n - 1} times in a row (last exit code ${outcome.code ?? "none"}, signal ${outcome.signal ?? "none"})`,
        };
      }
      const base = spec.restartBackoffMs * 2 ** (n - 1);
      const delayMs = Math.min(30_000, Math.round(base * (0.8 + 0.4 * random())));
      return { action: "restart", delayMs, crashes: n };
    }
  }
}

/** How much of the log file's end a failure message quotes. */
const TAIL_BYTES = 4096;
const TAIL_LINES = 20;

/** The last lines of a log file (at most TAIL_LINES from its last TAIL_BYTES); [] if unreadable. */
export async function logTail(file: string, maxLines = TAIL_LINES): Promise<string[]> {
  let fh;
  try {
    fh = await open(file, "r");
    const { size } = await fh.stat();
    const len = Math.min(size, TAIL_BYTES);
    const buf = Buffer.alloc(len);
    await fh.read(buf, 0, len, size - len);
    const lines = buf.toString("utf8").split("\n").filter(Boolean);
    // The first line may have been cut by the window: dropped unless the whole file fit.
    if (len < size) lines.shift();
    return lines.slice(-maxLines);
  } catch {
    return [];
  } finally {
    await fh?.close();
  }
}

export class RunnerSupervisor implements AsyncDisposable {
  private child: ResultPromise | undefined;
  private status: RunnerStatus = { state: "RunnerWarmingUp", restarts: 0 };
  private stopping = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    readonly spec: RunnerSpec,
    private readonly log: Logger,
    private readonly onStatus: (s: RunnerStatus) => void,
  ) {}

  get current(): RunnerStatus {
    return this.status;
  }
  get endpoint(): string {
    const host = this.spec.advertiseHost ?? this.spec.host;
    return this.spec.role === "server"
      ? `http://${host}:${this.spec.port}`
      : `${host}:${this.spec.port}`;
  }
  /** The last lines the process printed (stdout and stderr), from its log file. */
  recentLog(maxLines = TAIL_LINES): Promise<string[]> {
    return logTail(this.spec.logFile, maxLines);
  }

  start(): void {
    if (this.loop) return;
    mkdirSync(dirname(this.spec.logFile), { recursive: true });
    this.loop = this.run();
  }

  private set(s: RunnerStatus): void {
    this.status = s;
    this.onStatus(s);
  }

  private async run(): Promise<void> {
    let crashes = 0;
    let restarts = 0;
    while (!this.stopping) {
      this.set({ state: "RunnerWarmingUp", restarts, endpoint: this.endpoint });
      const outcome = await this.runOnce(restarts);
      const next = nextRunnerAction(outcome, crashes, this.spec);
      if (next.action === "none") break;
      if (next.action === "fail") {
        if (outcome.kind === "deadline") {
          this.log.fatal(
            {
              instance: this.spec.instanceId,
              rank: this.spec.rank,
              deadline_s: this.spec.warmupDeadlineMs / 1000,
              log_file: this.spec.logFile,
              log_tail: await this.recentLog(),
            },
            `CRITICAL: runner warmup exceeded its deadline of ${this.spec.warmupDeadlineMs / 1000} s; the engine process was stopped. ` +
              "If this node has a GPU, the GPU may be wedged (driver hang or leaked memory): check nvidia-smi and reboot the machine if it does not respond. " +
              "Otherwise raise SERVICE_WARMUP_DEADLINE_SECONDS for very large models.",
          );
        } else {
          this.log.error(
            {
              instance: this.spec.instanceId,
              rank: this.spec.rank,
              reason: next.reason,
              log_file: this.spec.logFile,
              log_tail: await this.recentLog(),
            },
            "runner failed",
          );
        }
        this.set({ state: "RunnerFailed", reason: next.reason, restarts });
        return;
      }
      crashes = next.crashes;
      restarts += 1;
      this.log.warn(
        {
          instance: this.spec.instanceId,
          rank: this.spec.rank,
          outcome: outcome.kind,
          delay_ms: next.delayMs,
          restarts,
          log_file: this.spec.logFile,
          log_tail: await this.recentLog(),
        },
        "runner exited; restarting",
      );
      this.set({
        state: "RunnerWarmingUp",
        reason: `restarting after ${outcome.kind}`,
        restarts,
        endpoint: this.endpoint,
      });
      await this.sleep(next.delayMs);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  private async runOnce(restarts: number): Promise<RunOutcome> {
    const spec = this.spec;
    this.log.info(
      { instance: spec.instanceId, rank: spec.rank, bin: spec.bin, args: spec.args },
      "starting runner",
    );
    // The child gets its own copy of the descriptor; ours is closed once it is spawned. execa's
    // types name only descriptors 1-9, but any integer is handed to spawn() as is (the integration
    // test checks that the output lands in the file).
    const out = openSync(spec.logFile, "a") as 1;
    const options = {
      reject: false,
      // Engines get an allow-listed environment: no HF_TOKEN, cluster secret or other credential.
      extendEnv: false,
      env: engineEnvironment(process.env, spec.env ?? {}),
      stdin: "ignore",
      stdout: out,
      stderr: out,
      forceKillAfterDelay: spec.gracefulStopMs ?? 5000,
      cleanup: true,
    } as const;
    let child: ResultPromise<typeof options>;
    try {
      child = execa(spec.bin, [...spec.args], options);
    } finally {
      closeSync(out);
    }
    this.child = child;
    let exit: { code: number | undefined; signal: string | undefined } | undefined;
    const exited = child.then((r) => {
      exit = { code: r.exitCode, signal: r.signal };
    });
    const started = Date.now();
    const deadline = started + spec.warmupDeadlineMs;
    // Warmup: wait for readiness, exit, deadline or stop.
    for (;;) {
      if (this.stopping) {
        await this.kill(child);
        return { kind: "stopped" };
      }
      if (exit) return { kind: "crashed", ...exit };
      if (Date.now() >= deadline) {
        await this.kill(child);
        return { kind: "deadline" };
      }
      if (await this.ready()) break;
      await Promise.race([exited, new Promise((r) => setTimeout(r, 100))]);
    }
    this.set({
      state: "RunnerReady",
      restarts,
      endpoint: this.endpoint,
      ...(child.pid ? { pid: child.pid } : {}),
    });
    this.log.info(
      { instance: spec.instanceId, rank: spec.rank, warmup_ms: Date.now() - started },
      "runner ready",
    );
    await exited;
    if (this.stopping) return { kind: "stopped" };
    return { kind: "exited", ...exit!, uptimeMs: Date.now() - started };
  }

  private async ready(): Promise<boolean> {
    const { host, port } = this.spec;
    if (this.spec.role === "rpc") return canConnect(host, port);
    try {
      const r = await fetch(`http://${host}:${port}/health`, { signal: AbortSignal.timeout(1000) });
      await r.arrayBuffer();
      return r.status === 200;
    } catch {
      return false;
    }
  }

  private async kill(child: ResultPromise): Promise<void> {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await child;
  }

  /** Stops supervision and the process; resolves when the process is gone. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    if (this.child) await this.kill(this.child);
    await this.loop;
    if (this.status.state !== "RunnerFailed")
      this.set({ state: "RunnerStopped", restarts: this.status.restarts });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** Variables an engine may inherit: locale, paths and the GPU runtime's own settings. */
const ENGINE_ENV_ALLOWED =
  /^(PATH|HOME|USER|LANG|LANGUAGE|TZ|TMPDIR|LD_LIBRARY_PATH|LC_[A-Z]+|CUDA_[A-Z_]+|NVIDIA_[A-Z_]+|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|GGML_[A-Z_]+|OMP_[A-Z_]+)$/;

/** Pure: the environment of an engine process, from the node's environment and the runner's own. */
export function engineEnvironment(
  parent: NodeJS.ProcessEnv,
  own: Readonly<Record<string, string>>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(parent))
    if (v !== undefined && ENGINE_ENV_ALLOWED.test(k)) out[k] = v;
  return { ...out, ...own };
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tcpConnect({ host, port });
    s.setTimeout(1000, () => {
      s.destroy();
      resolve(false);
    });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}
