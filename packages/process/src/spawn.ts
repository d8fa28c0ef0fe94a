// The one spawn path for the node's children (nats-server, llama-server, ggml-rpc-server): on Linux the
// child runs under `setpriv --pdeathsig KILL`, so the kernel kills it when the node process dies, and
// in its own process group, so a stop signal sent to the node's group (Ctrl-C, `kill -- -PGID`,
// `tini -g`) reaches only the node, which stops its children when its drain says so.
// Invariants: a child leaves the node's group only when its death signal is armed (otherwise the
// group is its only tie to the node); setpriv execs the program, so the pid (and /proc start time)
// seen here is the program's; the death signal is armed only from the main thread, because the
// kernel sends it when the spawning *thread* exits (a worker thread's child would die with the
// worker) -- elsewhere the orphan sweep is the only safety net; a recorded child's record is removed
// when it is reaped; `exited` never rejects and settles once; stop() is idempotent: SIGTERM, then
// SIGKILL after the grace, resolves on exit. Children still running when this process exits
// normally get SIGTERM (as execa's cleanup).
import { execFileSync, spawn } from "node:child_process";
import type { ChildProcess, StdioOptions } from "node:child_process";
import { accessSync, closeSync, constants, openSync } from "node:fs";
import { delimiter, join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { isMainThread } from "node:worker_threads";
import { recordChild, removeChildRecord } from "./children.ts";

/** Where a stream of the child goes: nowhere, a pipe to us, or appended to a file (no copy through us). */
export type Output = "ignore" | "pipe" | { readonly appendTo: string };

export interface Command {
  readonly bin: string;
  readonly args: readonly string[];
  /** Variables on top of this process's environment, or the whole environment with extendEnv false. */
  readonly env?: Readonly<Record<string, string>> | undefined;
  readonly extendEnv?: boolean;
  readonly stdout?: Output;
  readonly stderr?: Output;
  /**
   * CPU niceness (1-19) the program runs at, through `nice` (so every thread it ever creates has
   * it). Engines run niced: under CPU contention the node's control plane is scheduled first.
   */
  readonly niceness?: number | undefined;
}

export interface ChildExit {
  readonly code: number | undefined;
  readonly signal: string | undefined;
  /** The process could not be started (no pid). */
  readonly error?: string;
}

export interface Child {
  /** The program's pid; undefined when it could not be started. */
  readonly pid: number | undefined;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** Whether the kernel kills it when this process dies (pdeathsig armed). */
  readonly diesWithParent: boolean;
  /** Settles once, when the process has exited and its output pipes are drained; never rejects. */
  readonly exited: Promise<ChildExit>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it has exited. Idempotent. */
  stop(graceMs: number): Promise<ChildExit>;
}

export interface SpawnOptions {
  /** Directory the child is recorded in for the orphan sweep (see children.ts); none: not recorded. */
  readonly recordIn?: string | undefined;
}

const SETPRIV = "/usr/bin/setpriv";
/** coreutils `nice`, when present (without it a niceness request is ignored). */
const NICE = ["/usr/bin/nice", "/bin/nice"].find((p) => {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
});
let setprivWorks: boolean | undefined;

/** Whether children spawned from this thread get a death signal (Linux, util-linux setpriv, main thread). */
export function deathSignalAvailable(): boolean {
  if (setprivWorks === undefined) {
    setprivWorks = false;
    if (process.platform === "linux") {
      try {
        // --pdeathsig exists since util-linux 2.33.
        const help = execFileSync(SETPRIV, ["--help"], {
          encoding: "utf8",
          stdio: ["ignore", "pipe", "ignore"],
        });
        setprivWorks = help.includes("--pdeathsig");
      } catch {
        setprivWorks = false;
      }
    }
  }
  return setprivWorks && isMainThread;
}

/** The file `bin` names, looked up in `path` as spawn would; undefined if there is none. */
function resolveBin(bin: string, path: string | undefined): string | undefined {
  const candidates = bin.includes("/")
    ? [resolve(bin)]
    : (path ?? "")
        .split(delimiter)
        .filter(Boolean)
        .map((d) => join(d, bin));
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // next
    }
  }
  return undefined;
}

const live = new Set<ChildProcess>();
let exitHooked = false;
function track(cp: ChildProcess): void {
  live.add(cp);
  if (exitHooked) return;
  exitHooked = true;
  process.on("exit", () => {
    for (const c of live) c.kill("SIGTERM");
  });
}

/**
 * Starts the program (under setpriv --pdeathsig when the child is to die with this process, at its
 * niceness), its output appended to the files named or piped.
 */
function startProcess(
  cmd: Command,
  program: string | undefined,
  env: Record<string, string | undefined>,
  diesWithParent: boolean,
): ChildProcess {
  const opened = new Map<string, number>();
  const target = (o: Output | undefined): "ignore" | "pipe" | number => {
    if (o === undefined || typeof o === "string") return o ?? "ignore";
    let fd = opened.get(o.appendTo);
    if (fd === undefined) {
      fd = openSync(o.appendTo, "a");
      opened.set(o.appendTo, fd);
    }
    return fd;
  };
  try {
    const stdio: StdioOptions = ["ignore", target(cmd.stdout), target(cmd.stderr)];
    // Each wrapper execs the next: the pid stays the program's.
    const nice =
      cmd.niceness && program !== undefined && NICE ? [NICE, "-n", String(cmd.niceness)] : [];
    const argv = [...nice, cmd.bin, ...cmd.args];
    return diesWithParent
      ? spawn(SETPRIV, ["--pdeathsig", "KILL", "--", ...argv], { env, stdio, detached: true })
      : spawn(argv[0]!, argv.slice(1), { env, stdio });
  } finally {
    // The child holds its own copies of the descriptors.
    for (const fd of opened.values()) closeSync(fd);
  }
}

export function spawnChild(cmd: Command, opts: SpawnOptions = {}): Child {
  const env: Record<string, string | undefined> =
    cmd.extendEnv === false ? { ...cmd.env } : { ...process.env, ...cmd.env };
  const program = resolveBin(cmd.bin, env.PATH ?? process.env.PATH);
  // A missing program is spawned as is, so the failure reads as spawn's own ENOENT.
  const diesWithParent = program !== undefined && deathSignalAvailable();
  const cp = startProcess(cmd, program, env, diesWithParent);
  let recorded = false;
  if (opts.recordIn && cp.pid !== undefined) {
    try {
      recorded = recordChild(opts.recordIn, cp.pid, program ?? cmd.bin);
    } catch {
      recorded = false; // an unwritable directory must not stop the child; only the sweep misses it
    }
  }
  track(cp);
  let exitSeen = false;
  const exited = new Promise<ChildExit>((settle) => {
    let result: ChildExit | undefined;
    let settled = false;
    const finish = (r: ChildExit) => {
      if (settled) return;
      settled = true;
      live.delete(cp);
      settle(r);
    };
    cp.on("error", (e) => {
      if (cp.pid === undefined) finish({ code: undefined, signal: undefined, error: e.message });
    });
    cp.once("exit", (code, signal) => {
      exitSeen = true;
      if (recorded && opts.recordIn) removeChildRecord(opts.recordIn, cp.pid!);
      result = { code: code ?? undefined, signal: signal ?? undefined };
      // Output still in the pipes arrives before 'close'; a grandchild holding them must not hold us.
      setTimeout(() => finish(result!), 500).unref();
    });
    cp.once("close", (code, signal) =>
      finish(result ?? { code: code ?? undefined, signal: signal ?? undefined }),
    );
  });
  let stopping: Promise<ChildExit> | undefined;
  return {
    pid: cp.pid,
    stdout: cp.stdout,
    stderr: cp.stderr,
    diesWithParent,
    exited,
    stop(graceMs: number): Promise<ChildExit> {
      stopping ??= (() => {
        if (!exitSeen && cp.pid !== undefined) {
          cp.kill("SIGTERM");
          const t = setTimeout(() => {
            if (!exitSeen) cp.kill("SIGKILL");
          }, graceMs);
          void exited.then(() => clearTimeout(t));
        }
        return exited;
      })();
      return stopping;
    },
  };
}
