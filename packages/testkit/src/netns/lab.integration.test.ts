// Proves the multi-host harness with real sockets: name resolution, reachability, link faults,
// bandwidth limits, the delay relay and leak-free teardown (including a crashed run's leftovers).
import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../cluster.ts";
import { waitFor } from "../ports.ts";
import { DelayRelay } from "./delay-relay.ts";
import { NETLAB_PREFIX, NETLAB_STATE_DIR, NetLab } from "./lab.ts";

const ECHO_PORT = 7000;
const BLOB_PORT = 7001;
const BLOB_BYTES = 2 * 1024 * 1024;
const PROBE_TIMEOUT_MS = 1000;

/** Runs inside a host: an echo server and a server that sends BLOB_BYTES and closes. */
const SERVER_JS = `
const net = require("node:net");
const host = process.argv[1];
const blob = Buffer.alloc(${BLOB_BYTES}, 120);
let up = 0;
const ready = () => { if (++up === 2) process.stdout.write("ready\\n"); };
net.createServer((s) => s.pipe(s)).listen(${ECHO_PORT}, host, ready);
net.createServer((s) => s.end(blob)).listen(${BLOB_PORT}, host, ready);
`;

/** Runs inside a host: connects, expects its "ping" echoed, prints ok or fail:<why>. */
const PROBE_JS = `
const net = require("node:net");
const [host, port, timeoutMs] = process.argv.slice(1);
const s = net.connect(Number(port), host);
const done = (r) => { process.stdout.write(r); process.exit(0); };
s.setTimeout(Number(timeoutMs), () => done("fail:timeout"));
s.on("connect", () => s.write("ping"));
s.on("data", (d) => String(d) === "ping" && done("ok"));
s.on("error", (e) => done("fail:" + e.code));
`;

/** The same probe from the test process (the root namespace). */
function probe(host: string, port: number, timeoutMs = PROBE_TIMEOUT_MS): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(port, host);
    const done = (r: string) => {
      s.destroy();
      resolve(r);
    };
    s.setTimeout(timeoutMs, () => done("fail:timeout"));
    s.on("connect", () => s.write("ping"));
    s.on("data", (d) => String(d) === "ping" && done("ok"));
    s.on("error", (e: NodeJS.ErrnoException) => done(`fail:${e.code}`));
  });
}

async function probeFrom(lab: NetLab, from: string, host: string, port = ECHO_PORT) {
  return lab.run(from, process.execPath, ["-e", PROBE_JS, host, String(port), "1000"]);
}

async function startServers(lab: NetLab, hostName: string): Promise<ChildProcess> {
  const [cmd = "", ...args] = lab.execArgs(hostName, process.execPath, [
    "-e",
    SERVER_JS,
    lab.host(hostName).address,
  ]);
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => {
      if (String(d).includes("ready")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`server in ${hostName} exited with ${code}`)));
  });
  return child;
}

/** Milliseconds to download the blob from host:BLOB_PORT. */
function timeBlob(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let n = 0;
    const s = connect(BLOB_PORT, host);
    s.on("data", (d: Buffer) => (n += d.length));
    s.on("end", () =>
      n === BLOB_BYTES ? resolve(performance.now() - t0) : reject(new Error(`got ${n} bytes`)),
    );
    s.on("error", reject);
  });
}

/** Milliseconds for one echoed byte through `host:port`, on an open connection. */
async function echoRoundTrips(host: string, port: number, count: number): Promise<number[]> {
  const s = connect(port, host);
  s.setNoDelay(true);
  await new Promise<void>((resolve, reject) => s.once("connect", resolve).once("error", reject));
  const rtts: number[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      const echoed = new Promise<void>((resolve) => s.once("data", () => resolve()));
      s.write("x");
      await echoed;
      rtts.push(performance.now() - t0);
    }
  } finally {
    s.destroy();
  }
  return rtts;
}

function rootState(): { netns: string; links: string } {
  const run = (args: string[]) => spawnSync("ip", args, { encoding: "utf8" }).stdout;
  return { netns: run(["netns", "list"]), links: run(["-o", "link", "show"]) };
}

describe("NetLab", () => {
  let lab: NetLab;

  beforeAll(async () => {
    lab = await NetLab.create({ hosts: 3 });
    await startServers(lab, "node-2");
  });
  afterAll(async () => {
    await lab?.dispose();
  });

  it("gives every host its own namespace and address, and they resolve each other by name", async () => {
    expect(lab.hosts.map((h) => h.name)).toEqual(["node-1", "node-2", "node-3"]);
    expect(new Set(lab.hosts.map((h) => h.address)).size).toBe(3);
    for (const h of lab.hosts) {
      expect(h.ifname.length).toBeLessThanOrEqual(15);
      expect(h.bridgeIfname.length).toBeLessThanOrEqual(15);
    }
    const resolved = await lab.run("node-1", "getent", ["hosts", "node-2"]);
    expect(resolved.trim().split(/\s+/)).toEqual([lab.host("node-2").address, "node-2"]);
    const addr = await lab.run("node-3", "ip", ["-4", "-o", "addr", "show"]);
    expect(addr).toContain(`${lab.host("node-3").address}/24`);
    expect(addr).toMatch(/\blo\b/);
  });

  it("reaches a server inside node-2 from node-1 (by name and address) and from the root namespace", async () => {
    const node2 = lab.host("node-2").address;
    expect(await probeFrom(lab, "node-1", "node-2")).toBe("ok");
    expect(await probeFrom(lab, "node-1", node2)).toBe("ok");
    expect(await probe(node2, ECHO_PORT)).toBe("ok");
    // The server is bound to node-2's address in node-2's namespace, not to the root's loopback.
    expect(await probe("127.0.0.1", ECHO_PORT, 300)).toMatch(/^fail:/);
  });

  it("cutHost isolates a host until healHost", async () => {
    const node2 = lab.host("node-2").address;
    await lab.cutHost("node-2");
    try {
      expect(await probe(node2, ECHO_PORT)).toMatch(/^fail:/);
      expect(await probeFrom(lab, "node-1", "node-2")).toMatch(/^fail:/);
      expect(await probeFrom(lab, "node-1", "node-3", 1)).toMatch(/^fail:ECONNREFUSED/);
    } finally {
      await lab.healHost("node-2");
    }
    await waitFor(async () => ((await probe(node2, ECHO_PORT)) === "ok" ? true : undefined), {
      timeoutMs: 5000,
      what: "node-2 reachable again",
    });
    expect(await probeFrom(lab, "node-1", "node-2")).toBe("ok");
  });

  it("cutPair partitions only that pair", async () => {
    await lab.cutPair("node-1", "node-2");
    try {
      expect(await probeFrom(lab, "node-1", "node-2")).toMatch(/^fail:/);
      expect(await probeFrom(lab, "node-3", "node-2")).toBe("ok");
      expect(await probe(lab.host("node-2").address, ECHO_PORT)).toBe("ok");
      const routes = await lab.run("node-2", "ip", ["route", "show"]);
      expect(routes).toContain(`blackhole ${lab.host("node-1").address}`);
    } finally {
      await lab.healPair("node-1", "node-2");
    }
    expect(await probeFrom(lab, "node-1", "node-2")).toBe("ok");
    await lab.healPair("node-1", "node-2"); // healing twice is harmless
  });

  it("limitBandwidth installs tbf on both ends of the host's link and slows a transfer", async () => {
    const node2 = lab.host("node-2");
    const unlimited = await timeBlob(node2.address);
    await lab.limitBandwidth("node-2", { rateMbit: 8 });
    try {
      const inside = await lab.run("node-2", "tc", ["-s", "qdisc", "show", "dev", node2.ifname]);
      expect(inside).toMatch(/qdisc tbf .*rate 8Mbit/);
      const outside = spawnSync("tc", ["qdisc", "show", "dev", node2.bridgeIfname], {
        encoding: "utf8",
      }).stdout;
      expect(outside).toMatch(/qdisc tbf .*rate 8Mbit/);
      // 2 MB is 16.8 Mbit: about 2 s at 8 Mbit. Only a generous bound is asserted.
      const limited = await timeBlob(node2.address);
      expect(limited).toBeGreaterThan(1000);
      expect(limited).toBeGreaterThan(unlimited);
    } finally {
      await lab.clearBandwidth("node-2");
    }
    const cleared = await lab.run("node-2", "tc", ["qdisc", "show", "dev", node2.ifname]);
    expect(cleared).not.toContain("tbf");
    await lab.clearBandwidth("node-2"); // clearing twice is harmless
  });

  it("DelayRelay adds its delay in each direction and keeps the byte order", async () => {
    const delayMs = 100;
    await using relay = await DelayRelay.start({
      listenHost: lab.rootAddress,
      targetHost: lab.host("node-2").address,
      targetPort: ECHO_PORT,
      delayMs,
    });
    const direct = await echoRoundTrips(lab.host("node-2").address, ECHO_PORT, 3);
    const relayed = await echoRoundTrips(relay.host, relay.port, 3);
    expect(Math.max(...direct)).toBeLessThan(delayMs);
    for (const rtt of relayed) expect(rtt).toBeGreaterThanOrEqual(2 * delayMs - 2);

    // A host reaches the relay on the root address (how a node's route entry would use it).
    expect(await probeFrom(lab, "node-1", relay.host, relay.port)).toBe("ok");

    // Many small writes come back whole and in order.
    const s = connect(relay.port, relay.host);
    const sent: string[] = [];
    let received = "";
    s.on("data", (d: Buffer) => (received += String(d)));
    for (let i = 0; i < 200; i++) {
      sent.push(`${i},`);
      s.write(`${i},`);
      if (i % 20 === 0) await new Promise((r) => setTimeout(r, 2));
    }
    const expected = sent.join("");
    await waitFor(() => (received.length >= expected.length ? true : undefined), {
      timeoutMs: 3000,
      what: "all echoed bytes",
    });
    expect(received).toBe(expected);

    const closed = new Promise<void>((resolve) => s.once("close", () => resolve()));
    await relay.close();
    await closed;
    expect(await probe(relay.host, relay.port, 500)).toMatch(/^fail:ECONNREFUSED/);
  });

  it("dispose kills the processes inside and removes every name of the run, idempotently", async () => {
    const other = await NetLab.create({ hosts: ["alpha", "beta"] });
    const tag = `${NETLAB_PREFIX}${other.runId}`;
    expect(other.hosts.map((h) => h.ns)).toEqual([`${tag}-alpha`, `${tag}-beta`]);
    expect(other.rootAddress).not.toBe(lab.rootAddress);
    expect(existsSync(join(NETLAB_STATE_DIR, `${other.runId}.json`))).toBe(true);
    const [cmd = "", ...args] = other.execArgs("beta", "sleep", ["30"]);
    const sleeper = spawn(cmd, args, { stdio: "ignore" });
    const exited = new Promise<NodeJS.Signals | null>((r) => sleeper.once("exit", (_, s) => r(s)));
    await waitFor(
      () =>
        spawnSync("ip", ["netns", "pids", `${tag}-beta`], { encoding: "utf8" }).stdout.trim()
          ? true
          : undefined,
      { timeoutMs: 3000, what: "sleep inside beta" },
    );
    expect((await other.run("alpha", "getent", ["hosts", "beta"])).trim()).toMatch(/beta$/);

    await other.dispose();
    expect(await exited).toBe("SIGKILL");
    const after = rootState();
    expect(after.netns).not.toContain(tag);
    expect(after.links).not.toContain(tag);
    expect(existsSync(`/etc/netns/${tag}-alpha`)).toBe(false);
    expect(existsSync(join(NETLAB_STATE_DIR, `${other.runId}.json`))).toBe(false);
    await other.dispose();
    await other[Symbol.asyncDispose]();
    // The first lab is untouched.
    expect(await probe(lab.host("node-2").address, ECHO_PORT)).toBe("ok");
  });

  it("create removes what a crashed run left behind", async () => {
    const deadPid = 999_999;
    expect(() => process.kill(deadPid, 0)).toThrow();
    const crashed = `zz${Date.now().toString(36).slice(-3)}`;
    const orphan = `zy${Date.now().toString(36).slice(-3)}`; // no marker at all
    const tag = `${NETLAB_PREFIX}${crashed}`;
    const ns = `${tag}-node-1`;
    const orphanNs = `${NETLAB_PREFIX}${orphan}-node-1`;
    const ip = (...args: string[]) => {
      const r = spawnSync("ip", args, { encoding: "utf8" });
      if (r.status !== 0) throw new Error(`ip ${args.join(" ")}: ${r.stderr}`);
    };
    mkdirSync(NETLAB_STATE_DIR, { recursive: true });
    writeFileSync(
      join(NETLAB_STATE_DIR, `${crashed}.json`),
      JSON.stringify({
        runId: crashed,
        pid: deadPid,
        pidStart: null,
        createdAt: new Date().toISOString(),
        subnet: "10.231.254.0/24",
        bridge: `${tag}br`,
        namespaces: [ns],
        links: [`${tag}h1`, `${tag}br`],
      }),
    );
    ip("netns", "add", ns);
    ip("netns", "add", orphanNs);
    ip("link", "add", `${tag}br`, "type", "bridge");
    ip("link", "add", `${tag}h1`, "type", "veth", "peer", "name", `${tag}n1`);
    ip("link", "set", `${tag}n1`, "netns", ns);
    ip("link", "set", `${tag}h1`, "master", `${tag}br`);
    mkdirSync(`/etc/netns/${ns}`, { recursive: true });
    writeFileSync(`/etc/netns/${ns}/hosts`, "127.0.0.1 localhost\n");
    const sleeper = spawn("ip", ["netns", "exec", orphanNs, "sleep", "30"], { stdio: "ignore" });
    const exited = new Promise<NodeJS.Signals | null>((r) => sleeper.once("exit", (_, s) => r(s)));
    await waitFor(
      () =>
        spawnSync("ip", ["netns", "pids", orphanNs], { encoding: "utf8" }).stdout.trim()
          ? true
          : undefined,
      { timeoutMs: 3000, what: "sleep inside the orphan namespace" },
    );

    await using next = await NetLab.create({ hosts: 1 });
    expect(next.hosts).toHaveLength(1);
    expect(await exited).toBe("SIGKILL");
    const after = rootState();
    expect(after.netns).not.toContain(tag);
    expect(after.netns).not.toContain(orphanNs);
    expect(after.links).not.toContain(tag);
    expect(existsSync(`/etc/netns/${ns}`)).toBe(false);
    expect(existsSync(join(NETLAB_STATE_DIR, `${crashed}.json`))).toBe(false);
    // The live lab of this process was left alone.
    expect(await probe(lab.host("node-2").address, ECHO_PORT)).toBe("ok");
  });

  it("refuses with one clear line when not root", () => {
    const script = `const { NetLab } = await import(${JSON.stringify(fileURLToPath(new URL("./lab.ts", import.meta.url)))});
try { await NetLab.create({ hosts: 1 }); process.stdout.write("created"); }
catch (e) { process.stdout.write(e.message); }`;
    const r = spawnSync(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      { cwd: REPO_ROOT, uid: 65534, gid: 65534, encoding: "utf8", timeout: 20_000 },
    );
    expect(r.stdout).toBe(
      "NetLab: network namespaces need root (uid 65534); the multi-host tests cannot run",
    );
  });
});
