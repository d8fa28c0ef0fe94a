// Supervises one llama.cpp process of one instance rank (llama-server for rank 0, ggml-rpc-server
// otherwise) on the shared supervisor loop (@ic/process).
// Invariants: at most one child per supervisor and one decision per run; a run ends as ready->exited,
// crashed, deadline or stopped; crashes restart with jittered exponential backoff that resets after a
// healthy uptime (measured from readiness); more than maxCrashes in a row, or a warmup overrun (which
// logs a CRITICAL diagnosis), ends in RunnerFailed without restarting; stop() is idempotent and
// leaves no process behind (SIGTERM, then SIGKILL after the grace period). The process dies with the
// node (pdeathsig) and is recorded for the orphan sweep. It writes its output straight into its log
// file (the file is its stdout and stderr), so the engine's per-request logging never passes through
// this node's event loop; failures quote the file's tail.
import { mkdirSync } from "node:fs";
import { open } from "node:fs/promises";
import { dirname } from "node:path";
import { canConnect, childrenDir, nextAction, supervise } from "@ic/process";
import type { NextAction, RestartPolicy, RunOutcome } from "@ic/process";
import type { RunnerState } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { lastError } from "@ic/engine";

export type { RunOutcome } from "@ic/process";

export interface RunnerSpec {
  readonly instanceId: string;
  /** The model it serves (for log lines a person reads). */
  readonly modelId?: string;
  readonly rank: number;
  readonly role: "server" | "rpc";
  readonly bin: string;
  readonly args: readonly string[];
  /** The address the process listens on (the node's own address, never 0.0.0.0). */
  readonly host: string;
  /** The address other nodes use for the endpoint (the node's `node.host`, a name or an IP). */
  readonly advertiseHost?: string;
  readonly port: number;
  /** llama-server serves HTTPS (`--ssl-*-file` in args): the endpoint and readiness probe use it. */
  readonly tls?: boolean;
  /** Variables the process gets on top of the allow-listed ones (see `engineEnvironment`). */
  readonly env?: Readonly<Record<string, string>>;
  readonly warmupDeadlineMs: number;
  readonly restartBackoffMs: number;
  readonly healthyUptimeMs: number;
  /** Consecutive crashes (without a healthy uptime) before the runner is declared failed. */
  readonly maxCrashes: number;
  readonly logFile: string;
  /** CPU niceness of the engine process (config `engine.niceness`; 0 or absent: not niced). */
  readonly niceness?: number;
  readonly gracefulStopMs?: number;
  /**
   * Where the process is recorded for the orphan sweep; by default `children/` beside the log file,
   * i.e. `childrenDir(engine.runner_log_dir)`, the directory the node sweeps at start.
   */
  readonly childrenDir?: string;
}

export interface RunnerStatus {
  readonly state: RunnerState;
  readonly reason?: string;
  readonly endpoint?: string;
  readonly restarts: number;
  readonly pid?: number;
  /** The engine's last error line (its log), after it exited; cleared once it runs again. */
  readonly lastError?: string;
}

/** The restart policy of a runner: backoff up to 30 s, a warmup overrun is final. */
function runnerPolicy(
  spec: Pick<RunnerSpec, "restartBackoffMs" | "healthyUptimeMs" | "maxCrashes">,
): RestartPolicy {
  return {
    backoffMs: spec.restartBackoffMs,
    maxBackoffMs: 30_000,
    healthyUptimeMs: spec.healthyUptimeMs,
    maxCrashes: spec.maxCrashes,
    onDeadline: "fail",
    firstRunMustBeReady: false,
  };
}

/** Pure: what to do after a run ended (the shared decision under the runner's policy). */
export function nextRunnerAction(
  outcome: RunOutcome,
  crashes: number,
  spec: Pick<RunnerSpec, "restartBackoffMs" | "healthyUptimeMs" | "maxCrashes">,
  random: () => number = Math.random,
): NextAction {
  return nextAction(outcome, { crashes, everReady: true }, runnerPolicy(spec), random);
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

/** What a failure message quotes of the runner's log: its last lines, and its last error line. */
interface RecentLog {
  tail: string[];
  errorLine: string;
}

export class RunnerSupervisor implements AsyncDisposable {
  private status: RunnerStatus = { state: "RunnerWarmingUp", restarts: 0 };
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;

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
      ? `${this.spec.tls ? "https" : "http"}://${host}:${this.spec.port}`
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
    const spec = this.spec;
    const who = { model: spec.modelId, instance: spec.instanceId, rank: spec.rank };
    let restarts = 0;
    let lastErrorLine: string | undefined;
    await supervise({
      signal: this.abort.signal,
      command: () => {
        this.set({
          state: "RunnerWarmingUp",
          restarts,
          endpoint: this.endpoint,
          ...(lastErrorLine ? { lastError: lastErrorLine } : {}),
        });
        this.log.info({ ...who, bin: spec.bin, args: spec.args }, "starting runner");
        return {
          bin: spec.bin,
          args: spec.args,
          // Engines get an allow-listed environment: no HF_TOKEN, cluster secret or other credential.
          env: engineEnvironment(process.env, spec.env ?? {}),
          extendEnv: false,
          stdout: { appendTo: spec.logFile },
          stderr: { appendTo: spec.logFile },
          niceness: spec.niceness,
        };
      },
      recordIn: spec.childrenDir ?? childrenDir(dirname(spec.logFile)),
      ready: () => this.ready(),
      readyPollMs: 100,
      readyDeadlineMs: spec.warmupDeadlineMs,
      stopGraceMs: spec.gracefulStopMs ?? 5000,
      policy: runnerPolicy(spec),
      onReady: (child, { warmupMs }) => {
        lastErrorLine = undefined;
        this.set({
          state: "RunnerReady",
          restarts,
          endpoint: this.endpoint,
          ...(child.pid ? { pid: child.pid } : {}),
        });
        this.log.info({ ...who, warmup_ms: warmupMs }, "runner ready");
      },
      onOutcome: async (outcome, next) => {
        if (next.action === "none") return;
        const tail = await this.recentLog();
        lastErrorLine = lastError(tail.join("\n"));
        if (next.action === "fail") {
          await this.failed(outcome, next.reason, restarts, { tail, errorLine: lastErrorLine });
          return;
        }
        restarts += 1;
        this.log.warn(
          {
            ...who,
            outcome: outcome.kind,
            delay_ms: next.delayMs,
            restarts,
            error: lastErrorLine,
            log_file: spec.logFile,
            log_tail: tail,
          },
          "runner exited; restarting",
        );
        this.set({
          state: "RunnerWarmingUp",
          reason: `restarting after ${outcome.kind}`,
          restarts,
          endpoint: this.endpoint,
          lastError: lastErrorLine,
        });
      },
    });
  }

  private async failed(
    outcome: RunOutcome,
    reason: string,
    restarts: number,
    { tail, errorLine }: RecentLog,
  ): Promise<void> {
    const spec = this.spec;
    const who = { model: spec.modelId, instance: spec.instanceId, rank: spec.rank };
    if (outcome.kind === "deadline") {
      this.log.fatal(
        {
          ...who,
          deadline_s: spec.warmupDeadlineMs / 1000,
          error: errorLine,
          log_file: spec.logFile,
          log_tail: tail,
        },
        `CRITICAL: runner warmup exceeded its deadline of ${spec.warmupDeadlineMs / 1000} s; the engine process was stopped. ` +
          "If this node has a GPU, the GPU may be wedged (driver hang or leaked memory): check nvidia-smi and reboot the machine if it does not respond. " +
          "Otherwise raise SERVICE_WARMUP_DEADLINE_SECONDS for very large models.",
      );
    } else {
      this.log.error(
        { ...who, reason, error: errorLine, log_file: spec.logFile, log_tail: tail },
        "runner failed",
      );
    }
    this.set({ state: "RunnerFailed", reason, restarts, lastError: errorLine });
  }

  private async ready(): Promise<boolean> {
    const { host, port } = this.spec;
    if (this.spec.role === "rpc") return canConnect(host, port);
    // Over TLS through the advertised name, the one the node's certificate is made for.
    const url = this.spec.tls ? `${this.endpoint}/health` : `http://${host}:${port}/health`;
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await r.arrayBuffer();
      return r.status === 200;
    } catch {
      return false;
    }
  }

  /** Stops supervision and the process; resolves when the process is gone. */
  async stop(): Promise<void> {
    this.abort.abort();
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
