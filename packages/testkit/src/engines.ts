// What a test, as root on the machine, reads off the engines a node started: the llama-server
// listening on a port (to kill it, as a crash would), and the API key it was given (LLAMA_API_KEY
// in its environment). Nodes make that key at start and tell it only to bus members, so a test that
// asks an engine directly takes it from the process.
import { readdirSync, readFileSync } from "node:fs";

/**
 * The pid of the llama-server listening on `port` (and on `host`, an address, when given: lab hosts
 * may use the same port). Throws when no such process runs.
 */
export function enginePidOf(port: number | string, host?: string): number {
  for (const p of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
    } catch {
      continue;
    }
    if (!argv[0]?.endsWith("llama-server")) continue;
    if (argv[argv.indexOf("--port") + 1] !== String(port)) continue;
    if (host !== undefined && argv[argv.indexOf("--host") + 1] !== host) continue;
    return Number(p);
  }
  throw new Error(`no llama-server on port ${port}${host ? ` at ${host}` : ""}`);
}

/** The API key of the llama-server on `port` (and `host`). Throws when it has none. */
export function engineKeyOf(port: number | string, host?: string): string {
  const pid = enginePidOf(port, host);
  const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
  const key = env.find((e) => e.startsWith("LLAMA_API_KEY="))?.slice("LLAMA_API_KEY=".length);
  if (!key) throw new Error(`the llama-server on port ${port} (pid ${pid}) has no API key`);
  return key;
}
