// Process entry of a node. The outer process supervises an inner one that runs the node: a restart
// request (POST /admin/restart) makes the inner process stop everything (runners, nats-server -- releasing
// GPU memory) and exit with RESTART_EXIT_CODE, and the outer process starts a fresh image at once.
// SIGTERM/SIGINT drain the node (node.drain_timeout_ms; a second signal at least a second later cuts
// it short), then stop it in reverse start order under a grace timeout. A signal sent to the process
// group reaches both processes: the node counts it and the supervisor's forward as one request
// (stop-requests.ts), and its children run in groups of their own (@ic/process spawn).
import { fork } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";
import { loadConfig, ConfigError, expandHome } from "@ic/config";
import type { Config } from "@ic/config";
import { createLogger, guardProcess } from "@ic/log";
import type { Logger } from "@ic/log";
import { Node } from "./node.ts";
import { NODE_USAGE, parseNodeArgs } from "./node-args.ts";
import { StopRequests } from "./stop-requests.ts";

export const RESTART_EXIT_CODE = 75;
const GRACE_MS = 15_000;

async function runNode(configFile: string | undefined): Promise<void> {
  const file = configFile ?? process.env.SERVICE_CONFIG;
  const config = configOrExit(file);
  const log = createLogger({
    enabled: config.logging.enabled,
    level: config.logging.level,
    ingestUrl: config.logging.ingest_url,
    base: { pid: process.pid },
  });
  // A rejection nobody handled is logged and counted, and the node keeps serving; an uncaught
  // exception ends the process (docs/decisions.md, "What still ends a node").
  const guard = guardProcess(log);
  let exitCode = 0;
  let stopping = false;
  let draining = false;
  const node = new Node({
    config,
    configFile: file ? resolve(expandHome(file)) : undefined,
    log,
    unhandledRejections: guard.rejections,
    onRestartRequested: () => void shutdown(RESTART_EXIT_CODE, "restart requested"),
    onDrainRequested: () => void shutdown(0, "drain requested", true),
  });
  /** `drain`: a planned stop (SIGTERM, SIGINT, POST /admin/drain) lets requests in flight end first. */
  async function shutdown(code: number, why: string, drain = false): Promise<void> {
    if (stopping) {
      // A second stop request while draining: stop now.
      if (draining) {
        log.info({ why }, "second stop request while draining: stopping now");
        node.cancelDrain();
      }
      return;
    }
    stopping = true;
    exitCode = code;
    log.info({ why }, drain ? "node draining, then stopping" : "node stopping");
    if (drain) {
      draining = true;
      await node.drain();
      draining = false;
    }
    const timer = setTimeout(() => {
      log.error("graceful stop timed out; exiting");
      process.exit(code || 1);
    }, GRACE_MS);
    await node.stop();
    clearTimeout(timer);
    log.info("node stopped");
    log.flush();
    process.exit(exitCode);
  }
  onSignals(node, log, shutdown);
  try {
    await node.start();
  } catch (e) {
    log.fatal({ err: e }, "node failed to start");
    await node.stop();
    process.exit(1);
  }
  process.send?.({
    type: "started",
    api_url: node.apiUrl,
    peer_key: node.peerKey,
    nats_url: node.natsUrl,
  });
}

/** The config the node runs with; a config that does not load ends the process with code 2. */
function configOrExit(file: string | undefined): Config {
  try {
    return loadConfig({ file });
  } catch (e) {
    process.stderr.write(`${e instanceof ConfigError ? e.message : String(e)}\n`);
    process.exit(2);
  }
}

/**
 * SIGTERM and SIGINT drain, then stop (one request however many copies of the signal arrive within
 * a second); the supervisor going away stops. SIGHUP reads the API tokens
 * from the config file again, nothing else (reload.ts); a refused reload keeps the tokens in force
 * and says why in the log.
 */
function onSignals(
  node: Node,
  log: Logger,
  shutdown: (code: number, why: string, drain?: boolean) => Promise<void>,
): void {
  const stops = new StopRequests();
  const onStop = (sig: NodeJS.Signals) => {
    if (stops.take(Date.now()) === "duplicate") {
      log.info(
        { signal: sig },
        "stop signal repeated within a second (sent to the process group): one stop",
      );
      return;
    }
    void shutdown(0, sig, true);
  };
  process.on("SIGTERM", () => onStop("SIGTERM"));
  process.on("SIGINT", () => onStop("SIGINT"));
  process.on("disconnect", () => void shutdown(0, "supervisor gone"));
  process.on("SIGHUP", () => {
    node
      .reloadTokens()
      .catch((e: unknown) =>
        log.warn({ err: e instanceof Error ? e.message : String(e) }, "SIGHUP reload refused"),
      );
  });
}

function supervise(): void {
  let child: ChildProcess | undefined;
  let stopping = false;
  const start = () => {
    child = fork(fileURLToPath(import.meta.url), process.argv.slice(2), {
      env: { ...process.env, IC_NODE_CHILD: "1" },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    child.on("message", (m) => process.send?.(m));
    child.on("exit", (code, signal) => {
      if (!stopping && code === RESTART_EXIT_CODE) {
        start();
        return;
      }
      process.exit(code ?? (signal ? 1 : 0));
    });
  };
  // Forwarded as it comes: when the signal went to the whole group the node has its own copy too,
  // and counts the two as one stop request.
  const forward = (sig: NodeJS.Signals) => {
    stopping = true;
    child?.kill(sig);
  };
  process.on("SIGTERM", () => forward("SIGTERM"));
  process.on("SIGINT", () => forward("SIGINT"));
  // A reload goes to the node as it is; the supervisor keeps running.
  process.on("SIGHUP", () => child?.kill("SIGHUP"));
  start();
}

const args = parseNodeArgs(process.argv.slice(2));
if (args.kind === "help") {
  process.stdout.write(`${NODE_USAGE}\n`);
  process.exit(0);
} else if (args.kind === "error") {
  process.stderr.write(`node: ${args.message} (see --help)\n`);
  process.exit(2);
} else if (process.env.IC_NODE_CHILD === "1") void runNode(args.config);
else supervise();
