// The watch connection over real sockets: each end reports a dropped connection to its agent at once,
// and a connection it closed itself (the master changed, stop) is not reported.
import { createServer, request } from "node:http";
import type { IncomingMessage, Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import type { PeerView } from "@ic/cluster";
import type { Heartbeat } from "@ic/protocol";
import { createNodeApp, routesOf } from "@ic/http";
import { apiListener } from "./api-listener.ts";
import { PeerWatch, WATCH_PATH, watchRoutes } from "./peer-watch.ts";
import type { WatchAgent } from "./peer-watch.ts";

interface Lost {
  peerKey: string;
  startedAt: number | undefined;
  via: string;
}

class FakeAgent implements WatchAgent {
  readonly lost: Lost[] = [];
  master: PeerView | undefined;
  constructor(readonly peerKey: string) {}
  masterPeer(): PeerView | undefined {
    return this.master;
  }
  connectionLost(peerKey: string, startedAt: number | undefined, via: string): Promise<boolean> {
    this.lost.push({ peerKey, startedAt, via });
    return Promise.resolve(false);
  }
}

function view(peerKey: string, startedAt: number, apiUrl: string): PeerView {
  return {
    heartbeat: { peer_key: peerKey, started_at: startedAt, api_url: apiUrl } as Heartbeat,
    lastHeard: Date.now(),
    origin: "o",
  };
}

const servers: Server[] = [];
const watches: PeerWatch[] = [];
afterEach(async () => {
  for (const w of watches.splice(0)) w.stop();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

/** A node API (a node app with the watch route, behind the node's listener) on a free port. */
async function serve(agent: WatchAgent, token?: string): Promise<{ url: string; server: Server }> {
  const log = silentLogger();
  const auth = {
    tokens: token ? [{ name: "cluster-node", token, scopes: ["read" as const] }] : [],
  };
  const app = createNodeApp({ auth, log }, [
    { routes: () => routesOf((a) => watchRoutes(a, { agent, log })) },
  ]);
  const server = createServer(apiListener(() => app, log));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  servers.push(server);
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  expect(cond()).toBe(true);
}

describe("the serving end (the master)", () => {
  it("reports the peer that held a watch once its connection drops", async () => {
    const agent = new FakeAgent("p-master");
    const { url } = await serve(agent);
    const req = request(`${url}${WATCH_PATH}?peer_key=p-follower&started_at=42`);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      req.on("response", resolve).on("error", reject).end();
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/text\/event-stream/);
    await new Promise((r) => res.once("data", r)); // the stream is open
    expect(agent.lost).toEqual([]);
    const t0 = Date.now();
    req.destroy(); // the follower's process is gone: its socket closes
    await until(() => agent.lost.length === 1);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(agent.lost[0]).toMatchObject({ peerKey: "p-follower", startedAt: 42 });
  });

  it("refuses a watch without its query, in the error envelope", async () => {
    const { url } = await serve(new FakeAgent("p-master"));
    const r = await fetch(`${url}${WATCH_PATH}?peer_key=`);
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("invalid_request");
  });

  it("needs a token with the read scope when tokens are configured", async () => {
    const { url } = await serve(new FakeAgent("p-master"), "node-token");
    const q = `${url}${WATCH_PATH}?peer_key=p-f&started_at=1`;
    expect((await fetch(q)).status).toBe(401);
    const ok = await fetch(q, { headers: { authorization: "Bearer node-token" } });
    expect(ok.status).toBe(200);
    await ok.body?.cancel();
  });
});

describe("the watching end (a follower)", () => {
  function watch(agent: FakeAgent, token?: string): PeerWatch {
    const w = new PeerWatch({
      agent,
      log: silentLogger(),
      self: { peerKey: agent.peerKey, startedAt: 7 },
      token: token === undefined ? undefined : () => token,
      checkMs: 20,
      retryMs: 100,
    });
    watches.push(w);
    w.start();
    return w;
  }

  it("watches the master and reports it when the connection drops", async () => {
    const { url, server } = await serve(new FakeAgent("p-master"), "tok");
    const agent = new FakeAgent("p-follower");
    agent.master = view("p-master", 1, url);
    const w = watch(agent, "tok");
    await until(() => w.watching === "p-master");
    // Give the request time to be answered, then kill every connection of the master's server.
    await new Promise((r) => setTimeout(r, 100));
    expect(agent.lost).toEqual([]);
    server.closeAllConnections();
    await until(() => agent.lost.length >= 1);
    expect(agent.lost[0]).toMatchObject({ peerKey: "p-master", startedAt: 1 });
  });

  it("a refused connection (nothing listens at the master's port) is a signal too", async () => {
    const { url, server } = await serve(new FakeAgent("p-x"));
    servers.splice(servers.indexOf(server), 1);
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    const agent = new FakeAgent("p-follower");
    agent.master = view("p-master", 1, url);
    watch(agent);
    await until(() => agent.lost.length >= 1);
    expect(agent.lost[0]!.via).toMatch(/refused/);
  });

  it("moving to a new master closes the old watch without reporting the old master", async () => {
    const a = new FakeAgent("p-a");
    const b = new FakeAgent("p-b");
    const sa = await serve(a);
    const sb = await serve(b);
    const agent = new FakeAgent("p-follower");
    agent.master = view("p-a", 1, sa.url);
    const w = watch(agent);
    await until(() => w.watching === "p-a");
    await new Promise((r) => setTimeout(r, 100));
    agent.master = view("p-b", 2, sb.url);
    await until(() => w.watching === "p-b");
    await new Promise((r) => setTimeout(r, 200));
    expect(agent.lost).toEqual([]);
    // The old master's end saw its follower go and probes it (it answers: nothing happens).
    await until(() => a.lost.length === 1);
  });

  it("a master already marked gone is not watched", async () => {
    const { url } = await serve(new FakeAgent("p-master"));
    const agent = new FakeAgent("p-follower");
    agent.master = { ...view("p-master", 1, url), lostAt: Date.now() };
    const w = watch(agent);
    await new Promise((r) => setTimeout(r, 100));
    expect(w.watching).toBeUndefined();
    expect(agent.lost).toEqual([]);
  });
});
