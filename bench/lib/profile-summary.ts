// Summarizes V8 .cpuprofile files written by bench/scale and bench/cluster-chat (BENCH_PROFILE=<dir>):
// self time by function and by package, and inclusive time of the functions that matter here
// (heartbeat handling, ticks, bus decoding, sync). `npx tsx bench/lib/profile-summary.ts <file.cpuprofile>...`
import { readFileSync } from "node:fs";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** Where a function lives: a workspace package, a dependency, or Node itself. */
function packageOf(url: string): string {
  if (!url) return "(native / gc / idle)";
  if (url.startsWith("node:")) return "node internals";
  const dep =
    /node_modules\/\.pnpm\/([^/]+)\//.exec(url) ?? /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (dep) return dep[1]!.replace(/@\d[^_]*$/, "").replace(/\+/g, "/");
  const ws = /\/(packages|services|bench)\/([^/]+)\/(?:src\/)?(.*)$/.exec(url);
  if (ws) return `${ws[1]}/${ws[2]}/${ws[3]}`;
  return url;
}

const name = (f: CallFrame) =>
  `${f.functionName || "(anonymous)"} ${f.url.replace(/^.*\/(node_modules|packages|services|bench)\//, "$1/")}:${f.lineNumber + 1}`;

export function summarize(file: string, top = 25): string {
  const p = JSON.parse(readFileSync(file, "utf8")) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i]!;
    self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  const totalUs = p.endTime - p.startTime;
  const idleUs = [...self.entries()]
    .filter(([id]) => byId.get(id)!.callFrame.functionName === "(idle)")
    .reduce((s, [, t]) => s + t, 0);
  const busyUs = [...self.values()].reduce((s, t) => s + t, 0) - idleUs;
  // Inclusive time per node, then per function name (a recursive function counts once per path).
  const incl = new Map<number, number>();
  const walk = (id: number): number => {
    const n = byId.get(id)!;
    let t = self.get(id) ?? 0;
    for (const c of n.children ?? []) t += walk(c);
    incl.set(id, t);
    return t;
  };
  walk(p.nodes[0]!.id);
  const inclByName = new Map<string, number>();
  const seenOnPath = new Set<string>();
  const walk2 = (id: number): void => {
    const n = byId.get(id)!;
    const k = name(n.callFrame);
    const fresh = !seenOnPath.has(k);
    if (fresh) {
      inclByName.set(k, (inclByName.get(k) ?? 0) + (incl.get(id) ?? 0));
      seenOnPath.add(k);
    }
    for (const c of n.children ?? []) walk2(c);
    if (fresh) seenOnPath.delete(k);
  };
  walk2(p.nodes[0]!.id);
  const selfByName = new Map<string, number>();
  const selfByPkg = new Map<string, number>();
  for (const [id, t] of self) {
    const f = byId.get(id)!.callFrame;
    if (f.functionName === "(idle)") continue;
    selfByName.set(name(f), (selfByName.get(name(f)) ?? 0) + t);
    selfByPkg.set(packageOf(f.url), (selfByPkg.get(packageOf(f.url)) ?? 0) + t);
  }
  const pct = (t: number) => `${((t / busyUs) * 100).toFixed(1)}%`;
  const ms = (t: number) => `${(t / 1000).toFixed(0)} ms`;
  const rows = (m: Map<string, number>, n: number) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, t]) => `  ${ms(t).padStart(8)} ${pct(t).padStart(6)}  ${k}`)
      .join("\n");
  const interesting = [...inclByName.entries()]
    .filter(([k]) =>
      /^(onHeartbeat|onEvent|tick|decode|safeParse|publishHeartbeat|heartbeat|sync|superviseMembers|reconcileDeployments|livePeers|heardPeers|elect|startSession|emit|since|encode|stringify|parse|handleCommand|applyOne|apply|stateDocument|extras|refresh) /.test(
        k,
      ),
    )
    .sort((a, b) => b[1] - a[1])
    .slice(0, top);
  return [
    `${file}: ${(totalUs / 1e6).toFixed(1)} s profiled, ${ms(busyUs)} busy (${((busyUs / totalUs) * 100).toFixed(2)}% of one core)`,
    "self time by package:",
    rows(selfByPkg, 12),
    "self time by function:",
    rows(selfByName, top),
    "inclusive time of selected functions:",
    interesting.map(([k, t]) => `  ${ms(t).padStart(8)} ${pct(t).padStart(6)}  ${k}`).join("\n"),
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const f of process.argv.slice(2)) console.log(`${summarize(f)}\n`);
}
