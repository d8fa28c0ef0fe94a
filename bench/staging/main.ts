// Staging throughput against a plain fs.copyFile and a curl of the same file from the store host, for
// one or more file sizes. Writes its "## Staging" section into docs/benchmarks.md (only that section).
//
// STAGING_BENCH_MB: comma-separated sizes in MiB (default "256,4096"); a size that does not fit twice
// in the free space of the temp directory is skipped and says so. STAGING_BENCH_REPS: rounds per size
// (default 5, after one uncounted warm-up round); each round runs copyFile, curl and staging one after
// another, so the three share whatever else the machine is doing, and the table shows medians. The
// hand-written analysis in analysis.md (next to this file) is appended to the section as it is.
import { execFile, spawn, spawnSync } from "node:child_process";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { copyFile, mkdir, mkdtemp, open, readFile, rm, statfs } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { once } from "node:events";
import { silentLogger } from "@ic/log";
import type { ModelId } from "@ic/protocol";
import { StagingClient } from "@ic/store";
import { processCpuMs } from "../lib/proc.ts";
import { writeSection } from "../lib/report.ts";

const MB = 1024 * 1024;
const SIZES_MB = (process.env.STAGING_BENCH_MB ?? "256,4096")
  .split(",")
  .map((s) => Number(s.trim()))
  .filter((n) => Number.isFinite(n) && n > 0);
const REPS = Number(process.env.STAGING_BENCH_REPS ?? 5);
/** Issue 32 (was 0.7 in issue 18): staging must reach this fraction of curl's throughput on the same file. */
const TARGET = 0.9;
const MODEL = "bench/staging" as ModelId;
const HERE = dirname(fileURLToPath(import.meta.url));

interface Sample {
  readonly s: number;
  /** CPU seconds of this process (all threads) during the run; null when another process did the work. */
  readonly clientCpu: number | null;
  /** CPU seconds of the store host process during the run; null where /proc is missing. */
  readonly storeCpu: number | null;
}

interface MethodResult {
  readonly name: string;
  readonly samples: Sample[];
}

/** Random bytes, written in 4 MiB pieces and fsynced, so no writeback of it overlaps the runs. */
async function writeRandom(path: string, bytes: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const fh = await open(path, "w");
  try {
    const chunk = 4 * MB;
    for (let done = 0; done < bytes; done += chunk) {
      await fh.write(randomBytes(Math.min(chunk, bytes - done)));
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

/** CPU seconds a process used so far (utime + stime from /proc), or null off Linux. */
function processCpu(pid: number): number | null {
  const c = processCpuMs(pid);
  return c && (c.userMs + c.systemMs) / 1000;
}

async function measure(
  storePid: number,
  setup: () => Promise<void>,
  run: () => Promise<void>,
  clientDoesTheWork = true,
): Promise<Sample> {
  await setup();
  const store0 = processCpu(storePid);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await run();
  const s = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const store1 = processCpu(storePid);
  return {
    s,
    clientCpu: clientDoesTheWork ? (cpu.user + cpu.system) / 1e6 : null,
    storeCpu: store0 === null || store1 === null ? null : store1 - store0,
  };
}

async function benchSize(sizeMb: number, hasCurl: boolean): Promise<MethodResult[]> {
  const work = await mkdtemp(join(tmpdir(), "bench-staging-"));
  const storePath = join(work, "store");
  const src = join(storePath, "bench--staging", "model.gguf");
  const bytes = sizeMb * MB;
  console.log(`\n${sizeMb} MiB: generating the file in ${work}`);
  await writeRandom(src, bytes);
  const host = await startStoreHost(storePath);
  try {
    const fileUrl = `${host.url}/store/models/bench/staging/files/model.gguf`;
    const copyDst = join(work, "copy.gguf");
    const curlDst = join(work, "curl.gguf");
    const stagingRoot = join(work, "staging");
    // Removing the previous output drops its dirty pages, so no writeback carries over between runs.
    const clean = async () => {
      await rm(copyDst, { force: true });
      await rm(curlDst, { force: true });
      await rm(stagingRoot, { recursive: true, force: true });
    };
    const methods: MethodResult[] = [
      { name: "fs.copyFile (local, no network, no hashing)", samples: [] },
      { name: "curl from the store host (loopback HTTP, no hashing, no fsync)", samples: [] },
      { name: "staging client (loopback HTTP + sha256 + fsync + rename)", samples: [] },
    ];
    const [copy, curl, staging] = methods as [MethodResult, MethodResult, MethodResult];
    // Round 0 warms up (JIT, the worker threads, the store host) and is not counted.
    for (let round = 0; round <= REPS; round++) {
      copy.samples.push(await measure(host.pid, clean, () => copyFile(src, copyDst)));
      if (hasCurl) {
        curl.samples.push(
          await measure(
            host.pid,
            clean,
            // Asynchronous: the event loop must stay free while curl runs.
            async () => {
              await promisify(execFile)("curl", ["-sf", "-o", curlDst, fileUrl]);
            },
            false,
          ),
        );
      }
      staging.samples.push(
        await measure(host.pid, clean, async () => {
          const client = new StagingClient({
            root: stagingRoot,
            storeUrl: host.url,
            settings: { cleanupOnDeactivate: true, keepRecentBytes: 0, headroomBytes: 0 },
            logger: silentLogger(),
          });
          await client.start();
          const r = await client.stage(MODEL);
          await client.stop();
          if (!r.ok) throw new Error(r.message);
          if (r.models[0]?.fetchedBytes !== bytes)
            throw new Error("staging did not fetch the whole file");
        }),
      );
      const line = methods
        .filter((m) => m.samples.length === round + 1)
        .map((m) => `${m.name.split(" ")[0]} ${m.samples[round]!.s.toFixed(2)} s`)
        .join(", ");
      console.log(`  round ${round}/${REPS}${round === 0 ? " (warm-up)" : ""}: ${line}`);
    }
    for (const m of methods) m.samples.shift();
    await clean();
    return methods;
  } finally {
    await host.stop();
    await rm(work, { recursive: true, force: true });
  }
}

const rate = (bytes: number, s: number) => bytes / MB / s;
const secs = (x: number | null) => (x === null ? "-" : x.toFixed(2));
const sizeLabel = (mb: number) =>
  mb >= 1024 ? `${(mb / 1024).toFixed(mb % 1024 ? 1 : 0)} GiB` : `${mb} MiB`;

async function main(): Promise<void> {
  const hasCurl = spawnSync("curl", ["--version"]).status === 0;
  const rows: string[] = [];
  const ratios: string[] = [];
  for (const sizeMb of SIZES_MB) {
    const bytes = sizeMb * MB;
    const vol = await statfs(tmpdir());
    const free = vol.bavail * vol.bsize;
    // The source and one output at a time, plus a margin.
    if (free < 2 * bytes + 2 * 1024 * MB) {
      const why = `skipped: needs ${((2 * bytes) / 1024 ** 3).toFixed(1)} GiB + 2 GiB free in ${tmpdir()}, has ${(free / 1024 ** 3).toFixed(1)} GiB`;
      console.log(`${sizeLabel(sizeMb)}: ${why}`);
      rows.push(`| ${sizeLabel(sizeMb)} | all | ${why} | - | - | - |`);
      continue;
    }
    const methods = await benchSize(sizeMb, hasCurl);
    const med = new Map<string, number>();
    for (const m of methods) {
      if (m.samples.length === 0) {
        rows.push(`| ${sizeLabel(sizeMb)} | ${m.name} | skipped (no curl) | - | - | - |`);
        continue;
      }
      const times = m.samples.map((x) => x.s);
      const t = median(times);
      med.set(m.name.split(" ")[0]!, t);
      const cpu = (pick: (x: Sample) => number | null) => {
        const xs = m.samples.map(pick);
        return xs.some((x) => x === null) ? null : median(xs as number[]);
      };
      const range = `${Math.min(...times).toFixed(2)}–${Math.max(...times).toFixed(2)}`;
      const line = `| ${sizeLabel(sizeMb)} | ${m.name} | ${t.toFixed(2)} (${range}) | ${rate(bytes, t).toFixed(0)} | ${secs(cpu((x) => x.clientCpu))} | ${secs(cpu((x) => x.storeCpu))} |`;
      rows.push(line);
      console.log(
        `${m.name}: ${t.toFixed(2)} s, ${rate(bytes, t).toFixed(0)} MiB/s (runs ${times.map((x) => x.toFixed(2)).join(", ")})`,
      );
    }
    const stage = med.get("staging");
    const copyS = med.get("fs.copyFile");
    const curlS = med.get("curl");
    if (stage === undefined || copyS === undefined) continue;
    const vsCopy = copyS / stage;
    let ratio = `${sizeLabel(sizeMb)}: staging / fs.copyFile **${vsCopy.toFixed(2)}**`;
    if (curlS !== undefined) {
      const vsCurl = curlS / stage;
      ratio += `; staging / curl **${vsCurl.toFixed(2)}** (target ≥ ${TARGET.toFixed(2)}: ${vsCurl >= TARGET ? "met" : "not met"})`;
    }
    console.log(ratio.replaceAll("**", ""));
    ratios.push(`- ${ratio}`);
  }

  const analysis = await readFile(join(HERE, "analysis.md"), "utf8").catch(() => "");
  const section = [
    `Generated by \`npx tsx bench/staging/main.ts\` (STAGING_BENCH_MB=${SIZES_MB.join(",")}, STAGING_BENCH_REPS=${REPS}) on ${new Date().toISOString().slice(0, 10)}: ` +
      `one random file per size, median (min–max) of ${REPS} rounds after one warm-up round, each round running the three methods one after another; ` +
      `${cpus().length} CPUs (${cpus()[0]?.model ?? "unknown"}), Node ${process.version}. ` +
      "The source file is in the page cache; the store host runs in a child process on the same machine, reached over loopback. " +
      "Client CPU: this process, every thread (for curl the work is in curl's process and not counted); store host CPU: the child serving the file.",
    "",
    "| File | Method | Time (s) | Throughput (MiB/s) | Client CPU (s) | Store host CPU (s) |",
    "|---|---|---|---|---|---|",
    ...rows,
    "",
    ...ratios,
    "",
    "The staging client also computes sha256 over every byte and fsyncs before the atomic rename; curl " +
      "leaves its output in the page cache, and fs.copyFile may use copy_file_range or a reflink and never leaves the kernel.",
    ...(analysis ? ["", analysis.trim()] : []),
    "",
  ].join("\n");
  await writeSection("Staging", section);
  console.log(`wrote the Staging section of ${process.env.BENCH_REPORT ?? "docs/benchmarks.md"}`);
}

/** Starts the store host in a child process (tsx), registering everything under store_path. */
async function startStoreHost(
  storePath: string,
): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(HERE, "store-host-child.ts"), storePath],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const exited = once(child, "exit");
  const lines = createInterface({ input: child.stdout });
  const first = await Promise.race([
    once(lines, "line").then(([l]) => String(l)),
    exited.then(() => {
      throw new Error("store host child exited before listening");
    }),
  ]);
  const { url } = JSON.parse(first) as { url: string };
  return {
    url,
    pid: child.pid ?? -1,
    async stop() {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
