// Staging one model on 7 nodes at once: from the store host alone, and from the store host and each
// other (peers), against staging it on one node, each host in its own network namespace with its
// link limited by tc tbf. Writes its "## Staging fan-out" section into docs/benchmarks.md.
//
// FANOUT_MB: the model's size in MiB (default 1024); FANOUT_NODES: nodes (default 7); FANOUT_MBIT:
// each host's link in Mbit/s, both directions (default 250: all hosts share this machine's cores,
// and at 1 Gbit/s the kernel's work for 7 links alone saturates two of them; see analysis.md);
// FANOUT_STORE_ONLY=0 skips the store-only run; BENCH_PROFILE=<dir> writes every child's CPU
// profile. Needs root (network namespaces) and about (nodes + 1) x the model on the temp disk.
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdir, mkdtemp, open, rm } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface, type Interface } from "node:readline";
import { fileURLToPath } from "node:url";
import { NetLab } from "@ic/testkit";
import { machineBusyMs, processCpuMs } from "../lib/proc.ts";
import { writeSection } from "../lib/report.ts";

const MB = 1024 * 1024;
const SIZE_MB = Number(process.env.FANOUT_MB ?? 1024);
const NODES = Number(process.env.FANOUT_NODES ?? 7);
const MBIT = Number(process.env.FANOUT_MBIT ?? 250);
const STORE_ONLY = process.env.FANOUT_STORE_ONLY !== "0";
/** Issue 32: staging on every node at once within this multiple of staging on one. */
const TARGET = 2;
const MODEL = "bench/fanout";
const HERE = dirname(fileURLToPath(import.meta.url));
const STORE_PORT = 7400;
const NODE_PORT = 7401;

interface Child {
  readonly proc: ChildProcess;
  readonly lines: Interface;
  next(): Promise<Record<string, unknown>>;
  send(line: string): void;
  stop(): Promise<void>;
}

/** A tsx child inside a lab host, speaking JSON lines on stdout. */
function child(lab: NetLab, host: string, script: string, args: string[]): Child {
  // BENCH_PROFILE=<dir>: a CPU profile of every child, <host>-<script>.cpuprofile.
  const prof = process.env.BENCH_PROFILE;
  const flags = prof
    ? ["--cpu-prof", `--cpu-prof-dir=${prof}`, `--cpu-prof-name=${host}-${script}.cpuprofile`]
    : [];
  const argv = lab.execArgs(host, process.execPath, [
    ...flags,
    "--import",
    "tsx",
    join(HERE, script),
    ...args,
  ]);
  const proc = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "pipe", "inherit"], cwd: HERE });
  const lines = createInterface({ input: proc.stdout! });
  const queue: string[] = [];
  const waiters: ((l: string) => void)[] = [];
  lines.on("line", (l) => {
    const w = waiters.shift();
    if (w) w(l);
    else queue.push(l);
  });
  const exited = once(proc, "exit");
  return {
    proc,
    lines,
    next: () =>
      new Promise((resolve, reject) => {
        const take = (l: string) => resolve(JSON.parse(l) as Record<string, unknown>);
        const q = queue.shift();
        if (q !== undefined) return take(q);
        waiters.push(take);
        void exited.then(() => reject(new Error(`${script} in ${host} exited`)));
      }),
    send: (line) => proc.stdin!.write(`${line}\n`),
    async stop() {
      proc.stdin!.end();
      const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(t);
    },
  };
}

async function writeRandom(path: string, bytes: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const fh = await open(path, "w");
  try {
    for (let done = 0; done < bytes; done += 4 * MB)
      await fh.write(randomBytes(Math.min(4 * MB, bytes - done)));
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** CPU seconds a process used so far, user and system (0 once it is gone). */
function processCpuS(pid: number | undefined): { user: number; system: number } {
  const c = processCpuMs(pid);
  return { user: (c?.userMs ?? 0) / 1000, system: (c?.systemMs ?? 0) / 1000 };
}

const totalCpuS = (pid: number | undefined) => {
  const c = processCpuS(pid);
  return c.user + c.system;
};

interface Outcome {
  readonly name: string;
  readonly s: number;
  readonly fetched: number;
  readonly peer: number;
}

interface RunResult {
  /** From "go" to the last node done. */
  readonly wallS: number;
  readonly nodes: Outcome[];
  /** Bytes the store host served during the run. */
  readonly storeBytes: number;
  /** Bytes the nodes served each other. */
  readonly peerServed: number;
  /** Machine-wide busy cores during the run. */
  readonly busyCores: number;
  /** CPU seconds of the store host's process and of all the nodes' processes during the run. */
  readonly storeCpuS: number;
  readonly nodesCpuS: number;
  /** Of the nodes' CPU, the kernel's part (system time: sockets, the page cache). */
  readonly nodesSysS: number;
}

/** What every run stages from and in: the lab, the work folder, the store host and its URL. */
interface Setup {
  lab: NetLab;
  work: string;
  store: Child;
  storeUrl: string;
}

/** Stages the model on `names` at once; with `peers`, each node knows the others. */
async function run(
  { lab, work, store, storeUrl }: Setup,
  names: readonly string[],
  peers: boolean,
): Promise<RunResult> {
  const roots = names.map((n) => join(work, "nodes", n));
  await Promise.all(roots.map((r) => rm(r, { recursive: true, force: true })));
  const endpoints = names.map((n) => ({
    name: n,
    url: `http://${lab.host(n).address}:${NODE_PORT}`,
  }));
  const kids = names.map((n, i) =>
    child(lab, n, "peer-node-child.ts", [
      roots[i]!,
      storeUrl,
      lab.host(n).address,
      String(NODE_PORT),
      n,
      JSON.stringify(peers ? endpoints.filter((e) => e.name !== n) : []),
      MODEL,
    ]),
  );
  try {
    for (const k of kids) await k.next(); // ready
    store.send("stats");
    const before = (await store.next()) as { bytes_served: number };
    const cpu0 = machineBusyMs();
    const store0 = totalCpuS(store.proc.pid);
    const nodes0 = kids.reduce((a, k) => a + totalCpuS(k.proc.pid), 0);
    const sys0 = kids.reduce((a, k) => a + processCpuS(k.proc.pid).system, 0);
    const t0 = performance.now();
    for (const k of kids) k.send("go");
    const outs = await Promise.all(
      kids.map(async (k, i) => {
        const o = (await k.next()) as {
          ok: boolean;
          s: number;
          fetched: number;
          peer: number;
          message?: string;
        };
        if (!o.ok) throw new Error(`${names[i]}: ${o.message}`);
        return { name: names[i]!, s: o.s, fetched: o.fetched, peer: o.peer };
      }),
    );
    const wallS = (performance.now() - t0) / 1000;
    const busyCores = (machineBusyMs() - cpu0) / 1000 / wallS;
    const storeCpuS = totalCpuS(store.proc.pid) - store0;
    const nodesCpuS = kids.reduce((a, k) => a + totalCpuS(k.proc.pid), 0) - nodes0;
    const nodesSysS = kids.reduce((a, k) => a + processCpuS(k.proc.pid).system, 0) - sys0;
    store.send("stats");
    const after = (await store.next()) as { bytes_served: number };
    let peerServed = 0;
    for (const k of kids) {
      k.send("stats");
      peerServed += Number((await k.next()).served);
    }
    return {
      wallS,
      nodes: outs,
      storeBytes: after.bytes_served - before.bytes_served,
      peerServed,
      busyCores,
      storeCpuS,
      nodesCpuS,
      nodesSysS,
    };
  } finally {
    await Promise.all(kids.map((k) => k.stop()));
    await Promise.all(roots.map((r) => rm(r, { recursive: true, force: true })));
  }
}

const gib = (b: number) => (b / 1024 ** 3).toFixed(2);

async function main(): Promise<void> {
  const names = Array.from({ length: NODES }, (_, i) => `node-${i + 1}`);
  const bytes = SIZE_MB * MB;
  const work = await mkdtemp(join(tmpdir(), "bench-fanout-"));
  const lab = await NetLab.create({ hosts: ["store", ...names] });
  try {
    for (const h of ["store", ...names]) await lab.limitBandwidth(h, { rateMbit: MBIT });
    const storePath = join(work, "store");
    console.log(`generating ${SIZE_MB} MiB in ${storePath}`);
    await writeRandom(join(storePath, "bench--fanout", "model.gguf"), bytes);
    const store = child(lab, "store", "store-host-child.ts", [
      storePath,
      lab.host("store").address,
      String(STORE_PORT),
    ]);
    try {
      const { url } = (await store.next()) as { url: string };
      console.log(`store host at ${url}; links limited to ${MBIT} Mbit/s each way`);
      const setup: Setup = { lab, work, store, storeUrl: url };
      const single = await run(setup, names.slice(0, 1), false);
      console.log(`one node: ${single.wallS.toFixed(2)} s`);
      const storeOnly = STORE_ONLY ? await run(setup, names, false) : undefined;
      if (storeOnly)
        console.log(`${NODES} nodes, store host only: ${storeOnly.wallS.toFixed(2)} s`);
      const swarm = await run(setup, names, true);
      console.log(`${NODES} nodes with peers: ${swarm.wallS.toFixed(2)} s`);
      await writeReport(bytes, single, storeOnly, swarm);
    } finally {
      await store.stop();
    }
  } finally {
    await lab.dispose();
    await rm(work, { recursive: true, force: true });
  }
}

async function writeReport(
  bytes: number,
  single: RunResult,
  storeOnly: RunResult | undefined,
  swarm: RunResult,
): Promise<void> {
  const row = (label: string, r: RunResult) => {
    const times = r.nodes.map((n) => n.s);
    const fromPeers = r.nodes.reduce((s, n) => s + n.peer, 0);
    return `| ${label} | ${r.wallS.toFixed(2)} | ${(r.wallS / single.wallS).toFixed(2)} | ${Math.min(...times).toFixed(2)}–${Math.max(...times).toFixed(2)} | ${gib(r.storeBytes)} | ${gib(fromPeers)} | ${((r.storeBytes / (r.nodes.length * bytes)) * 100).toFixed(0)}% | ${r.storeCpuS.toFixed(2)} | ${r.nodesCpuS.toFixed(2)} (${r.nodesSysS.toFixed(2)}) | ${r.busyCores.toFixed(2)} |`;
  };
  const ratio = swarm.wallS / single.wallS;
  const lines = [
    `Generated by \`npm run bench staging-fanout\` (FANOUT_MB=${SIZE_MB}, FANOUT_NODES=${NODES}, FANOUT_MBIT=${MBIT}) on ${new Date().toISOString().slice(0, 10)}: ` +
      `1 store host and ${NODES} nodes, each in its own network namespace on one bridge, every host's link limited to ${MBIT} Mbit/s each way (tc tbf on both ends of its veth); ` +
      `one ${SIZE_MB} MiB model (one file, 16 MiB pieces) staged on every node at once by the staging client, each node serving its copy to the others (the node's /store/staged routes) while it stages. ` +
      `${cpus().length} CPUs (${cpus()[0]?.model ?? "unknown"}), Node ${process.version}; all hosts share this machine's CPUs and page cache.`,
    "",
    "| Run | Time, last node done (s) | × one node | Each node (s) | Served by the store host (GiB) | Served by peers (GiB) | Store share of all bytes | Store host CPU (s) | Nodes' CPU, all (of it system) (s) | Busy cores (machine) |",
    "|---|---|---|---|---|---|---|---|---|---|",
    row("one node, store host only", single),
    ...(storeOnly ? [row(`${NODES} nodes, store host only`, storeOnly)] : []),
    row(`${NODES} nodes, store host and peers`, swarm),
    "",
    `- ${NODES} nodes with peers / one node: **${ratio.toFixed(2)}** (target ≤ ${TARGET}: ${ratio <= TARGET ? "met" : "not met"})` +
      (storeOnly ? `; store host only: ${(storeOnly.wallS / single.wallS).toFixed(2)}` : ""),
    `- Bytes the nodes report served to each other: ${gib(swarm.peerServed)} GiB (their receivers counted ${gib(swarm.nodes.reduce((s, n) => s + n.peer, 0))} GiB from peers).`,
    "",
  ];
  const analysis = await import("node:fs/promises")
    .then((fs) => fs.readFile(join(HERE, "analysis.md"), "utf8"))
    .catch(() => "");
  await writeSection(
    "Staging fan-out",
    [...lines, ...(analysis ? [analysis.trim(), ""] : [])].join("\n"),
  );
  console.log(lines.join("\n"));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
