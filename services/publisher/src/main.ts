// Entry point of `npm run publisher`: environment -> config, one pino root, the server on 127.0.0.1.
// SIGTERM/SIGINT stop it under a grace timeout.
import { createLogger } from "@ic/log";
import { ConfigError, loadConfig } from "./config.ts";
import { PublisherServer } from "./server.ts";

const GRACE_MS = 10_000;

async function main(): Promise<void> {
  const bootLog = createLogger({ enabled: true, base: { pid: process.pid, service: "publisher" } });
  let config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      bootLog.fatal({ err: err.message }, "invalid configuration");
      process.exitCode = 1;
      return;
    }
    throw err;
  }
  const base = { pid: process.pid, service: "publisher" };
  const server = new PublisherServer({
    config,
    log: (scrub) => createLogger({ enabled: true, level: config.logLevel, base, scrub }),
    envToken: process.env["HF_TOKEN"],
  });
  const log = server.logger;
  await server.start();
  const shutdown = (signal: string): void => {
    log.info({ signal }, "shutting down");
    const timer = setTimeout(() => {
      log.error("shutdown grace period exceeded; exiting");
      process.exit(1);
    }, GRACE_MS);
    timer.unref();
    void server.stop().then(() => process.exit(0));
  };
  process.once("SIGTERM", () => shutdown("SIGTERM"));
  process.once("SIGINT", () => shutdown("SIGINT"));
}

main().catch((err: unknown) => {
  createLogger({ enabled: true }).fatal(
    { err: err instanceof Error ? err.message : String(err) },
    "publisher failed to start",
  );
  process.exit(1);
});
