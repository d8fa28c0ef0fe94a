// The clients of bench/cluster-chat: closed loops of non-streaming chat requests over keep-alive
// HTTPS connections, `perTarget` at once on each target (a gateway, or an engine for the baseline),
// for a fixed time. Each request's latency is kept; a failed request counts and is reported.
import { Agent, request } from "node:https";
import { performance } from "node:perf_hooks";
import { createSecureContext } from "node:tls";

export interface Target {
  /** https://address:port */
  readonly url: string;
  readonly headers: Record<string, string>;
}

export interface LoadResult {
  readonly ok: number;
  readonly failed: number;
  /** First failures' status and body (a few). */
  readonly failures: string[];
  readonly seconds: number;
  /** Latencies of the requests that succeeded, ms, sorted. */
  readonly latencies: number[];
  /** CPU this process spent driving the load, ms. */
  readonly clientCpuMs: number;
}

function post(
  agent: Agent,
  target: URL,
  headers: Record<string, string>,
  body: string,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent,
        host: target.hostname,
        port: target.port,
        path: "/v1/chat/completions",
        method: "POST",
        headers: {
          ...headers,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
        },
      },
      (res) => {
        const parts: Buffer[] = [];
        res.on("data", (c: Buffer) => parts.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString() }),
        );
        res.on("error", reject);
      },
    );
    req.setNoDelay(true);
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * Runs `perTarget` closed loops against each target for `seconds`; `ca` is the cluster CA the
 * targets' certificates are signed by.
 */
export async function closedLoop(o: {
  targets: readonly Target[];
  perTarget: number;
  seconds: number;
  model: string;
  maxTokens: number;
  ca: string;
}): Promise<LoadResult> {
  // Each request its own conversation (its first message differs), as many clients would send:
  // prefix routing then spreads them over the replicas instead of keeping one conversation on one.
  let seq = 0;
  const bodyOf = () =>
    JSON.stringify({
      model: o.model,
      messages: [{ role: "user", content: `hi ${++seq}` }],
      max_tokens: o.maxTokens,
    });
  const lat: number[] = [];
  const failures: string[] = [];
  let failed = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const end = t0 + o.seconds * 1000;
  const agents: Agent[] = [];
  const secureContext = createSecureContext({ ca: o.ca });
  await Promise.all(
    o.targets.flatMap((t) => {
      const agent = new Agent({ keepAlive: true, maxSockets: o.perTarget, secureContext });
      agents.push(agent);
      const url = new URL(t.url);
      return Array.from({ length: o.perTarget }, async () => {
        while (performance.now() < end) {
          const s = performance.now();
          try {
            const r = await post(agent, url, t.headers, bodyOf());
            if (r.status === 200) lat.push(performance.now() - s);
            else {
              failed++;
              if (failures.length < 5) failures.push(`${r.status} ${r.text.slice(0, 200)}`);
            }
          } catch (e) {
            failed++;
            if (failures.length < 5) failures.push(String(e));
          }
        }
      });
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  for (const a of agents) a.destroy();
  return {
    ok: lat.length,
    failed,
    failures,
    seconds,
    latencies: lat.sort((a, b) => a - b),
    clientCpuMs: (cpu.user + cpu.system) / 1000,
  };
}
