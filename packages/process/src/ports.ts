// Free loopback ports and polling: the local-cluster launcher, the engine probe and (through @ic/testkit) tests.
// The kernel picks a port for a throwaway listener; reserved ones are never handed out twice in a process.
import { createServer, connect as tcpConnect } from "node:net";

const handedOut = new Set<number>();

export async function freePort(host = "127.0.0.1"): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await new Promise<number>((resolve, reject) => {
      const srv = createServer();
      srv.once("error", reject);
      srv.listen(0, host, () => {
        const addr = srv.address();
        const p = typeof addr === "object" && addr ? addr.port : 0;
        srv.close(() => resolve(p));
      });
    });
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error("no free port found");
}

export async function freePorts(n: number, host = "127.0.0.1"): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await freePort(host));
  return out;
}

/** Polls `check` until it returns a value other than undefined, or throws after `timeoutMs`. */
export async function waitFor<T>(
  check: () => Promise<T | undefined> | T | undefined,
  opts: { timeoutMs: number; intervalMs?: number; what?: string },
): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
  throw new Error(
    `timed out after ${opts.timeoutMs} ms waiting for ${opts.what ?? "condition"}${last ? `: ${String(last)}` : ""}`,
  );
}

/** Whether a TCP connection to host:port opens within a second (a listener's readiness check). */
export function canConnect(host: string, port: number): Promise<boolean> {
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
