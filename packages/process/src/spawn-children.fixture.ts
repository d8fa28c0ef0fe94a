// Test fixture (run with `node --import tsx`): spawns `sleep` children through spawnChild, prints
// {"pid", "children": [{pid, diesWithParent}]} as one line, then keeps the libuv thread pool busy
// until it is killed (SIGTERM and SIGINT are ignored). Args: <record dir> <count>
// [worker|worker-setpriv] -- with `worker`, the children are spawned from a worker thread that exits
// right after; `worker-setpriv` does the same with a bare `setpriv --pdeathsig KILL` (what spawnChild
// refuses to do off the main thread).
import { spawn } from "node:child_process";
import { pbkdf2 } from "node:crypto";
import { readFile } from "node:fs/promises";
import { lookup } from "node:dns/promises";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { spawnChild } from "./index.ts";

interface Spawned {
  pid: number | undefined;
  diesWithParent: boolean;
}

function spawnSleepers(dir: string, count: number, bareSetpriv: boolean): Spawned[] {
  return Array.from({ length: count }, () => {
    if (bareSetpriv) {
      const p = spawn("setpriv", ["--pdeathsig", "KILL", "--", "sleep", "1000"], {
        stdio: "ignore",
      });
      return { pid: p.pid, diesWithParent: true };
    }
    const c = spawnChild({ bin: "sleep", args: ["1000"] }, { recordIn: dir });
    return { pid: c.pid, diesWithParent: c.diesWithParent };
  });
}

/** Work that runs on libuv's pool threads (fs, dns, crypto): children must not die with those. */
function keepPoolBusy(): void {
  setInterval(() => {
    void readFile("/proc/self/stat").catch(() => {});
    void lookup("localhost").catch(() => {});
    pbkdf2("x", "y", 1000, 32, "sha256", () => {});
  }, 20);
}

if (!isMainThread) {
  const { dir, count, bare } = workerData as { dir: string; count: number; bare: boolean };
  parentPort!.postMessage(spawnSleepers(dir, count, bare));
} else {
  const [dir, count, mode] = process.argv.slice(2);
  const n = Number(count ?? "1");
  let children: Spawned[];
  if (mode === "worker" || mode === "worker-setpriv") {
    // A worker does not inherit the tsx loader: it registers it, then loads this file.
    const boot = `import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))})
      .then((m) => m.register())
      .then(() => import(${JSON.stringify(import.meta.url)}));`;
    const w = new Worker(boot, {
      eval: true,
      workerData: { dir, count: n, bare: mode === "worker-setpriv" },
    });
    children = await new Promise<Spawned[]>((resolve) => w.once("message", resolve));
    await w.terminate(); // the spawning thread is gone; its children's handles would keep it alive
  } else {
    children = spawnSleepers(dir!, n, false);
  }
  // A stop signal is the node's to act on (it is ignored here): its children must not see it.
  process.on("SIGTERM", () => {});
  process.on("SIGINT", () => {});
  process.stdout.write(`${JSON.stringify({ pid: process.pid, children })}\n`);
  keepPoolBusy();
}
