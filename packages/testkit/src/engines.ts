// What a test, as root on the machine, reads off the processes a node started: the processes of a
// binary with their argv (llama-server, ggml-rpc-server), the llama-server listening on a port (to
// kill it, as a crash would), and the API key it was given (LLAMA_API_KEY in its environment).
// Nodes make that key at start and tell it only to bus members, so a test that asks an engine
// directly takes it from the process. Also a llama-server that loads some models slowly.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { managedBuild } from "@ic/engine";

/** Every running process whose program (argv[0]) ends with `binary`, with its argv. */
export function processesOf(binary: string): { pid: number; argv: string[] }[] {
  const out: { pid: number; argv: string[] }[] = [];
  for (const p of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // gone meanwhile
    }
    if (argv[0]?.endsWith(binary)) out.push({ pid: Number(p), argv });
  }
  return out;
}

/** The argument after `flag` in `argv`, if any. */
export function argAfter(argv: readonly string[], flag: string): string | undefined {
  const i = argv.indexOf(flag);
  return i >= 0 ? argv[i + 1] : undefined;
}

/**
 * The pid of the llama-server listening on `host` (an address) and `port`: lab hosts, and test files
 * running side by side, may use the same port. Throws when no such process runs.
 */
export function enginePidOf(port: number | string, host: string): number {
  const found = processesOf("llama-server").find(
    ({ argv }) => argAfter(argv, "--port") === String(port) && argAfter(argv, "--host") === host,
  );
  if (!found) throw new Error(`no llama-server on port ${port} at ${host}`);
  return found.pid;
}

/** The API key of the llama-server on `host` and `port`. Throws when it has none. */
export function engineKeyOf(port: number | string, host: string): string {
  const pid = enginePidOf(port, host);
  const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
  const key = env.find((e) => e.startsWith("LLAMA_API_KEY="))?.slice("LLAMA_API_KEY=".length);
  if (!key) throw new Error(`the llama-server on port ${port} (pid ${pid}) has no API key`);
  return key;
}

/**
 * A llama-server that takes `delayS` seconds longer to load the models whose path contains `match`,
 * without listening meanwhile, as a big model loading would: a script in `dir` in front of the
 * managed build, for tests where a replacement instance must take time to become ready. Give its
 * path as `engine.server_bin` (the values are in the script: engines get a filtered environment).
 */
export function loadDelayEngine(o: { dir: string; delayS: number; match: string }): string {
  const real = managedBuild()?.binaries["llama-server"];
  if (!real) throw new Error("no managed engine build (node scripts/build-engine.mjs makes one)");
  const bin = join(o.dir, "load-delay-llama-server");
  const q = (v: string) => `'${v.replace(/'/g, "'\\''")}'`;
  writeFileSync(
    bin,
    [
      "#!/bin/sh",
      `case "$*" in *${q(o.match)}*) sleep ${Number(o.delayS)} ;; esac`,
      `exec ${q(real)} "$@"`,
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  return bin;
}
