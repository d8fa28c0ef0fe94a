import { connect as tcpConnect } from "node:net";
import { describe, expect, it } from "vitest";
import { clusterCredentials } from "@ic/config";
import { silentLogger } from "@ic/log";
import { freePorts, waitFor } from "@ic/testkit";
import type { Heartbeat, HeartbeatMessage } from "@ic/protocol";
import { Bus, NatsServer } from "./index.ts";
import type { AuthFailure, NatsServerOptions } from "./index.ts";

const log = silentLogger();
const creds = clusterCredentials("the-cluster-secret-for-tests");
const strangerCreds = clusterCredentials("some-other-clusters-secret");

function server(
  o: Partial<NatsServerOptions> & { clusterPort?: number; routes?: string[] } = {},
  c = creds,
): NatsServer {
  return new NatsServer({
    bind: "127.0.0.1",
    host: "127.0.0.1",
    clientBind: "127.0.0.1",
    clientPort: 0,
    clusterPort: 0,
    clusterName: "t",
    routes: [],
    clientAuth: c.busClient,
    routeAuth: c.busRoute,
    log,
    ...o,
  });
}

function connectBus(s: NatsServer, c = creds): Promise<Bus> {
  return Bus.connect(s.clientUrl, log, c.busClient);
}

/** Speaks raw NATS protocol: CONNECT with the given fields, PING; returns what the server said. */
function rawLogin(url: string, connect: Record<string, unknown>): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let got = "";
    const s = tcpConnect({ host: hostname, port: Number(port) });
    const done = () => {
      s.destroy();
      resolve(got);
    };
    s.on("data", (d: Buffer) => {
      got += d.toString();
      if (got.startsWith("INFO") && !got.includes("CONNECT_SENT")) {
        s.write(`CONNECT ${JSON.stringify({ verbose: false, ...connect })}\r\nPING\r\n`);
        got += "CONNECT_SENT\n";
      }
      if (/PONG|-ERR/.test(got)) done();
    });
    s.on("error", done);
    s.on("close", done);
    setTimeout(done, 3000).unref();
  });
}

function heartbeat(peer: string): Heartbeat {
  return {
    peer_key: peer,
    name: peer,
    host: "127.0.0.1",
    api_url: "http://127.0.0.1:1",
    started_at: 1,
    session_id: null,
    master_peer_key: null,
    is_master: false,
    last_index: 0,
    telemetry: null,
    links: [],
    runners: [],
    health: [],
    sent_at: Date.now(),
  };
}

/** A server without routes, on free ports. */
function loneServer(extra: { restartBackoffMs?: number } = {}): NatsServer {
  return server(extra);
}

describe("embedded nats-server", () => {
  it("two clustered servers carry messages between their clients and drop invalid ones", async () => {
    const [c1, c2] = await freePorts(2);
    await using a = server({ clusterPort: c1!, routes: [`127.0.0.1:${c2}`] });
    await using b = server({ clusterPort: c2!, routes: [`127.0.0.1:${c1}`] });
    await Promise.all([a.start(), b.start()]);
    await using busA = await connectBus(a);
    await using busB = await connectBus(b);
    const seen: string[] = [];
    busB.subscribe("heartbeat", (m) => seen.push(m.peer_key));
    await busB.flush();
    // Routes take a moment to form; keep publishing until one crosses.
    await waitFor(
      async () => {
        busA.publish("heartbeat", heartbeat("from-a"));
        // An invalid message (missing fields) must never reach the handler.
        busA.publish("heartbeat", { peer_key: "bad" } as unknown as Heartbeat);
        await busA.flush();
        return seen.includes("from-a") ? true : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 100, what: "route between servers" },
    );
    expect(seen.every((p) => p === "from-a")).toBe(true);
  });

  it("serves the monitoring endpoint only when asked, and its counters see client messages", async () => {
    await using plain = loneServer();
    await plain.start();
    expect(plain.monitorUrl).toBeUndefined();
    await using s = server({ monitor: true });
    await s.start();
    expect(s.monitorUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    await using bus = await connectBus(s);
    const varz = async () =>
      (await (await fetch(`${s.monitorUrl!}/varz`)).json()) as { in_msgs: number };
    const before = (await varz()).in_msgs;
    for (let i = 0; i < 3; i++) bus.publish("heartbeat", heartbeat("p"));
    await bus.flush();
    expect((await varz()).in_msgs - before).toBe(3);
  });

  it("handlers of one subject on one connection share a delivery: sent once, decoded once, each handler on its own", async () => {
    await using s = server({ monitor: true });
    await s.start();
    await using bus = await connectBus(s);
    await using other = await connectBus(s);
    const outMsgs = async () =>
      ((await (await fetch(`${s.monitorUrl!}/varz`)).json()) as { out_msgs: number }).out_msgs;
    const first: HeartbeatMessage[] = [];
    const second: HeartbeatMessage[] = [];
    const ownIgnored: string[] = [];
    const offFirst = bus.subscribe("heartbeat", (m) => {
      first.push(m);
      throw new Error("a failing handler keeps no other from the message");
    });
    bus.subscribe("heartbeat", (m) => second.push(m));
    bus.subscribe("heartbeat", (m) => ownIgnored.push(m.peer_key), { ignoreOwn: true });
    await bus.flush();
    const before = await outMsgs();
    other.publish("heartbeat", { peer_key: "bad" } as unknown as Heartbeat);
    other.publish("heartbeat", heartbeat("from-other"));
    await other.flush();
    bus.publish("heartbeat", heartbeat("from-self"));
    await bus.flush();
    await waitFor(() => (second.length === 2 ? true : undefined), { timeoutMs: 5000 });
    // Three messages, one connection subscribed: three deliveries, not one per handler.
    await waitFor(async () => ((await outMsgs()) - before >= 3 ? true : undefined), {
      timeoutMs: 5000,
    });
    await new Promise((r) => setTimeout(r, 100));
    expect((await outMsgs()) - before).toBe(3);
    expect(first.map((m) => m.peer_key)).toEqual(["from-other", "from-self"]);
    expect(second[0]).toBe(first[0]);
    expect(ownIgnored).toEqual(["from-other"]);
    offFirst();
    other.publish("heartbeat", heartbeat("after"));
    await waitFor(() => (second.length === 3 ? true : undefined), { timeoutMs: 5000 });
    expect(first).toHaveLength(2);
  });

  it("ignoreOwn drops only what the same connection published", async () => {
    await using s = loneServer();
    await s.start();
    await using busA = await connectBus(s);
    await using busB = await connectBus(s);
    const ownIgnored: string[] = [];
    const all: string[] = [];
    busA.subscribe("heartbeat", (m) => ownIgnored.push(m.peer_key), { ignoreOwn: true });
    busA.subscribe("heartbeat", (m) => all.push(m.peer_key));
    await busA.flush();
    busA.publish("heartbeat", heartbeat("from-a"));
    busB.publish("heartbeat", heartbeat("from-b"));
    await busB.flush();
    await waitFor(() => (all.length === 2 ? true : undefined), {
      timeoutMs: 5000,
      intervalMs: 20,
      what: "both messages",
    });
    expect(all.sort()).toEqual(["from-a", "from-b"]);
    expect(ownIgnored).toEqual(["from-b"]);
  });

  it("restarts a killed server on the same port and clients reconnect", async () => {
    await using s = loneServer({ restartBackoffMs: 50 });
    await s.start();
    const url = s.clientUrl;
    await using bus = await connectBus(s);
    const pid = s.status.pid!;
    process.kill(pid, "SIGKILL");
    await waitFor(
      () =>
        s.status.pid && s.status.pid !== pid && s.status.state === "running" ? true : undefined,
      {
        timeoutMs: 10_000,
        what: "restart",
      },
    );
    expect(s.clientUrl).toBe(url);
    expect(s.status.restarts).toBe(1);
    const got: string[] = [];
    bus.subscribe("heartbeat", (m) => got.push(m.peer_key));
    await waitFor(
      async () => {
        bus.publish("heartbeat", heartbeat("again"));
        return got.length > 0 ? true : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 100, what: "reconnected delivery" },
    );
  });

  it("refuses a raw client without the secret, and with a wrong one, but admits the right one", async () => {
    const failures: AuthFailure[] = [];
    await using s = server({ onAuthFailure: (f) => failures.push(f) });
    await s.start();
    expect(await rawLogin(s.clientUrl, {})).toMatch(/-ERR 'Authorization Violation'/);
    expect(
      await rawLogin(s.clientUrl, { user: creds.busClient.user, pass: "wrong-password" }),
    ).toMatch(/-ERR 'Authorization Violation'/);
    expect(
      await rawLogin(s.clientUrl, { user: creds.busClient.user, pass: creds.busClient.password }),
    ).toMatch(/PONG/);
    await expect(Bus.connect(s.clientUrl, log, strangerCreds.busClient)).rejects.toThrow();
    await waitFor(() => (failures.length >= 2 ? true : undefined), {
      timeoutMs: 5000,
      what: "auth failures reported",
    });
    expect(failures.every((f) => f.direction === "client-rejected")).toBe(true);
  });

  it("a foreign nats-server without the secret cannot route in, and both sides say so", async () => {
    const [c1, c2] = await freePorts(2);
    const ours: AuthFailure[] = [];
    const theirs: AuthFailure[] = [];
    await using a = server({
      clusterPort: c1!,
      routes: [`127.0.0.1:${c2}`],
      onAuthFailure: (f) => ours.push(f),
    });
    await using foreign = server(
      { clusterPort: c2!, routes: [`127.0.0.1:${c1}`], onAuthFailure: (f) => theirs.push(f) },
      strangerCreds,
    );
    await Promise.all([a.start(), foreign.start()]);
    await using busA = await connectBus(a);
    await using busF = await connectBus(foreign, strangerCreds);
    const leaked: string[] = [];
    busA.subscribe("heartbeat", (m) => leaked.push(m.peer_key));
    busF.subscribe("heartbeat", (m) => leaked.push(m.peer_key));
    await Promise.all([busA.flush(), busF.flush()]);
    await waitFor(
      () =>
        ours.some((f) => f.direction === "route-rejected") &&
        ours.some((f) => f.direction === "route-refused-by-peer") &&
        theirs.some((f) => f.direction === "route-refused-by-peer")
          ? true
          : undefined,
      { timeoutMs: 10_000, intervalMs: 50, what: "route refusals on both sides" },
    );
    for (let i = 0; i < 5; i++) {
      busF.publish("heartbeat", heartbeat("from-foreign"));
      busA.publish("heartbeat", heartbeat("from-ours"));
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all([busA.flush(), busF.flush()]);
    // Each side hears only itself.
    expect(leaked.filter((p) => p === "from-foreign")).toHaveLength(5);
    expect(leaked.filter((p) => p === "from-ours")).toHaveLength(5);
    expect(leaked.filter((p) => p !== "from-foreign" && p !== "from-ours")).toEqual([]);
  });

  it("a request bound to one origin ignores faster replies from anyone else", async () => {
    await using s = loneServer();
    await s.start();
    await using rightful = await connectBus(s);
    await using rogue = await connectBus(s);
    await using asker = await connectBus(s);
    // The rogue answers at once with a refusal; the rightful responder answers later with events.
    rogue.respond("masterSync", () => ({
      ok: false as const,
      error: { code: "conflict" as const, message: "rogue" },
    }));
    rightful.respond("masterSync", async () => {
      await new Promise((r) => setTimeout(r, 100));
      return { ok: true as const, events: [], last_index: 0 };
    });
    await Promise.all([rogue.flush(), rightful.flush()]);
    const msg = { session_id: "s-1" as never, from_index: 1 };
    // Unbound, the first (rogue) answer wins; bound to the rightful origin, it never counts.
    const unbound = await asker.request("masterSync", msg, { timeoutMs: 2000 });
    expect(unbound.ok).toBe(false);
    await expect(
      asker.request("masterSync", msg, { timeoutMs: 2000, from: rightful.origin }),
    ).resolves.toMatchObject({ ok: true });
    await expect(
      asker.request("masterSync", msg, { timeoutMs: 300, from: "someone-else" }),
    ).rejects.toThrow(/no reply from the expected responder/);
    // Requests name their origin to the responder too (both forms of request).
    const seen: (string | undefined)[] = [];
    await using probe = await connectBus(s);
    probe.respond(
      "masterCommand",
      (_m, meta) => {
        seen.push(meta.origin);
        return { ok: true as const, index: 0 };
      },
      { suffix: "probe" },
    );
    await probe.flush();
    const cmd = {
      session_id: "s-1" as never,
      from_node_id: "n-1" as never,
      command: { type: "FinishTask" as const, task_id: "t-1" as never },
    };
    await asker.request("masterCommand", cmd, { timeoutMs: 2000, suffix: "probe" });
    await asker.request("masterCommand", cmd, {
      timeoutMs: 2000,
      suffix: "probe",
      from: probe.origin,
    });
    expect(seen).toEqual([asker.origin, asker.origin]);
  });

  it("a reply over max_payload or on a closed connection is logged and counted, and the responder keeps serving", async () => {
    await using s = loneServer();
    await s.start();
    await using responder = await connectBus(s);
    await using asker = await connectBus(s);
    const huge = "x".repeat(responder.maxPayload + 1);
    responder.respond(
      "nodeRead",
      (m) => ({ peer_key: "p", status: 200, body: m.path === "/big" ? huge : "small" }),
      { suffix: "p" },
    );
    await responder.flush();
    // The oversized reply cannot be sent: the asker meets its timeout, nothing is thrown anywhere
    // (an unhandled rejection fails this test run).
    await expect(
      asker.request("nodeRead", { path: "/big" }, { timeoutMs: 300, suffix: "p" }),
    ).rejects.toThrow(/timed out/);
    await expect(
      asker.request("nodeRead", { path: "/small" }, { timeoutMs: 2000, suffix: "p" }),
    ).resolves.toMatchObject({ body: "small" });
    const failures = [...responder.sendStats.failures.values()];
    expect(failures).toEqual([
      { op: "respond", name: "nodeRead", code: "MAX_PAYLOAD_EXCEEDED", count: 1 },
    ]);
    expect(responder.sendStats.largest.get("nodeRead")).toBeGreaterThan(responder.maxPayload);
    // Traffic counts what went through: the asker's two requests in, the one small reply out.
    const t = responder.sendStats.traffic;
    expect(t.inMsgs).toBeGreaterThanOrEqual(2);
    expect(t.outMsgs).toBeGreaterThanOrEqual(1);
    expect(asker.sendStats.traffic.inBytes).toBeGreaterThan(0);

    // A publish over the limit is refused as a value; a request over it is a typed error.
    expect(asker.publish("heartbeat", { big: huge } as never)).toBe(false);
    await expect(
      asker.request("nodeRead", { path: huge }, { timeoutMs: 300, suffix: "p" }),
    ).rejects.toMatchObject({ code: "unavailable" });
    expect([...asker.sendStats.failures.keys()].sort()).toEqual([
      "publish|heartbeat|MAX_PAYLOAD_EXCEEDED",
      "request|nodeRead|MAX_PAYLOAD_EXCEEDED",
    ]);

    // The responder's connection closes while its handler is still working: the reply is counted
    // as failed, not thrown.
    await using closing = await connectBus(s);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let answered!: () => void;
    const handled = new Promise<void>((r) => (answered = r));
    closing.respond(
      "nodeRead",
      async () => {
        await gate;
        setImmediate(answered);
        return { peer_key: "c", status: 200, body: "late" };
      },
      { suffix: "c" },
    );
    await closing.flush();
    const late = asker.request("nodeRead", { path: "/" }, { timeoutMs: 500, suffix: "c" });
    await new Promise((r) => setTimeout(r, 100));
    await closing.close();
    release();
    await handled;
    await expect(late).rejects.toThrow(/timed out|no responder/);
    expect([...closing.sendStats.failures.values()]).toEqual([
      { op: "respond", name: "nodeRead", code: "CONNECTION_CLOSED", count: 1 },
    ]);
    expect(closing.publish("heartbeat", {} as never)).toBe(false);
  });
});
