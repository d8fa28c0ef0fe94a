// The node process itself (forked by main.ts, the supervisor): loads the config, starts the node and
// stops it on a signal. SIGTERM/SIGINT drain the node (node.drain_timeout_ms; a second signal at
// least a second later cuts it short), then stop it in reverse start order under a grace timeout. A
// signal sent to the process group reaches both processes: the node counts it and the supervisor's
// forward as one request (stop-requests.ts), and its children run in groups of their own (@ic/process
// spawn). Exit code RESTART_EXIT_CODE asks the supervisor for a fresh process image.
import { resolve } from "node:path";
import { loadConfig, ConfigError, expandHome } from "@ic/config";
import type { Config } from "@ic/config";
import { createLogger, guardProcess } from "@ic/log";
import type { Logger } from "@ic/log";
import { Node } from "./node.ts";
import { parseNodeArgs } from "./node-args.ts";
import { StopRequests } from "./stop-requests.ts";
import { RESTART_EXIT_CODE } from "./restart-code.ts";

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

// Arguments were checked by the supervisor (main.ts) before it forked this process.
const args = parseNodeArgs(process.argv.slice(2));
if (args.kind === "run") void runNode(args.config);
