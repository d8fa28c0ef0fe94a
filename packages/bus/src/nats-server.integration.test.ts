// The nats-server supervisor against a fake nats-server binary (a shell script): one restart per
// death, no background restarts after a failed first start, no process left behind.
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { NatsServer } from "./index.ts";
import type { NatsServerOptions } from "./index.ts";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/**
 * A fake nats-server: every start appends a line to `spawns`. With `serveFirstMs`, the first start
 * serves like nats-server (listens, writes the ports file) and exits after that long; every later
 * start -- or every start without it -- exits at once, i.e. it dies during startup.
 */
function fakeNatsServer(serveFirstMs?: number): { bin: string; spawns: () => number } {
  const dir = mkdtempSync(join(tmpdir(), "fake-nats-"));
  dirs.push(dir);
  const serve = join(dir, "serve.mjs");
  writeFileSync(
    serve,
    `import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
const conf = readFileSync(process.argv[process.argv.indexOf("-c") + 1], "utf8");
const portsDir = JSON.parse(/^ports_file_dir: (".*")$/m.exec(conf)[1]);
const listen = JSON.parse(/^listen: (".*")$/m.exec(conf)[1]);
const host = listen.slice(0, listen.lastIndexOf(":"));
const port = Number(listen.slice(listen.lastIndexOf(":") + 1));
const srv = createServer((s) => s.destroy()).listen(port < 0 ? 0 : port, host, () => {
  const url = "nats://" + host + ":" + srv.address().port;
  writeFileSync(join(portsDir, "fake_" + process.pid + ".ports"), JSON.stringify({ nats: [url] }));
});
setTimeout(() => process.exit(1), ${serveFirstMs ?? 0});
`,
  );
  const bin = join(dir, "nats-server");
  const q = (s: string) => `'${s}'`;
  writeFileSync(
    bin,
    `#!/bin/sh
echo spawn >> ${q(join(dir, "spawns"))}
${serveFirstMs === undefined ? "" : `if [ ! -e ${q(join(dir, "served"))} ]; then : > ${q(join(dir, "served"))}; exec ${q(process.execPath)} ${q(serve)} "$@"; fi`}
echo "[FTL] fake nats-server: dying during startup" >&2
exit 1
`,
  );
  chmodSync(bin, 0o755);
  const file = join(dir, "spawns");
  return {
    bin,
    spawns: () =>
      existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean).length : 0,
  };
}

function server(o: Partial<NatsServerOptions>): NatsServer {
  return new NatsServer({
    bind: "127.0.0.1",
    host: "127.0.0.1",
    clientBind: "127.0.0.1",
    clientPort: 0,
    clusterPort: 0,
    clusterName: "t",
    routes: [],
    clientAuth: { user: "u", password: "p" },
    routeAuth: { user: "r", password: "p" },
    log: silentLogger(),
    ...o,
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The most starts one supervisor can make in `windowMs` after a death: each restart waits its own
 * backoff (base * 2^(n-1), at least 80% of it with jitter), one after another.
 */
function maxStarts(baseMs: number, windowMs: number): number {
  let n = 0;
  let t = 0;
  while ((t += 0.8 * baseMs * 2 ** n) <= windowMs) n++;
  return n;
}

describe("NatsServer supervision with a fake nats-server", () => {
  it("restarts a server that keeps dying during startup once per death, with growing backoff", async () => {
    const fake = fakeNatsServer(300);
    const s = server({ bin: fake.bin, restartBackoffMs: 50 });
    await s.start();
    expect(fake.spawns()).toBe(1);
    // The first run dies after 300 ms; every restart dies during startup.
    await sleep(300 + 2200);
    await s.stop();
    const spawns = fake.spawns();
    // A single loop: at most one restart per death. (Two per death grows as 2^n: ~20 here.)
    expect(spawns - 1).toBeLessThanOrEqual(maxStarts(50, 2200));
    expect(spawns - 1).toBeGreaterThanOrEqual(3);
    // Every restart counted was spawned, but for one that stop() cut short in its backoff.
    expect(s.status.restarts - (spawns - 1)).toBeGreaterThanOrEqual(0);
    expect(s.status.restarts - (spawns - 1)).toBeLessThanOrEqual(1);
    expect(s.status.state).toBe("stopped");
  });

  it("a server that dies during its first start fails start() and is not restarted behind it", async () => {
    const fake = fakeNatsServer();
    const s = server({ bin: fake.bin, restartBackoffMs: 20 });
    await expect(s.start()).rejects.toThrow(/exited during startup.*dying during startup/s);
    await sleep(1000);
    expect(fake.spawns()).toBe(1);
    await s.stop();
  });
});
