// ClusterAgent over an in-memory bus with fake timers: replica catch-up races, partition heals and the
// sequencer's placement re-check.
import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Bus } from "@ic/bus";
import { CATALOG, ServiceError } from "@ic/protocol";
import type {
  DeploymentIntent,
  Instance,
  InstanceId,
  Intent,
  IntentStore,
  IntentWrite,
  Link,
  ModelId,
  ModelRecord,
  NodeId,
  TaskId,
  Telemetry,
  TokenLimits,
} from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { ClusterAgent } from "./cluster-agent.ts";
import type { AgentOptions } from "./agent-options.ts";

type Handler = (msg: unknown, meta: { origin: string | undefined }) => unknown;
interface Entry {
  readonly subject: string;
  readonly bus: FakeBus;
  readonly handler: Handler;
  readonly ignoreOwn?: boolean;
}

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;
const subjectOf = (name: keyof typeof CATALOG, suffix?: string) =>
  suffix ? `${CATALOG[name].subject}.${suffix}` : CATALOG[name].subject;

/** An in-memory bus: deliveries are timers (ordered, asynchronous), links can be cut. */
class Hub {
  readonly subs = new Set<Entry>();
  readonly responders = new Set<Entry>();
  /** Pairs of bus names that cannot reach each other. */
  readonly cut = new Set<string>();
  /** Return false to drop one published message on its way to `to`. */
  drop: (subject: string, msg: unknown, to: FakeBus) => boolean = () => false;
  /** Replies to requests wait for this (they are computed when the request arrives). */
  replyGate: Promise<void> = Promise.resolve();
  /** A new responder is found by requests only this long after it subscribed (route interest). */
  interestDelayMs = 0;
  /** The largest message (JSON bytes) published or replied since the last reset, by subject. */
  readonly largest = new Map<string, number>();
  record(subject: string, msg: unknown): void {
    const bytes = Buffer.byteLength(JSON.stringify(msg));
    const base = subject.split(".").slice(0, 3).join(".");
    if (bytes > (this.largest.get(base) ?? 0)) this.largest.set(base, bytes);
  }

  reaches(a: FakeBus, b: FakeBus): boolean {
    return a === b || !this.cut.has(`${a.name}|${b.name}`);
  }
  partition(side: readonly string[], all: readonly string[]): void {
    for (const a of side)
      for (const b of all)
        if (!side.includes(b)) {
          this.cut.add(`${a}|${b}`);
          this.cut.add(`${b}|${a}`);
        }
  }
}

class FakeBus {
  readonly origin = randomUUID();
  readonly maxPayload = 1024 * 1024;
  constructor(
    private readonly hub: Hub,
    readonly name: string,
  ) {}

  /** When the interest of this bus's latest responder reaches everyone (Hub.interestDelayMs). */
  private interestUntil = 0;

  publish(name: keyof typeof CATALOG, msg: unknown, suffix?: string): void {
    const subject = subjectOf(name, suffix);
    const body = clone(msg);
    this.hub.record(subject, body);
    // As on NATS routes: a connection's messages travel behind the interest it announced before them.
    const delay = Math.max(1, this.interestUntil - Date.now());
    for (const s of [...this.hub.subs]) {
      if (s.subject !== subject || (s.ignoreOwn && s.bus === this)) continue;
      if (!this.hub.reaches(this, s.bus) || this.hub.drop(subject, body, s.bus)) continue;
      setTimeout(() => {
        if (this.hub.subs.has(s)) s.handler(clone(body), { origin: this.origin });
      }, delay);
    }
  }

  subscribe(
    name: keyof typeof CATALOG,
    handler: Handler,
    opts: { suffix?: string; ignoreOwn?: boolean } = {},
  ): () => void {
    const e: Entry = {
      subject: subjectOf(name, opts.suffix),
      bus: this,
      handler,
      ignoreOwn: opts.ignoreOwn ?? false,
    };
    this.hub.subs.add(e);
    return () => void this.hub.subs.delete(e);
  }

  respond(name: keyof typeof CATALOG, handler: Handler, opts: { suffix?: string } = {}) {
    const e: Entry = { subject: subjectOf(name, opts.suffix), bus: this, handler };
    let gone = false;
    if (this.hub.interestDelayMs > 0) {
      this.interestUntil = Date.now() + this.hub.interestDelayMs;
      setTimeout(() => gone || this.hub.responders.add(e), this.hub.interestDelayMs);
    } else this.hub.responders.add(e);
    return () => {
      gone = true;
      this.hub.responders.delete(e);
    };
  }

  async request(
    name: keyof typeof CATALOG,
    msg: unknown,
    opts: { timeoutMs: number; suffix?: string; from?: string },
  ): Promise<unknown> {
    const subject = subjectOf(name, opts.suffix);
    const r = [...this.hub.responders].find(
      (x) =>
        x.subject === subject &&
        this.hub.reaches(this, x.bus) &&
        (opts.from === undefined || x.bus.origin === opts.from),
    );
    if (!r) {
      // As the real bus: a request for one origin's reply (a gather) is dropped unseen when that
      // origin's interest has not reached this node, and times out; any other finds "no responder".
      if (opts.from !== undefined) {
        await new Promise((r) => setTimeout(r, opts.timeoutMs));
        throw new ServiceError("unavailable", `${subject}: no reply from the expected responder`);
      }
      throw new ServiceError("unavailable", "no responder");
    }
    const answer = new Promise<unknown>((resolve) => {
      setTimeout(() => {
        void Promise.resolve(r.handler(clone(msg), { origin: this.origin })).then((answer) => {
          const reply = clone(answer);
          this.hub.record(`${subject}.reply`, reply);
          void this.hub.replyGate.then(() => resolve(reply));
        });
      }, 1);
    });
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new ServiceError("unavailable", "timed out")), opts.timeoutMs),
    );
    return Promise.race([answer, timeout]);
  }
}

const timings = { heartbeatMs: 100, livenessTimeoutMs: 400, electionTimeoutMs: 300 };

function agent(
  hub: Hub,
  name: string,
  startedAt: number,
  telemetry: Telemetry | null = null,
  extra: Partial<AgentOptions> = {},
): ClusterAgent {
  return new ClusterAgent({
    ...extra,
    bus: new FakeBus(hub, name) as unknown as Bus,
    log: silentLogger(),
    clock: { now: () => Date.now() },
    self: {
      peerKey: `p-${name}`,
      name,
      host: name,
      apiUrl: `http://${name}:8080`,
      startedAt,
    },
    timings,
    probe: { tries: 3, timeoutMs: 50, gapMs: 10 },
    extras: () => ({ telemetry, links: [], runners: [], health: [] }),
  });
}

const advance = (ms: number) => vi.advanceTimersByTimeAsync(ms);
/** Advances fake time 1 ms at a time until `cond` holds (at most a second). */
async function waitUntil(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !cond(); i++) await advance(1);
  expect(cond()).toBe(true);
}
/** Advances fake time until `p` settles (at most a second), then gives its outcome. */
async function settled<T>(p: Promise<T>): Promise<T> {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  await waitUntil(() => done);
  return p;
}
const memberNames = (a: ClusterAgent) =>
  Object.values(a.snapshot().members)
    .map((m) => m.name)
    .sort();

let agents: ClusterAgent[] = [];
beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000 });
  agents = [];
});
afterEach(async () => {
  for (const a of agents) await a.stop();
  vi.useRealTimers();
});

function start(
  hub: Hub,
  name: string,
  startedAt: number,
  telemetry: Telemetry | null = null,
  extra: Partial<AgentOptions> = {},
): ClusterAgent {
  const a = agent(hub, name, startedAt, telemetry, extra);
  agents.push(a);
  a.start();
  return a;
}

describe("replica catch-up", () => {
  it("applies the event that arrived while its first sync was out (its own NodeJoined)", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    await advance(500);
    expect(a.isMaster).toBe(true);
    let release!: () => void;
    hub.replyGate = new Promise((r) => (release = r));
    const b = start(hub, "b", 2);
    await advance(300);
    // The master sequenced b's NodeJoined after it answered b's sync, whose reply is held.
    expect(memberNames(a)).toEqual(["a", "b"]);
    expect(b.synced).toBe(false);
    release();
    await advance(0); // microtasks only: no heartbeat or tick runs
    expect(b.synced).toBe(true);
    expect(b.snapshot().index).toBe(a.snapshot().index);
    expect(memberNames(b)).toEqual(["a", "b"]);
  });

  it("a follower that lost the master's last event catches up from the master's heartbeat", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    await advance(500);
    const b = start(hub, "b", 2);
    await advance(500);
    expect(b.snapshot().index).toBe(a.snapshot().index);
    // c's NodeJoined never reaches b, and no later event shows b the gap.
    hub.drop = (subject, msg, to) =>
      subject === CATALOG.events.subject &&
      to.name === "b" &&
      (msg as { event: { type: string } }).event.type === "NodeJoined";
    start(hub, "c", 3);
    await waitUntil(() => memberNames(a).length === 3);
    expect(b.snapshot().index).toBe(a.snapshot().index - 1);
    hub.drop = () => false;
    await advance(2 * timings.heartbeatMs);
    expect(b.snapshot().index).toBe(a.snapshot().index);
    expect(memberNames(b)).toEqual(["a", "b", "c"]);
  });
});

/** A registered model record with a ~500-byte encoding. */
function model(id: string): ModelRecord {
  return {
    model_id: id as ModelId,
    file: "model-weights-file-name-that-is-long-enough.gguf",
    bytes: 5e9,
    architecture: "llama",
    layers: 32,
    context_length: 4096,
    embedding_length: 4096,
    head_count: 32,
    head_count_kv: 8,
    supports_tensor: true,
    store_url: "http://store-host.example.internal:8080",
  };
}

describe("catch-up of any size, in bounded messages", () => {
  const BUDGET = 64 * 1024;
  const sync = CATALOG.masterSync.subject;

  it("a follower 100,000 events behind catches up, and no message exceeds the page budget", async () => {
    const hub = new Hub();
    const opts = { syncBudgetBytes: BUDGET, logBounds: { retainEvents: 150_000 } };
    const a = start(hub, "a", 1, null, opts);
    await advance(500);
    const b = start(hub, "b", 2, null, opts);
    await waitUntil(() => b.synced && b.snapshot().index === a.snapshot().index);
    // b hears none of the next 100,000 events (as if cut off while traffic ran).
    hub.drop = (subject, _m, to) => subject === CATALOG.events.subject && to.name === "b";
    for (let i = 0; i < 100_000; i++)
      await a.command({
        type: "ReportDownloadFailed",
        model_id: "org/m" as ModelId,
        reason: `r${i}`,
      });
    expect(b.snapshot().index).toBe(a.snapshot().index - 100_000);
    hub.drop = () => false;
    hub.largest.clear();
    await advance(2 * timings.heartbeatMs);
    await waitUntil(() => b.snapshot().index === a.snapshot().index);
    expect(b.snapshot()).toEqual(a.snapshot());
    // The gap was longer than the snapshot threshold: a snapshot, then the rest in pages.
    for (const [subject, bytes] of hub.largest) {
      if (subject.startsWith(sync)) expect(bytes, subject).toBeLessThanOrEqual(BUDGET);
    }
    expect(hub.largest.get(`${sync.split(".").slice(0, 3).join(".")}`)).toBeDefined();
  });

  it("a gap shorter than the snapshot threshold comes as pages of events, each under the budget", async () => {
    const hub = new Hub();
    const opts = { syncBudgetBytes: 16 * 1024, snapshotGap: 5000 };
    const a = start(hub, "a", 1, null, opts);
    await advance(500);
    const b = start(hub, "b", 2, null, opts);
    await waitUntil(() => b.synced && b.snapshot().index === a.snapshot().index);
    hub.drop = (subject, _m, to) => subject === CATALOG.events.subject && to.name === "b";
    const pages: number[] = [];
    const reply = hub.record.bind(hub);
    hub.record = (subject, msg) => {
      const m = msg as { events?: unknown[]; snapshot_part?: unknown };
      if (subject.startsWith(sync) && subject.endsWith(".reply")) {
        expect(m.snapshot_part).toBeUndefined();
        pages.push(m.events?.length ?? 0);
      }
      reply(subject, msg);
    };
    for (let i = 0; i < 3000; i++)
      await a.command({ type: "ReportDownloadFailed", model_id: "org/m" as ModelId, reason: "x" });
    hub.drop = () => false;
    hub.largest.clear();
    await advance(2 * timings.heartbeatMs);
    await waitUntil(() => b.snapshot().index === a.snapshot().index);
    expect(b.snapshot()).toEqual(a.snapshot());
    expect(pages.length).toBeGreaterThan(5);
    for (const [subject, bytes] of hub.largest)
      if (subject.startsWith(sync)) expect(bytes).toBeLessThanOrEqual(16 * 1024);
  });

  it("a state larger than one message reaches a new node as a snapshot in parts", async () => {
    const hub = new Hub();
    // A newcomer 2,000 events behind is past this threshold: it gets the snapshot.
    const opts = { syncBudgetBytes: BUDGET, snapshotGap: 100 };
    const a = start(hub, "a", 1, null, opts);
    await advance(500);
    // ~2,000 registered models: a state of about 1 MB, 16 times the budget.
    for (let i = 0; i < 2000; i++)
      await a.command({ type: "RegisterModel", model: model(`org/m${i}`) });
    hub.largest.clear();
    const parts = new Set<number>();
    const record = hub.record.bind(hub);
    hub.record = (subject, msg) => {
      const p = (msg as { snapshot_part?: { part: number } }).snapshot_part;
      if (p) parts.add(p.part);
      record(subject, msg);
    };
    const b = start(hub, "b", 2, null, opts);
    await waitUntil(() => b.synced && Object.keys(b.snapshot().models).length === 2000);
    await waitUntil(() => b.snapshot().index === a.snapshot().index);
    expect(b.snapshot().models).toEqual(a.snapshot().models);
    expect(parts.size).toBeGreaterThan(10);
    for (const [subject, bytes] of hub.largest)
      if (subject.startsWith(sync)) expect(bytes).toBeLessThanOrEqual(BUDGET);
  });
});

describe("failover", () => {
  it("the dead master is not a member of the session that replaces it", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    const b = start(hub, "b", 2);
    const c = start(hub, "c", 3);
    await advance(1000);
    expect(memberNames(c)).toEqual(["a", "b", "c"]);
    const s1 = a.sessionId;
    await a.stop(); // silent from now on, like a killed process
    await waitUntil(() => b.isMaster);
    expect(b.sessionId).not.toBe(s1);
    // At the election the old master was heard within the liveness window, yet it is not a member.
    expect(memberNames(b)).toEqual(["b", "c"]);
    await waitUntil(() => c.sessionId === b.sessionId && c.synced);
    expect(memberNames(c)).toEqual(["b", "c"]);
  });
});

describe("planned hand-off of the master", () => {
  const report = (reason: string) =>
    ({ type: "ReportDownloadFailed", model_id: "org/m" as ModelId, reason }) as const;

  it("the master hands its session to the most senior member: same session, no session change, commands go on, and its stop elects nobody", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    const b = start(hub, "b", 2);
    const c = start(hub, "c", 3);
    await advance(1000);
    const s1 = a.sessionId;
    expect(a.isMaster).toBe(true);
    const changes: unknown[] = [];
    for (const x of [a, b, c]) x.on({ session: (prev, next) => changes.push([prev, next]) });

    // A command sent while the hand-off starts: the old master answers no_master naming the
    // successor, and the sender asks the successor once its replica has the hand-off.
    const handing = a.handOff();
    const early = c.command(report("early"));
    expect(await settled(handing)).toBe("p-b");
    expect((await settled(early)).ok).toBe(true);
    await waitUntil(() => b.isMaster && !a.isMaster);
    for (const x of [a, b, c]) {
      expect(x.sessionId).toBe(s1);
      expect(x.snapshot().session?.master_peer_key).toBe("p-b");
    }
    // Every node's commands go to the new master, the old one's included.
    await settled(a.command(report("from the old master")));
    await settled(c.command(report("from a follower")));
    await settled(b.command(report("from the new master")));
    await waitUntil(() => a.snapshot().index === b.snapshot().index);
    await waitUntil(() => c.snapshot().index === b.snapshot().index);
    // The old master stops (as after its drain): it leaves, and nobody elects.
    await a.stop();
    await advance(2000);
    expect(b.isMaster).toBe(true);
    expect([b.sessionId, c.sessionId]).toEqual([s1, s1]);
    expect(memberNames(b)).toEqual(["b", "c"]);
    await waitUntil(() => memberNames(c).join() === "b,c");
    expect(changes).toEqual([]);
  });

  it("a command right after the hand-off waits for the successor to say it is the master (its interest still on its way), then reaches it", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    const b = start(hub, "b", 2);
    const c = start(hub, "c", 3);
    await advance(1000);
    hub.interestDelayMs = 40;
    const handing = a.handOff();
    await waitUntil(() => c.snapshot().session?.master_peer_key === "p-b");
    // c has the hand-off; b's responder is not visible yet.
    const sent = c.command(report("right after"));
    expect(await settled(handing)).toBe("p-b");
    expect((await settled(sent)).ok).toBe(true);
    expect(b.isMaster).toBe(true);
  });

  it("nobody to hand to (a lone master, or a follower asked): nothing changes", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    await advance(1000);
    expect(a.isMaster).toBe(true);
    expect(await settled(a.handOff())).toBeUndefined();
    expect(a.isMaster).toBe(true);
    await settled(a.command(report("still the master")));
    const b = start(hub, "b", 2);
    await waitUntil(() => b.synced);
    expect(await settled(b.handOff())).toBeUndefined();
  });
});

describe("connection loss: the fast failure signal", () => {
  // Long timeouts here: whatever happens within a few tens of ms comes from the probes.
  const events = (a: ClusterAgent) => {
    const seen: { type: string; reason?: string; at: number }[] = [];
    a.on({
      event: (ev) =>
        seen.push({
          type: ev.event.type,
          at: Date.now(),
          ...("reason" in ev.event ? { reason: ev.event.reason } : {}),
        }),
    });
    return seen;
  };

  it("a worker that dropped its connection and answers no probe leaves at once, by NodeLeft 'connection lost'", async () => {
    const hub = new Hub();
    const [a, , c] = [start(hub, "a", 1), start(hub, "b", 2), start(hub, "c", 3)];
    await advance(1000);
    expect(a.isMaster).toBe(true);
    const seen = events(a);
    await c.stop(); // killed: silent, and nothing answers its ping subject
    const t0 = Date.now();
    const gone = a.connectionLost("p-c", 3, "test");
    await advance(50);
    await expect(gone).resolves.toBe(true);
    const left = seen.find((e) => e.type === "NodeLeft");
    expect(left).toMatchObject({ reason: "connection lost" });
    // Three "no responder" tries 10 ms apart, then the tick: far inside the 400 ms liveness timeout.
    expect(left!.at - t0).toBeLessThan(50);
    expect(memberNames(a)).toEqual(["a", "b"]);
  });

  it("a peer that still answers is kept, and a restarted process (another start time) is left to its heartbeats", async () => {
    const hub = new Hub();
    const [a] = [start(hub, "a", 1), start(hub, "b", 2)];
    await advance(1000);
    const seen = events(a);
    const answered = a.connectionLost("p-b", 2, "test");
    await advance(50);
    await expect(answered).resolves.toBe(false);
    const stale = a.connectionLost("p-b", 99, "test");
    await advance(50);
    await expect(stale).resolves.toBe(false);
    await advance(1000);
    expect(seen.filter((e) => e.type === "NodeLeft")).toEqual([]);
    expect(memberNames(a)).toEqual(["a", "b"]);
  });

  it("followers whose master's connection dropped elect a new master without waiting for the election timeout", async () => {
    const hub = new Hub();
    const [a, b, c] = [start(hub, "a", 1), start(hub, "b", 2), start(hub, "c", 3)];
    await advance(1000);
    const s1 = a.sessionId;
    await a.stop();
    const t0 = Date.now();
    const lost = [b.connectionLost("p-a", 1, "test"), c.connectionLost("p-a", 1, "test")];
    await waitUntil(() => b.isMaster && c.sessionId === b.sessionId && c.synced);
    await expect(Promise.all(lost)).resolves.toEqual([true, true]);
    expect(b.sessionId).not.toBe(s1);
    expect(Date.now() - t0).toBeLessThan(timings.electionTimeoutMs / 2);
    expect(memberNames(b)).toEqual(["b", "c"]);
  });

  it("a node the master declared gone is not carried into the next session by a follower that still heard it recently", async () => {
    const hub = new Hub();
    const [a, b, c, d] = [
      start(hub, "a", 1),
      start(hub, "b", 2),
      start(hub, "c", 3),
      start(hub, "d", 4),
    ];
    await advance(1000);
    await d.stop();
    const gone = a.connectionLost("p-d", 4, "test");
    await advance(50);
    await expect(gone).resolves.toBe(true);
    await waitUntil(() => memberNames(b).length === 3);
    // Right after, the master dies too: b and c were never told d is gone other than by NodeLeft.
    await a.stop();
    const lost = [b.connectionLost("p-a", 1, "test"), c.connectionLost("p-a", 1, "test")];
    await waitUntil(() => b.isMaster && c.sessionId === b.sessionId && c.synced);
    await Promise.all(lost);
    expect(memberNames(b)).toEqual(["b", "c"]);
  });

  it("a peer declared gone while only cut off rejoins when it is heard again", async () => {
    const hub = new Hub();
    const [a, , c] = [start(hub, "a", 1), start(hub, "b", 2), start(hub, "c", 3)];
    await advance(1000);
    hub.partition(["c"], ["a", "b", "c"]);
    const gone = a.connectionLost("p-c", 3, "test");
    await advance(50);
    await expect(gone).resolves.toBe(true);
    expect(memberNames(a)).toEqual(["a", "b"]);
    hub.cut.clear();
    await waitUntil(() => memberNames(a).length === 3 && c.sessionId === a.sessionId);
    expect(memberNames(a)).toEqual(["a", "b", "c"]);
  });
});

describe("partition and heal", () => {
  const ALL = ["a", "b", "c", "d"];

  async function fourNodes(hub: Hub) {
    const nodes = ALL.map((n, i) => start(hub, n, i + 1));
    await advance(1000);
    for (const n of nodes) expect(n.sessionId).toBe(nodes[0]!.sessionId);
    expect(nodes[0]!.isMaster).toBe(true);
    return nodes as [ClusterAgent, ClusterAgent, ClusterAgent, ClusterAgent];
  }

  it("the old master cut off alone keeps its session while cut and joins the majority's at the heal", async () => {
    const hub = new Hub();
    const [a, b, c, d] = await fourNodes(hub);
    const s1 = a.sessionId;
    hub.partition(["a"], ALL);
    await advance(1500);
    // Split-brain: both sides have a master.
    expect(a.isMaster).toBe(true);
    expect(a.sessionId).toBe(s1);
    expect(memberNames(a)).toEqual(["a"]);
    const s2 = b.sessionId;
    expect(s2).not.toBe(s1);
    expect(b.isMaster).toBe(true);
    for (const n of [c, d]) expect(n.sessionId).toBe(s2);
    expect(memberNames(b)).toEqual(["b", "c", "d"]);
    hub.cut.clear();
    await advance(1500);
    for (const n of [a, b, c, d]) {
      expect(n.sessionId).toBe(s2);
      expect(n.synced).toBe(true);
      expect(memberNames(n)).toEqual(ALL);
    }
    expect([a, b, c, d].filter((n) => n.isMaster)).toEqual([b]);
  });

  it("a follower cut off alone elects itself and rejoins the majority's session at the heal", async () => {
    const hub = new Hub();
    const [a, b, c, d] = await fourNodes(hub);
    const s1 = a.sessionId;
    hub.partition(["d"], ALL);
    await advance(1500);
    expect(d.isMaster).toBe(true);
    expect(d.sessionId).not.toBe(s1);
    expect(memberNames(d)).toEqual(["d"]);
    expect(memberNames(a)).toEqual(["a", "b", "c"]);
    hub.cut.clear();
    await advance(1500);
    for (const n of [a, b, c, d]) {
      expect(n.sessionId).toBe(s1);
      expect(memberNames(n)).toEqual(ALL);
    }
    expect([a, b, c, d].filter((n) => n.isMaster)).toEqual([a]);
  });
});

describe("placement re-check in the sequencer", () => {
  const G = 1e9;
  const tele = (gb: number, usable = true): Telemetry => ({
    memory_total_bytes: gb * G,
    memory_free_bytes: gb * G,
    gpus: [],
    disk_free_bytes: null,
    engine: { server_bin: "/e", rpc_bin: "/r", backend: "cpu", usable, overridden: false },
    declared_backend: "auto",
  });
  const model: ModelRecord = {
    model_id: "org/m" as ModelId,
    file: "m.gguf",
    bytes: 5 * G,
    architecture: "llama",
    layers: 8,
    context_length: 0,
    embedding_length: 64,
    head_count: 4,
    head_count_kv: 4,
    supports_tensor: true,
  };
  /** An instance decided from a view in which `node` was empty: the whole model, 6 GB required. */
  const decided = (on: ClusterAgent): Instance => {
    const node_id = on.nodeId as NodeId;
    return {
      instance_id: `i-${randomUUID()}` as InstanceId,
      model_id: model.model_id,
      sharding: "Pipeline",
      created_at: Date.now(),
      assignments: [
        {
          node_id,
          peer_key: on.peerKey,
          rank: 0,
          layers: 8,
          weight_bytes: 5 * G,
          required_bytes: 6 * G,
        },
      ],
    };
  };

  it("two placements decided on the same free memory: the first sequenced wins, the other gets insufficient_memory", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(10));
    await advance(500);
    const b = start(hub, "b", 2, tele(10));
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    await a.command({ type: "RegisterModel", model });
    // Both gateways decided before either instance was sequenced: both chose node b.
    const settled = Promise.allSettled([
      b.command({ type: "PlaceInstance", instance: decided(b) }),
      a.command({ type: "PlaceInstance", instance: decided(b) }),
    ]);
    await advance(50);
    const results = await settled;
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r) => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    const err = (lost[0] as PromiseRejectedResult).reason as ServiceError;
    expect(err).toBeInstanceOf(ServiceError);
    expect(err.code).toBe("insufficient_memory");
    expect(err.details).toEqual({ node_id: b.nodeId });
    expect(err.message).toContain(`node b (${b.nodeId}) cannot fit its share (the whole model)`);
    expect(err.message).toContain("needs 6.00 GB");
    expect(err.message).toContain("but has 4.00 GB free");
    expect(Object.keys(a.snapshot().instances)).toHaveLength(1);
  });

  it("refuses a node whose engine is unusable with node_unhealthy naming it", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(10));
    await advance(500);
    const b = start(hub, "b", 2, tele(10, false));
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    await a.command({ type: "RegisterModel", model });
    const err = await a.command({ type: "PlaceInstance", instance: decided(b) }).then(
      () => undefined,
      (e: unknown) => e as ServiceError,
    );
    expect(err?.code).toBe("node_unhealthy");
    expect(err?.details).toEqual({ node_id: b.nodeId, health_code: "invalid_engine_binary" });
    expect(err?.message).toContain(`node b (${b.nodeId}) is not a candidate`);
  });

  it("a deployment whose node is lost is placed again on a survivor by the master's tick", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(10));
    await advance(500);
    const b = start(hub, "b", 2, tele(10));
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    await a.command({ type: "RegisterModel", model });
    const first = decided(b);
    await a.command({
      type: "PlaceInstance",
      instance: first,
      deployment: { min_nodes: 1, sharding: "Pipeline", excluded_nodes: [] },
    });
    const [d] = Object.values(a.snapshot().deployments);
    expect(d).toMatchObject({ instance_id: first.instance_id, status: "Placed" });
    await b.stop();
    await waitUntil(() => {
      const dep = a.snapshot().deployments[d!.deployment_id];
      return dep !== undefined && dep.instance_id !== first.instance_id;
    });
    const dep = a.snapshot().deployments[d!.deployment_id]!;
    expect(dep.status).toBe("Placed");
    expect(a.snapshot().instances[dep.instance_id]!.assignments[0]!.node_id).toBe(a.nodeId);
  });

  it("a stall of the master's own event loop is not taken for the silence of its members", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    await advance(500);
    const b = start(hub, "b", 2);
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    const left: string[] = [];
    a.on({ event: (ev) => void (ev.event.type === "NodeLeft" && left.push(ev.event.node_id)) });
    // a's process stalls for 3 liveness timeouts while b keeps sending. When a's loop resumes, its
    // overdue tick timer runs first (timers come before I/O in a loop turn), then b's heartbeats,
    // which waited unread in the socket, are delivered.
    vi.setSystemTime(Date.now() + 3 * timings.livenessTimeoutMs);
    (a as unknown as { onTickTimer(tickMs: number): void }).onTickTimer(30);
    b.publishHeartbeat();
    await advance(300);
    expect(left).toEqual([]);
    expect(memberNames(a)).toEqual(["a", "b"]);
    // A real silence is still a departure, within the liveness timeout and a few ticks.
    await b.stop();
    await advance(timings.livenessTimeoutMs + 200);
    expect(memberNames(a)).toEqual(["a"]);
    expect(left).toHaveLength(1);
  });

  /** An intent store in memory that outlives the agents (as JetStream outlives the processes). */
  class MemoryIntentStore implements IntentStore {
    readonly deployments = new Map<string, DeploymentIntent>();
    readonly models = new Map<string, ModelRecord>();
    initialized = false;
    available = true;
    /** Writes wait for this (a slow quorum). */
    gate: Promise<void> = Promise.resolve();
    writes: IntentWrite[] = [];
    /** Writes are committed, but the caller is told they failed (an acknowledgement lost). */
    lostAck = false;
    private check() {
      if (!this.available) throw new ServiceError("no_quorum", "no quorum of the intent store");
    }
    async load(): Promise<Intent> {
      this.check();
      return {
        deployments: [...this.deployments.values()],
        models: [...this.models.values()],
        initialized: this.initialized,
      };
    }
    async apply(writes: readonly IntentWrite[]): Promise<void> {
      this.check();
      await this.gate;
      this.check();
      for (const w of writes) {
        this.writes.push(w);
        if (w.op === "put_deployment")
          this.deployments.set(w.deployment.deployment_id, w.deployment);
        if (w.op === "delete_deployment") this.deployments.delete(w.deployment_id);
        if (w.op === "put_model") this.models.set(w.model.model_id, w.model);
        if (w.op === "delete_model") this.models.delete(w.model_id);
      }
      if (writes.length > 0) this.initialized = true;
      if (this.lostAck) throw new ServiceError("no_quorum", "the acknowledgement was lost");
    }
  }

  const deployment = { min_nodes: 1, sharding: "Pipeline" as const, excluded_nodes: [] };

  it("after every node stopped, a new master restores each deployment from the intent store and places it again", async () => {
    const store = new MemoryIntentStore();
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(10), { intents: store });
    await advance(500);
    const b = start(hub, "b", 2, tele(10), { intents: store });
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    await a.command({ type: "RegisterModel", model });
    const placed = b.command({ type: "PlaceInstance", instance: decided(b), deployment });
    await advance(50);
    await placed;
    const [d] = Object.values(a.snapshot().deployments);
    expect([...store.deployments.keys()]).toEqual([d!.deployment_id]);
    // Every node stops; new processes (empty replicas) start on the same store.
    await a.stop();
    await b.stop();
    const hub2 = new Hub();
    const a2 = start(hub2, "a", 10, tele(10), { intents: store });
    const seen: string[] = [];
    a2.on({
      event: (ev) =>
        void seen.push(
          ev.event.type === "SessionStarted"
            ? `SessionStarted:${ev.event.intent_restored}`
            : ev.event.type,
        ),
    });
    await advance(500);
    const b2 = start(hub2, "b", 11, tele(10), { intents: store });
    await waitUntil(() => b2.synced && memberNames(a2).length === 2);
    await waitUntil(() => {
      const dep = b2.snapshot().deployments[d!.deployment_id];
      return dep?.status === "Placed" && b2.snapshot().instances[dep.instance_id] !== undefined;
    });
    // The session said its intent was not whole until the master restored it.
    expect(b2.snapshot().intent_restored).toBe(true);
    expect(seen[0]).toBe("SessionStarted:false");
    expect(seen).toContain("IntentRestored");
    expect(a2.snapshot().models[model.model_id]).toEqual(model);
  });

  it("a master without a quorum of the intent store refuses intent changes with no_quorum and changes nothing; chat tasks go on", async () => {
    const store = new MemoryIntentStore();
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(20), { intents: store });
    await advance(500);
    await a.command({ type: "RegisterModel", model });
    const inst = decided(a);
    await a.command({ type: "PlaceInstance", instance: inst });
    store.available = false;
    const index = a.snapshot().index;
    const err = await a.command({ type: "PlaceInstance", instance: decided(a), deployment }).then(
      () => undefined,
      (e: unknown) => e as ServiceError,
    );
    expect(err?.code).toBe("no_quorum");
    expect(err?.retryable).toBe(true);
    expect(a.snapshot().index).toBe(index);
    expect(a.snapshot().deployments).toEqual({});
    // Chat does not wait for the store.
    const t = await a.command({
      type: "CreateTask",
      command_id: "c-1" as never,
      model_id: model.model_id,
      instance_id: inst.instance_id,
    });
    expect(t.task_id).toMatch(/^t-/);
    // The master says so in its health once the store has failed for a while.
    await advance(6000);
    expect(a.heartbeat().health.map((h) => h.code)).toContain("intent_store_unavailable");
    store.available = true;
    await a.command({ type: "PlaceInstance", instance: decided(a), deployment }).catch(() => {});
    expect(a.heartbeat().health.map((h) => h.code)).not.toContain("intent_store_unavailable");
  });

  it("a refused write that the store commits after all (its ack was lost) is undone once the store answers", async () => {
    const store = new MemoryIntentStore();
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(20), { intents: store });
    await advance(500);
    await a.command({ type: "RegisterModel", model });
    store.lostAck = true;
    const err = await a.command({ type: "PlaceInstance", instance: decided(a), deployment }).then(
      () => undefined,
      (e: unknown) => e as ServiceError,
    );
    expect(err?.code).toBe("no_quorum");
    expect(store.deployments.size).toBe(1); // committed although refused
    expect(a.snapshot().deployments).toEqual({});
    store.lostAck = false;
    await waitUntil(() => store.deployments.size === 0);
    expect(a.snapshot().deployments).toEqual({});
  });

  it("a placement that loses its race while its write waits on the store is refused, and its write undone", async () => {
    const store = new MemoryIntentStore();
    const hub = new Hub();
    const a = start(hub, "a", 1, tele(10), { intents: store });
    await advance(500);
    const b = start(hub, "b", 2, tele(10), { intents: store });
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    await a.command({ type: "RegisterModel", model });
    let release!: () => void;
    store.gate = new Promise((r) => (release = r));
    // The deployment's write waits; meanwhile a plain placement (no intent) takes b's memory.
    const pending = a.command({ type: "PlaceInstance", instance: decided(b), deployment }).then(
      () => undefined,
      (e: unknown) => e as ServiceError,
    );
    await advance(5);
    await a.command({ type: "PlaceInstance", instance: decided(b) });
    release();
    const err = await pending;
    expect(err?.code).toBe("insufficient_memory");
    expect(store.deployments.size).toBe(0);
    expect(store.writes.map((w) => w.op)).toEqual([
      "put_model",
      "put_deployment",
      "delete_deployment",
    ]);
    expect(a.snapshot().deployments).toEqual({});
  });

  describe("limits per token, counted by the master for every gateway", () => {
    /** A master a, a follower b, an instance of the model; CreateTask as either gateway sends it. */
    async function twoGateways() {
      const hub = new Hub();
      const a = start(hub, "a", 1, tele(20));
      await advance(500);
      const b = start(hub, "b", 2, tele(20));
      await waitUntil(() => b.synced && memberNames(a).length === 2);
      await a.command({ type: "RegisterModel", model });
      const inst = decided(a);
      await a.command({ type: "PlaceInstance", instance: inst });
      let n = 0;
      const create = (on: ClusterAgent, token?: { name: string; limits: TokenLimits }) => {
        const p = on.command({
          type: "CreateTask",
          command_id: `c-${++n}` as never,
          model_id: model.model_id,
          instance_id: inst.instance_id,
          ...(token ? { token } : {}),
        });
        return p.then(
          (r) => ({ ok: true as const, task: r.task_id! }),
          (e: unknown) => ({ ok: false as const, error: e as ServiceError }),
        );
      };
      const send = async <T>(p: Promise<T>) => {
        await advance(5);
        return p;
      };
      return {
        a,
        b,
        inst,
        create: (on: ClusterAgent, t?: { name: string; limits: TokenLimits }) =>
          send(create(on, t)),
        send,
      };
    }

    it("requests_per_minute: the requests of both gateways count; the next is refused rate_limited with Retry-After until the minute has passed", async () => {
      const { a, b, create } = await twoGateways();
      const alice = { name: "alice", limits: { requests_per_minute: 3 } };
      const results = [await create(a, alice), await create(b, alice), await create(b, alice)];
      expect(results.map((r) => r.ok)).toEqual([true, true, true]);
      const refused = await create(a, alice);
      expect(refused.ok).toBe(false);
      const err = (refused as { error: ServiceError }).error;
      expect(err.code).toBe("rate_limited");
      expect(err.retryable).toBe(true);
      expect(err.message).toContain('token "alice" reached its limit of 3 requests per minute');
      expect(err.details).toMatchObject({
        token: "alice",
        limit: "requests_per_minute",
        value: 3,
        used: 3,
      });
      expect(err.retryAfterS).toBeGreaterThanOrEqual(55);
      expect(err.retryAfterS).toBeLessThanOrEqual(61);
      // The refused request did not count; other tokens and unlimited requests are not affected.
      expect((await create(b, { name: "bob", limits: { requests_per_minute: 3 } })).ok).toBe(true);
      expect((await create(b)).ok).toBe(true);
      // Retry-After is right: a second before it the window is still full; at it, a request passes.
      await advance((err.retryAfterS! - 1) * 1000);
      expect((await create(b, alice)).ok).toBe(false);
      await advance(1000);
      expect((await create(b, alice)).ok).toBe(true);
    });

    it("concurrent_requests: open tasks count; a finished or failed task frees its place", async () => {
      const { a, b, create, send } = await twoGateways();
      const carol = { name: "carol", limits: { concurrent_requests: 2 } };
      const t1 = await create(a, carol);
      const t2 = await create(b, carol);
      const third = await create(a, carol);
      expect([t1.ok, t2.ok, third.ok]).toEqual([true, true, false]);
      expect((third as { error: ServiceError }).error.details).toMatchObject({
        limit: "concurrent_requests",
        used: 2,
      });
      expect((third as { error: ServiceError }).error.retryAfterS).toBe(1);
      await send(b.command({ type: "FinishTask", task_id: (t1 as { task: TaskId }).task }));
      expect((await create(a, carol)).ok).toBe(true);
      await send(
        a.command({ type: "FailTask", task_id: (t2 as { task: TaskId }).task, reason: "x" }),
      );
      expect((await create(b, carol)).ok).toBe(true);
      expect((await create(b, carol)).ok).toBe(false);
    });

    it("finished tasks a CreateTask carries end before it is decided, and also when it is refused", async () => {
      const { a, b, inst, create, send } = await twoGateways();
      const erin = { name: "erin", limits: { concurrent_requests: 2, tokens_per_minute: 100 } };
      const t1 = (await create(a, erin)) as { task: TaskId };
      const t2 = (await create(b, erin)) as { task: TaskId };
      expect((await create(a, erin)).ok).toBe(false);
      // t1's end rides on the next CreateTask: its place is free for the task it asks for.
      const t3 = await send(
        a
          .command({
            type: "CreateTask",
            command_id: "c-x" as never,
            model_id: model.model_id,
            instance_id: inst.instance_id,
            token: erin,
            finished: [{ task_id: t1.task, tokens: 30 }],
          })
          .catch((e: unknown) => e),
      );
      expect(t3).toMatchObject({ ok: true });
      // A CreateTask refused (its instance is gone) still ends what it carries: t2's place frees.
      const refused = await send(
        b
          .command({
            type: "CreateTask",
            command_id: "c-y" as never,
            model_id: model.model_id,
            instance_id: "inst-gone" as never,
            finished: [{ task_id: t2.task, tokens: 80 }],
          })
          .catch((e: unknown) => e as ServiceError),
      );
      expect((refused as ServiceError).code).toBe("instance_lost");
      // Both ended with their tokens counted: 110 of 100 in the minute, so the next is refused on
      // tokens, not on concurrency.
      const next = await create(b, erin);
      expect((next as { error: ServiceError }).error.details).toMatchObject({
        limit: "tokens_per_minute",
        used: 110,
      });
    });

    it("tokens_per_minute: the tokens FinishTask reports count, and a new request waits for them to leave the window", async () => {
      const { a, b, create, send } = await twoGateways();
      const dave = { name: "dave", limits: { tokens_per_minute: 100 } };
      const t1 = await create(a, dave);
      await send(
        b.command({ type: "FinishTask", task_id: (t1 as { task: TaskId }).task, tokens: 60 }),
      );
      const t2 = await create(b, dave);
      expect(t2.ok).toBe(true);
      await advance(10_000);
      await send(
        a.command({ type: "FinishTask", task_id: (t2 as { task: TaskId }).task, tokens: 50 }),
      );
      const refused = await create(a, dave);
      const err = (refused as { error: ServiceError }).error;
      expect(err.code).toBe("rate_limited");
      expect(err.details).toMatchObject({ limit: "tokens_per_minute", value: 100, used: 110 });
      // 60 tokens leave the window first, which brings it under the limit: about 50 s from now.
      expect(err.retryAfterS).toBeGreaterThanOrEqual(45);
      expect(err.retryAfterS).toBeLessThanOrEqual(51);
      await advance(err.retryAfterS! * 1000);
      expect((await create(b, dave)).ok).toBe(true);
    });
  });
});

describe("session changes without a sync storm", () => {
  /** masterSync requests sent from now on, by sender name. */
  function countSyncs(): { by: string[]; restore: () => void } {
    const by: string[] = [];
    const request = FakeBus.prototype.request;
    const spy = vi.spyOn(FakeBus.prototype, "request");
    spy.mockImplementation(function (this: FakeBus, ...args) {
      if (args[0] === "masterSync") by.push(this.name);
      return request.apply(this, args);
    });
    return { by, restore: () => spy.mockRestore() };
  }

  it("followers that receive the new session's announcement join it without asking the master for its log", async () => {
    const hub = new Hub();
    const syncs = countSyncs();
    try {
      const [a, b, c, d] = ["a", "b", "c", "d"].map((n, i) => start(hub, n, i + 1)) as [
        ClusterAgent,
        ClusterAgent,
        ClusterAgent,
        ClusterAgent,
      ];
      await waitUntil(() => [b, c, d].every((n) => n.synced && n.sessionId === a.sessionId));
      await advance(500);
      for (const n of [b, c, d]) expect(memberNames(n)).toEqual(["a", "b", "c", "d"]);
      expect(syncs.by).toEqual([]);
      await a.stop();
      await waitUntil(
        () => b.isMaster && [c, d].every((n) => n.synced && n.sessionId === b.sessionId),
      );
      for (const n of [b, c, d]) expect(memberNames(n)).toEqual(["b", "c", "d"]);
      expect(syncs.by).toEqual([]);
    } finally {
      syncs.restore();
    }
  });

  it("a follower that still heard the dead master when the new one announced itself applies the announcement once it adopts", async () => {
    const hub = new Hub();
    const [a, b, c, d] = ["a", "b", "c", "d"].map((n, i) => start(hub, n, i + 1)) as [
      ClusterAgent,
      ClusterAgent,
      ClusterAgent,
      ClusterAgent,
    ];
    await advance(1000);
    expect(a.isMaster).toBe(true);
    // b misses a's last heartbeats: it elects itself while c and d, which heard a later, still count
    // a's session as live (and larger) and keep it for a little longer.
    hub.drop = (subject, msg, to) =>
      subject === CATALOG.heartbeat.subject &&
      to.name === "b" &&
      (msg as { peer_key: string }).peer_key === "p-a";
    await advance(2 * timings.heartbeatMs);
    await a.stop();
    const s1 = a.sessionId;
    await waitUntil(() => b.isMaster);
    const s2 = b.sessionId;
    expect(c.sessionId).toBe(s1);
    const syncs = countSyncs();
    try {
      await waitUntil(() => [c, d].every((n) => n.sessionId === s2));
      // Adopted from the held announcement: synced at once, without a request to the new master.
      for (const n of [c, d]) expect(n.synced).toBe(true);
      expect(syncs.by).toEqual([]);
      await advance(500);
      for (const n of [b, c, d]) expect(memberNames(n)).toEqual(["b", "c", "d"]);
      expect(c.snapshot().index).toBe(b.snapshot().index);
    } finally {
      syncs.restore();
    }
  });
});

describe("heartbeats on adopting a session", () => {
  /** Heartbeats published from now on: who, when, in which session. */
  function recordHeartbeats(): {
    sent: { name: string; at: number; session: string | null }[];
    restore: () => void;
  } {
    const sent: { name: string; at: number; session: string | null }[] = [];
    const publish = FakeBus.prototype.publish;
    const spy = vi.spyOn(FakeBus.prototype, "publish");
    spy.mockImplementation(function (this: FakeBus, ...args) {
      if (args[0] === "heartbeat") {
        const session = (args[1] as { session_id: string | null }).session_id;
        sent.push({ name: this.name, at: Date.now(), session });
      }
      return publish.apply(this, args);
    });
    return { sent, restore: () => spy.mockRestore() };
  }

  it("a node the new session already lists waits for its next heartbeat; one it does not list announces itself at once", async () => {
    const hub = new Hub();
    const [a, b, c] = [start(hub, "a", 1), start(hub, "b", 2), start(hub, "c", 3)];
    await advance(1000);
    const adopted = new Map<string, number>();
    for (const n of [c]) n.on({ session: () => adopted.set(n.peerKey, Date.now()) });
    const beats = recordHeartbeats();
    try {
      await a.stop();
      await waitUntil(() => b.isMaster && c.synced && c.sessionId === b.sessionId);
      const at = adopted.get(c.peerKey)!;
      await advance(2 * timings.heartbeatMs);
      // One heartbeat per period: none extra at the adoption.
      const inPeriod = beats.sent.filter(
        (h) => h.name === "c" && h.at >= at && h.at < at + timings.heartbeatMs,
      );
      expect(inPeriod).toHaveLength(1);
      // A node that starts now is not listed: it says at once that it adopted (the master adds it).
      const d = start(hub, "d", 4);
      let dAdopted = 0;
      d.on({ session: () => (dAdopted = Date.now()) });
      await waitUntil(() => d.sessionId === b.sessionId);
      expect(
        beats.sent.some((h) => h.name === "d" && h.at === dAdopted && h.session === b.sessionId),
      ).toBe(true);
      await waitUntil(() => memberNames(b).length === 3);
    } finally {
      beats.restore();
    }
  });
});

describe("a stalled event loop", () => {
  it("a follower whose loop stalled past the election timeout does not start a session of its own on its overdue tick", async () => {
    const hub = new Hub();
    const a = start(hub, "a", 1);
    await advance(500);
    const b = start(hub, "b", 2);
    await waitUntil(() => b.synced && memberNames(a).length === 2);
    const s1 = a.sessionId;
    // b's process stalls for 3 election timeouts while a keeps sending; b's overdue tick timer runs
    // before the heartbeats that waited unread in its socket.
    vi.setSystemTime(Date.now() + 3 * timings.electionTimeoutMs);
    (b as unknown as { onTickTimer(tickMs: number): void }).onTickTimer(30);
    expect(b.isMaster).toBe(false);
    expect(b.sessionId).toBe(s1);
    a.publishHeartbeat();
    await advance(300);
    expect(b.isMaster).toBe(false);
    expect(b.sessionId).toBe(s1);
    // A master that is really gone is still replaced, on the next tick that is on time.
    await a.stop();
    await waitUntil(() => b.isMaster);
    expect(b.sessionId).not.toBe(s1);
  });
});

describe("links only when they change", () => {
  function withLinks(hub: Hub, name: string, startedAt: number, links: () => Link[]) {
    const a = new ClusterAgent({
      bus: new FakeBus(hub, name) as unknown as Bus,
      log: silentLogger(),
      clock: { now: () => Date.now() },
      self: { peerKey: `p-${name}`, name, host: name, apiUrl: `http://${name}:8080`, startedAt },
      timings,
      linksRefresh: 10,
      extras: () => ({ telemetry: null, links: links(), runners: [], health: [] }),
    });
    agents.push(a);
    a.start();
    return a;
  }
  const heardLinks = (by: ClusterAgent, of: string) =>
    by.livePeers().find((p) => p.heartbeat.peer_key === `p-${of}`)?.heartbeat.links;

  it("unchanged links stay off the wire, receivers keep them, and a newcomer gets them at once", async () => {
    const hub = new Hub();
    const carried: { from: string; links: boolean }[] = [];
    hub.drop = (subject, msg, to) => {
      if (subject === CATALOG.heartbeat.subject && to.name === "b") {
        const m = msg as { peer_key: string; links?: unknown };
        carried.push({ from: m.peer_key, links: m.links !== undefined });
      }
      return false;
    };
    let aLinks: Link[] = [{ peer_key: "p-b", rtt_ms: 0.4 }];
    const a = withLinks(hub, "a", 1, () => aLinks);
    const b = withLinks(hub, "b", 2, () => [{ peer_key: "p-a", rtt_ms: 0.3 }]);
    await advance(3000); // 30 heartbeat periods
    expect(heardLinks(b, "a")).toEqual([{ peer_key: "p-b", rtt_ms: 0.4 }]);
    expect(heardLinks(a, "b")).toEqual([{ peer_key: "p-a", rtt_ms: 0.3 }]);
    // What b received from a: the first links, the ones after a heard b, a refresh per 10 heartbeats.
    const fromA = carried.filter((c) => c.from === "p-a");
    expect(fromA.length).toBeGreaterThanOrEqual(30);
    expect(fromA.filter((c) => c.links).length).toBeLessThanOrEqual(6);

    // A change beyond the tolerance goes out with the next heartbeat.
    aLinks = [{ peer_key: "p-b", rtt_ms: 5 }];
    await advance(110);
    expect(heardLinks(b, "a")).toEqual([{ peer_key: "p-b", rtt_ms: 5 }]);

    // A newcomer hears a's and b's links within a heartbeat period or two, not at the refresh.
    const c = withLinks(hub, "c", 3, () => []);
    await advance(250);
    expect(heardLinks(c, "a")).toEqual([{ peer_key: "p-b", rtt_ms: 5 }]);
    expect(heardLinks(c, "b")).toEqual([{ peer_key: "p-a", rtt_ms: 0.3 }]);
  });

  it("a peer whose links were lost on the way counts as having none until its refresh", async () => {
    const hub = new Hub();
    const a = withLinks(hub, "a", 1, () => []);
    // b's heartbeats that carry links are lost on the way to a.
    hub.drop = (subject, msg, to) =>
      subject === CATALOG.heartbeat.subject &&
      to.name === "a" &&
      (msg as { links?: unknown }).links !== undefined;
    withLinks(hub, "b", 2, () => [{ peer_key: "p-a", rtt_ms: 0.7 }]);
    await advance(300);
    expect(heardLinks(a, "b")).toEqual([]);
    hub.drop = () => false;
    await advance(1100); // b's refresh (10 heartbeats)
    expect(heardLinks(a, "b")).toEqual([{ peer_key: "p-a", rtt_ms: 0.7 }]);
  });
});
