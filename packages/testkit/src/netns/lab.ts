// A multi-host test lab: every "host" is a network namespace with its own IPv4 address on a bridge.
// Cluster tests then run as deployed (separate machines, real addresses, links that can fail).
//
// Invariants:
// - Every name a run creates starts with `icl<runId>`: namespaces `icl<runId>-<host>`, bridge
//   `icl<runId>br`, veths `icl<runId>h<i>` (bridge side) and `icl<runId>n<i>` (namespace side).
// - A run writes its marker (/run/ic-netlab/<runId>.json: pid, names) BEFORE it creates anything and
//   removes it last, so a name of our scheme without a live marker is a crashed run's, for `create`.
// - Teardown is synchronous, idempotent and also runs on process exit and SIGINT/SIGTERM/SIGHUP.
import { execFile, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  closeSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";

/** Every namespace, link and /etc/netns dir of a lab starts with this prefix and the run id. */
export const NETLAB_PREFIX = "icl";
/** Where each run keeps its marker `<runId>.json`. */
export const NETLAB_STATE_DIR = "/run/ic-netlab";

const ETC_NETNS = "/etc/netns";
const RUN_ID_LENGTH = 5;
const RUN_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789";
const NS_RE = new RegExp(`^${NETLAB_PREFIX}([a-z0-9]{${RUN_ID_LENGTH}})-.+$`);
const LINK_RE = new RegExp(`^${NETLAB_PREFIX}([a-z0-9]{${RUN_ID_LENGTH}})(?:br|h\\d+|n\\d+)$`);
const MARKER_RE = new RegExp(`^([a-z0-9]{${RUN_ID_LENGTH}})\\.json$`);
const HOST_NAME_RE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i;
/** Subnets tried when none is given: 10.231.N.0/24. */
const AUTO_SUBNET_BASE = [10, 231] as const;

export interface LabHost {
  /** Host name, resolvable by every host of the lab (e.g. `node-2`). */
  readonly name: string;
  /** Network namespace name (`ip netns exec <ns> ...`). */
  readonly ns: string;
  /** IPv4 address of the host on the lab bridge. */
  readonly address: string;
  /** The veth inside the namespace that carries `address`. */
  readonly ifname: string;
  /** The other end of that veth, in the root namespace, enslaved to the bridge. */
  readonly bridgeIfname: string;
}

export interface NetLabOptions {
  /** Host names, or a count for `node-1` ... `node-N` (the names of the compose files). */
  readonly hosts: readonly string[] | number;
  /** A free private /24 such as `10.231.7.0/24`; by default the first free 10.231.N.0/24. */
  readonly subnet?: `${number}.${number}.${number}.0/24`;
}

export interface BandwidthLimit {
  readonly rateMbit: number;
  /** Bucket size; by default 10 ms worth of traffic, at least 32 kB. */
  readonly burstKb?: number;
  /** Longest time a packet may wait in the queue before it is dropped; 50 ms by default. */
  readonly latencyMs?: number;
}

interface RunMarker {
  readonly runId: string;
  readonly pid: number;
  /** Start time of `pid` (field 22 of /proc/<pid>/stat), so a recycled pid does not look alive. */
  readonly pidStart: string | null;
  readonly createdAt: string;
  readonly subnet: string;
  readonly bridge: string;
  readonly namespaces: readonly string[];
  readonly links: readonly string[];
}

interface RunNames {
  readonly namespaces: readonly string[];
  /** Root-namespace links (bridge-side veths, and the bridge). */
  readonly links: readonly string[];
  readonly markerPath: string;
}

class CommandError extends Error {
  constructor(
    readonly argv: readonly string[],
    readonly stderr: string,
    cause: unknown,
  ) {
    super(`${argv.join(" ")}: ${stderr.trim() || String(cause)}`, { cause });
  }
}

/** Runs a short command synchronously; throws CommandError with its stderr. */
function sh(cmd: string, args: readonly string[], timeoutMs = 10_000): string {
  try {
    return execFileSync(cmd, args, {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: timeoutMs,
    });
  } catch (e) {
    const stderr =
      typeof e === "object" && e !== null && "stderr" in e ? String(e.stderr ?? "") : "";
    throw new CommandError([cmd, ...args], stderr, e);
  }
}

/** Like `sh`, but a failure (e.g. "does not exist") is ignored. */
function shQuiet(cmd: string, args: readonly string[]): string {
  try {
    return sh(cmd, args);
  } catch {
    return "";
  }
}

function shAsync(
  cmd: string,
  args: readonly string[],
  opts: { timeoutMs?: number; input?: string } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      cmd,
      [...args],
      { encoding: "utf8", timeout: opts.timeoutMs ?? 10_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) reject(new CommandError([cmd, ...args], stderr, err));
        else resolve(stdout);
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
    else child.stdin?.end();
  });
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function pidStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may contain spaces) start after the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[19] ?? null;
  } catch {
    return null;
  }
}

function pidAlive(pid: number, start: string | null): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  return start === null || pidStartTime(pid) === null || pidStartTime(pid) === start;
}

function readMarkers(): Map<string, RunMarker | null> {
  const out = new Map<string, RunMarker | null>();
  let files: string[] = [];
  try {
    files = readdirSync(NETLAB_STATE_DIR);
  } catch {
    return out;
  }
  for (const f of files) {
    const m = MARKER_RE.exec(f);
    if (!m?.[1]) continue;
    try {
      out.set(m[1], JSON.parse(readFileSync(join(NETLAB_STATE_DIR, f), "utf8")) as RunMarker);
    } catch {
      out.set(m[1], null); // unreadable: treated as dead
    }
  }
  return out;
}

function listNamespaces(): string[] {
  // `ip netns list` prints "name (id: N)"; the first word is the name.
  return shQuiet("ip", ["netns", "list"])
    .split("\n")
    .map((l) => l.trim().split(" ")[0] ?? "")
    .filter((n) => n.length > 0);
}

function listRootLinks(): string[] {
  const out: string[] = [];
  for (const line of shQuiet("ip", ["-o", "link", "show"]).split("\n")) {
    // "12: iclab12h1@if11: <...>" -> "iclab12h1"
    const name = /^\d+:\s+([^:@\s]+)/.exec(line)?.[1];
    if (name) out.push(name);
  }
  return out;
}

function listEtcNetns(): string[] {
  try {
    return readdirSync(ETC_NETNS);
  } catch {
    return [];
  }
}

function nsPids(ns: string): number[] {
  return shQuiet("ip", ["netns", "pids", ns])
    .split("\n")
    .map((l) => Number.parseInt(l, 10))
    .filter((p) => Number.isInteger(p) && p > 0 && p !== process.pid);
}

/** Kills every process in the namespaces, then removes links, namespaces, /etc/netns dirs, marker. */
function teardown(names: RunNames): void {
  for (const ns of names.namespaces) {
    // Processes may fork while being killed; a few rounds catch the stragglers.
    for (let round = 0; round < 5; round++) {
      const pids = nsPids(ns);
      if (pids.length === 0) break;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
      sleepSync(10);
    }
  }
  // Deleting the bridge-side veth deletes its namespace-side peer too, synchronously (a namespace
  // itself is destroyed asynchronously by the kernel, and its veths with it).
  for (const link of names.links) shQuiet("ip", ["link", "del", link]);
  for (const ns of names.namespaces) {
    shQuiet("ip", ["netns", "del", ns]);
    rmSync(join(ETC_NETNS, ns), { recursive: true, force: true });
  }
  rmSync(names.markerPath, { force: true });
}

/**
 * Removes what crashed runs left behind: runs whose marker names a dead pid, and names of our scheme
 * that no live marker claims.
 */
function removeLeftovers(): void {
  // Names first, markers second: a live run writes its marker before creating any name.
  const namespaces = listNamespaces();
  const links = listRootLinks();
  const etcDirs = listEtcNetns();
  const markers = readMarkers();
  const live = new Set<string>();
  for (const [runId, marker] of markers) {
    if (marker && pidAlive(marker.pid, marker.pidStart)) live.add(runId);
  }
  const dead = new Map<string, { namespaces: Set<string>; links: Set<string> }>();
  const entry = (runId: string) => {
    let e = dead.get(runId);
    if (!e) {
      e = { namespaces: new Set(), links: new Set() };
      dead.set(runId, e);
    }
    return e;
  };
  for (const [runId, marker] of markers) {
    if (live.has(runId)) continue;
    const e = entry(runId);
    for (const ns of marker?.namespaces ?? []) e.namespaces.add(ns);
    for (const l of marker?.links ?? []) e.links.add(l);
  }
  for (const ns of [...namespaces, ...etcDirs]) {
    const runId = NS_RE.exec(ns)?.[1];
    if (runId && !live.has(runId)) entry(runId).namespaces.add(ns);
  }
  for (const link of links) {
    const runId = LINK_RE.exec(link)?.[1];
    if (runId && !live.has(runId)) entry(runId).links.add(link);
  }
  for (const [runId, e] of dead) {
    // Bridge-side veths before the bridge (not required by the kernel, but tidier).
    const sorted = [...e.links].sort((a, b) => Number(a.endsWith("br")) - Number(b.endsWith("br")));
    teardown({
      namespaces: [...e.namespaces],
      links: sorted,
      markerPath: join(NETLAB_STATE_DIR, `${runId}.json`),
    });
  }
}

/** Serialises subnet choice between concurrent creators (an exclusive lock file with the pid). */
function withStateLock<T>(fn: () => T): T {
  mkdirSync(NETLAB_STATE_DIR, { recursive: true });
  const lock = join(NETLAB_STATE_DIR, ".lock");
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      const fd = openSync(lock, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      let holder = NaN;
      try {
        holder = Number.parseInt(readFileSync(lock, "utf8"), 10);
      } catch {
        // removed meanwhile
      }
      if (Number.isInteger(holder) && !pidAlive(holder, null)) rmSync(lock, { force: true });
      else if (Date.now() > deadline) throw new Error(`NetLab: ${lock} is held by pid ${holder}`);
      else sleepSync(20);
    }
  }
  try {
    return fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

function ipToInt(ip: string): number {
  const parts = ip.split(".").map((p) => Number.parseInt(p, 10));
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255))
    throw new Error(`NetLab: bad IPv4 address ${ip}`);
  return parts.reduce((acc, p) => acc * 256 + p, 0);
}

function prefixesOverlap(a: string, b: string): boolean {
  const [aIp = "", aLen = "32"] = a.split("/");
  const [bIp = "", bLen = "32"] = b.split("/");
  const len = Math.min(Number(aLen), Number(bLen));
  const size = 2 ** (32 - len);
  return Math.floor(ipToInt(aIp) / size) === Math.floor(ipToInt(bIp) / size);
}

/** Prefixes in use in the root namespace: routes of every table and configured addresses. */
function usedPrefixes(): string[] {
  const out: string[] = [];
  for (const line of shQuiet("ip", ["-4", "route", "show", "table", "all"]).split("\n")) {
    const words = line.trim().split(/\s+/);
    // "[type] dst ..." where type is e.g. local/broadcast/blackhole.
    const dst = words.find((w) => /^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(w));
    if (dst) out.push(dst.includes("/") ? dst : `${dst}/32`);
  }
  for (const line of shQuiet("ip", ["-4", "-o", "addr", "show"]).split("\n")) {
    const m = /\binet\s+(\d+\.\d+\.\d+\.\d+\/\d+)/.exec(line);
    if (m?.[1]) out.push(m[1]);
  }
  return out;
}

function chooseSubnet(wanted: string | undefined, taken: readonly string[]): string {
  const used = [...usedPrefixes(), ...taken];
  if (wanted !== undefined) {
    if (!/^\d+\.\d+\.\d+\.0\/24$/.test(wanted)) throw new Error(`NetLab: subnet must be a /24`);
    ipToInt(wanted.split("/")[0] ?? "");
    const clash = used.find((p) => prefixesOverlap(p, wanted));
    if (clash) throw new Error(`NetLab: subnet ${wanted} overlaps ${clash} on this machine`);
    return wanted;
  }
  const start = 1 + ((randomBytes(1)[0] ?? 0) % 254);
  for (let i = 0; i < 254; i++) {
    const n = 1 + ((start - 1 + i) % 254);
    const candidate = `${AUTO_SUBNET_BASE[0]}.${AUTO_SUBNET_BASE[1]}.${n}.0/24`;
    if (!used.some((p) => prefixesOverlap(p, candidate))) return candidate;
  }
  throw new Error("NetLab: no free subnet in 10.231.0.0/16");
}

function newRunId(): string {
  const taken = new Set([
    ...readMarkers().keys(),
    ...listNamespaces().map((n) => NS_RE.exec(n)?.[1]),
    ...listRootLinks().map((l) => LINK_RE.exec(l)?.[1]),
  ]);
  for (;;) {
    const id = [...randomBytes(RUN_ID_LENGTH)]
      .map((b) => RUN_ID_CHARS[b % RUN_ID_CHARS.length] ?? "a")
      .join("");
    if (!taken.has(id)) return id;
  }
}

const liveLabs = new Set<NetLab>();
let processHooked = false;

/** Tears every live lab down when the process exits or is told to stop. */
function hookProcess(): void {
  if (processHooked) return;
  processHooked = true;
  process.on("exit", () => {
    for (const lab of [...liveLabs]) lab.disposeSync();
  });
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = (): void => {
      for (const lab of [...liveLabs]) lab.disposeSync();
      // Alone with this signal, keep its default meaning (terminate) once the lab is gone.
      if (process.listenerCount(sig) === 1) {
        process.removeListener(sig, onSignal);
        process.kill(process.pid, sig);
      }
    };
    process.on(sig, onSignal);
  }
}

/** A lab's network, seen from the root namespace: its /24, its bridge, the root's address. */
interface LabNetwork {
  readonly subnet: string;
  readonly bridge: string;
  readonly rootAddress: string;
}

export class NetLab implements AsyncDisposable {
  private disposed = false;
  private readonly byName: ReadonlyMap<string, LabHost>;
  /** The lab's /24, e.g. `10.231.7.0/24`. */
  readonly subnet: string;
  /** The bridge in the root namespace. */
  readonly bridge: string;
  /** The root namespace's address on the bridge: the test process reaches every host from it. */
  readonly rootAddress: string;

  private constructor(
    readonly runId: string,
    { subnet, bridge, rootAddress }: LabNetwork,
    readonly hosts: readonly LabHost[],
    private readonly markerPath: string,
  ) {
    this.subnet = subnet;
    this.bridge = bridge;
    this.rootAddress = rootAddress;
    this.byName = new Map(hosts.map((h) => [h.name, h]));
  }

  /** Builds the lab; throws one line saying why when namespaces cannot be made (never skips). */
  static async create(opts: NetLabOptions): Promise<NetLab> {
    const names =
      typeof opts.hosts === "number"
        ? Array.from({ length: opts.hosts }, (_, i) => `node-${i + 1}`)
        : [...opts.hosts];
    if (names.length === 0) throw new Error("NetLab: at least one host is needed");
    if (names.length > 250) throw new Error("NetLab: at most 250 hosts fit in a /24");
    for (const n of names)
      if (!HOST_NAME_RE.test(n)) throw new Error(`NetLab: "${n}" is not a valid host name`);
    if (new Set(names).size !== names.length) throw new Error("NetLab: host names must be unique");

    const uid = process.getuid?.();
    if (uid !== 0)
      throw new Error(
        `NetLab: network namespaces need root (uid ${uid ?? "unknown"}); the multi-host tests cannot run`,
      );
    try {
      sh("ip", ["-V"]);
    } catch (e) {
      throw new Error(
        `NetLab: the \`ip\` command (iproute2) is not usable (${firstLine(e)}); the multi-host tests cannot run`,
        { cause: e },
      );
    }

    removeLeftovers();
    hookProcess();

    const runId = newRunId();
    const tag = `${NETLAB_PREFIX}${runId}`;
    const markerPath = join(NETLAB_STATE_DIR, `${runId}.json`);
    const bridge = `${tag}br`;
    const subnet = withStateLock(() => {
      const taken: string[] = [];
      for (const m of readMarkers().values())
        if (m && pidAlive(m.pid, m.pidStart)) taken.push(m.subnet);
      const chosen = chooseSubnet(opts.subnet, taken);
      const marker: RunMarker = {
        runId,
        pid: process.pid,
        pidStart: pidStartTime(process.pid),
        createdAt: new Date().toISOString(),
        subnet: chosen,
        bridge,
        namespaces: names.map((n) => `${tag}-${n}`),
        links: [...names.map((_, i) => `${tag}h${i + 1}`), bridge],
      };
      writeFileSync(markerPath, `${JSON.stringify(marker, null, 2)}\n`);
      return chosen;
    });
    const base = subnet.split(".").slice(0, 3).join(".");
    const hosts: LabHost[] = names.map((name, i) => ({
      name,
      ns: `${tag}-${name}`,
      address: `${base}.${i + 2}`,
      ifname: `${tag}n${i + 1}`,
      bridgeIfname: `${tag}h${i + 1}`,
    }));
    const lab = new NetLab(runId, { subnet, bridge, rootAddress: `${base}.1` }, hosts, markerPath);
    liveLabs.add(lab);
    try {
      await lab.build();
    } catch (e) {
      lab.disposeSync();
      const cause = e instanceof CommandError ? e.stderr.trim() || e.message : String(e);
      throw new Error(
        `NetLab: cannot build the lab (${cause.split("\n")[0]}); the multi-host tests cannot run`,
        { cause: e },
      );
    }
    return lab;
  }

  private async build(): Promise<void> {
    const ip = (...args: string[]) => shAsync("ip", args);
    await ip("link", "add", this.bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0");
    await ip("addr", "add", `${this.rootAddress}/24`, "dev", this.bridge);
    await ip("link", "set", this.bridge, "up");
    const hostsFile = [
      "127.0.0.1 localhost",
      "::1 localhost ip6-localhost ip6-loopback",
      ...this.hosts.map((h) => `${h.address} ${h.name}`),
      "",
    ].join("\n");
    for (const h of this.hosts) {
      await ip("netns", "add", h.ns);
      mkdirSync(join(ETC_NETNS, h.ns), { recursive: true });
      writeFileSync(join(ETC_NETNS, h.ns, "hosts"), hostsFile);
      // No nameserver: glibc then asks 127.0.0.1 inside the namespace and fails at once. The root's
      // nameserver is unreachable from the lab, and a lookup that misses /etc/hosts (even the AAAA
      // half of `getent hosts node-2`) would otherwise wait for its timeouts (~6 s).
      writeFileSync(join(ETC_NETNS, h.ns, "resolv.conf"), "# NetLab: no DNS inside the lab\n");
      await ip("link", "add", h.bridgeIfname, "type", "veth", "peer", "name", h.ifname);
      await ip("link", "set", h.ifname, "netns", h.ns);
      await ip("link", "set", h.bridgeIfname, "master", this.bridge);
      await ip("link", "set", h.bridgeIfname, "up");
      await ip("-n", h.ns, "link", "set", "lo", "up");
      await ip("-n", h.ns, "addr", "add", `${h.address}/24`, "dev", h.ifname);
      await ip("-n", h.ns, "link", "set", h.ifname, "up");
      await ip("-n", h.ns, "route", "add", "default", "via", this.rootAddress);
    }
  }

  host(name: string): LabHost {
    const h = this.byName.get(name);
    if (!h)
      throw new Error(`NetLab: no host "${name}" (hosts: ${[...this.byName.keys()].join(", ")})`);
    return h;
  }

  /** argv prefix that runs a command inside the host (e.g. `NodeSpec.wrap`). */
  wrap(host: string): readonly string[] {
    return ["ip", "netns", "exec", this.host(host).ns];
  }

  /**
   * Full argv that runs `cmd args` inside the host. `ip netns exec` execs in place, so the pid of a
   * process spawned with it is the command's own.
   */
  execArgs(host: string, cmd: string, args: readonly string[] = []): string[] {
    return [...this.wrap(host), cmd, ...args];
  }

  /** Runs a short command inside the host and returns its stdout (throws with its stderr). */
  async run(
    host: string,
    cmd: string,
    args: readonly string[] = [],
    opts: { timeoutMs?: number; input?: string } = {},
  ): Promise<string> {
    const [bin = "ip", ...rest] = this.execArgs(host, cmd, args);
    return shAsync(bin, rest, opts);
  }

  /** Pulls the host's cable: its bridge-side veth goes down, all its traffic is dropped. */
  async cutHost(name: string): Promise<void> {
    await shAsync("ip", ["link", "set", this.host(name).bridgeIfname, "down"]);
  }

  async healHost(name: string): Promise<void> {
    await shAsync("ip", ["link", "set", this.host(name).bridgeIfname, "up"]);
  }

  /** Partitions two hosts from each other only: a blackhole route to the other's /32 in both. */
  async cutPair(a: string, b: string): Promise<void> {
    const [ha, hb] = [this.host(a), this.host(b)];
    await shAsync("ip", ["-n", ha.ns, "route", "replace", "blackhole", `${hb.address}/32`]);
    await shAsync("ip", ["-n", hb.ns, "route", "replace", "blackhole", `${ha.address}/32`]);
  }

  async healPair(a: string, b: string): Promise<void> {
    const [ha, hb] = [this.host(a), this.host(b)];
    for (const [from, to] of [
      [ha, hb],
      [hb, ha],
    ] as const) {
      await shAsync("ip", ["-n", from.ns, "route", "del", "blackhole", `${to.address}/32`]).catch(
        (e: unknown) => {
          if (!/No such process|not found/i.test(firstLine(e))) throw e;
        },
      );
    }
  }

  /** Token-bucket limit on both directions of the host's link (tbf on each veth's egress). */
  async limitBandwidth(name: string, limit: BandwidthLimit): Promise<void> {
    const h = this.host(name);
    if (!(limit.rateMbit > 0)) throw new Error("NetLab: rateMbit must be positive");
    const burstKb = limit.burstKb ?? Math.max(32, Math.ceil((limit.rateMbit * 1000) / 8 / 100));
    const tbf = [
      "root",
      "tbf",
      "rate",
      `${limit.rateMbit}mbit`,
      "burst",
      `${burstKb}kb`,
      "latency",
      `${limit.latencyMs ?? 50}ms`,
    ];
    await shAsync("ip", ["netns", "exec", h.ns, "tc", "qdisc", "replace", "dev", h.ifname, ...tbf]);
    await shAsync("tc", ["qdisc", "replace", "dev", h.bridgeIfname, ...tbf]);
  }

  async clearBandwidth(name: string): Promise<void> {
    const h = this.host(name);
    // Deleting an absent root qdisc fails ("Cannot delete qdisc with handle of zero"): nothing to do.
    await shAsync("ip", [
      "netns",
      "exec",
      h.ns,
      "tc",
      "qdisc",
      "del",
      "dev",
      h.ifname,
      "root",
    ]).catch(() => undefined);
    await shAsync("tc", ["qdisc", "del", "dev", h.bridgeIfname, "root"]).catch(() => undefined);
  }

  /** Kills every process in the lab's namespaces and removes all it created. Idempotent. */
  disposeSync(): void {
    if (this.disposed) return;
    this.disposed = true;
    liveLabs.delete(this);
    teardown({
      namespaces: this.hosts.map((h) => h.ns),
      links: [...this.hosts.map((h) => h.bridgeIfname), this.bridge],
      markerPath: this.markerPath,
    });
  }

  async dispose(): Promise<void> {
    this.disposeSync();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}

function firstLine(e: unknown): string {
  const msg = e instanceof CommandError ? e.stderr.trim() || e.message : String(e);
  return msg.split("\n")[0] ?? "";
}
