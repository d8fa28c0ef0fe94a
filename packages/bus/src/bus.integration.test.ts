import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { freePorts, waitFor } from "@ic/testkit";
import type { Heartbeat } from "@ic/protocol";
import { Bus, NatsServer } from "./index.ts";

const log = silentLogger();

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
  return new NatsServer({
    host: "127.0.0.1",
    clientPort: 0,
    clusterPort: 0,
    clusterName: "t",
    routes: [],
    log,
    ...extra,
  });
}

describe("embedded nats-server", () => {
  it("two clustered servers carry messages between their clients and drop invalid ones", async () => {
    const [c1, c2] = await freePorts(2);
    await using a = new NatsServer({
      host: "127.0.0.1",
      clientPort: 0,
      clusterPort: c1!,
      clusterName: "t",
      routes: [`127.0.0.1:${c2}`],
      log,
    });
    await using b = new NatsServer({
      host: "127.0.0.1",
      clientPort: 0,
      clusterPort: c2!,
      clusterName: "t",
      routes: [`127.0.0.1:${c1}`],
      log,
    });
    await Promise.all([a.start(), b.start()]);
    await using busA = await Bus.connect(a.clientUrl, log);
    await using busB = await Bus.connect(b.clientUrl, log);
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

  it("ignoreOwn drops only what the same connection published", async () => {
    await using s = loneServer();
    await s.start();
    await using busA = await Bus.connect(s.clientUrl, log);
    await using busB = await Bus.connect(s.clientUrl, log);
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
    await using bus = await Bus.connect(url, log);
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
});
