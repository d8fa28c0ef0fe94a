// Nobody joins or commands without credentials, tested across hosts (network namespaces): the bus
// refuses strangers (raw clients, foreign nats-servers without the cluster's certificate), a node
// with the cluster's certificate but another secret is named by every node, followers ignore
// events that do not come from the master, the HTTP API enforces tokens, scopes, JSON bodies and
// origins, and engines listen on the node's own address with a key and a scrubbed environment.
import { readFileSync } from "node:fs";
import { mkdtempSync } from "node:fs";
import { connect as tcpConnect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Bus, NatsServer } from "@ic/bus";
import { clusterCredentials } from "@ic/config";
import { silentLogger } from "@ic/log";
import type { IndexedEvent, NodeId, SessionId } from "@ic/protocol";
import {
  HOST_PORTS,
  makeClusterCerts,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";

const log = silentLogger();
const READ_TOKEN = "read-only-token-0123456789";
const APP_TOKEN = "inference-token-0123456789";

interface StateDoc {
  index: number;
  session: { session_id: string } | null;
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  nodeHealth: {
    node_id?: string;
    node_name?: string;
    code: string;
    severity: string;
    message: string;
  }[];
  instances: {
    instance_id: string;
    model_id: string;
    runners: { rank: number; state: string; endpoint?: string }[];
  }[];
}

/** Speaks raw NATS: reads INFO, sends CONNECT with `fields` and PING, returns what came back. */
function rawLogin(host: string, port: number, fields: Record<string, unknown>): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    let sent = false;
    const s = tcpConnect({ host, port });
    const done = () => {
      s.destroy();
      resolve(got);
    };
    s.on("data", (d: Buffer) => {
      got += d.toString();
      if (!sent && got.startsWith("INFO")) {
        sent = true;
        s.write(`CONNECT ${JSON.stringify({ verbose: false, ...fields })}\r\nPING\r\n`);
      }
      if (/PONG|-ERR/.test(got)) done();
    });
    s.on("error", (e: NodeJS.ErrnoException) => {
      got += `error:${e.code}`;
      done();
    });
    s.on("close", done);
    setTimeout(done, 5000).unref();
  });
}

let cluster: HostCluster;
let modelId: string;

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  ({ modelId } = await seedStore(store));
  cluster = await startHostCluster(4, {
    // node-4 is prepared with a wrong secret and started by its own test.
    startOnly: [0, 1, 2],
    config: (i) => ({
      auth: {
        tokens: [
          { name: "dash", token: READ_TOKEN, scopes: ["read"] },
          { name: "app", token: APP_TOKEN, scopes: ["inference"] },
        ],
      },
      ...(i === 0 ? { store_path: store } : {}),
      // node-2 opens its bus client port to the lab, so the test can act as a member's process.
      ...(i === 1 ? { bus: { client_bind: "0.0.0.0" } } : {}),
      ...(i === 3 ? { cluster: { secret: "not-the-cluster-secret-at-all" } } : {}),
    }),
    // Engines must never see this.
    env: { HF_TOKEN: "hf_do_not_leak_0123456789" },
  });
  await waitForConvergence(cluster.nodes.slice(0, 3), 3);
});

afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

describe("the bus across hosts", () => {
  it("refuses raw TCP clients without the secret on the route and client ports", async () => {
    const n1 = cluster.lab.host("node-1").address;
    const n2 = cluster.lab.host("node-2").address;
    // The route port waits for a TLS handshake (with a client certificate from the cluster CA):
    // a clear-text client gets not even the server's INFO.
    const route = await rawLogin(n1, HOST_PORTS.cluster, {});
    expect(route).not.toMatch(/INFO|PONG/);
    expect(await rawLogin(n2, HOST_PORTS.client, {})).toMatch(/-ERR 'Authorization Violation'/);
    expect(await rawLogin(n2, HOST_PORTS.client, { user: "ic-node", pass: "guess" })).toMatch(
      /-ERR 'Authorization Violation'/,
    );
    // node-1's client port listens on its loopback only: not even reachable from another host.
    expect(await rawLogin(n1, HOST_PORTS.client, {})).toMatch(/error:ECONNREFUSED/);
    // The right credentials get in (what every node's own services use).
    const creds = clusterCredentials(cluster.secret).busClient;
    expect(
      await rawLogin(n2, HOST_PORTS.client, { user: creds.user, pass: creds.password }),
    ).toMatch(/PONG/);
  });

  it("a foreign nats-server cannot route in without a certificate of the cluster CA, and the cluster reports the attempt", async () => {
    const stranger = clusterCredentials("a-different-clusters-secret");
    // A certificate for the root namespace's address, from another CA: the routes' TLS refuses it.
    const tls = makeClusterCerts([{ name: "stranger", hosts: [cluster.lab.rootAddress] }], {
      trust: false,
    }).tlsConfig("stranger");
    await using foreign = new NatsServer({
      routeTls: { certFile: tls.cert_file, keyFile: tls.key_file, caFile: tls.ca_file },
      bind: cluster.lab.rootAddress,
      host: cluster.lab.rootAddress,
      clientBind: "127.0.0.1",
      clientPort: 0,
      clusterPort: 16222,
      clusterName: "inference-cluster",
      routes: [`${cluster.lab.host("node-1").address}:${HOST_PORTS.cluster}`],
      clientAuth: stranger.busClient,
      routeAuth: stranger.busRoute,
      log,
    });
    await foreign.start();
    await using bus = await Bus.connect(foreign.clientUrl, log, stranger.busClient);
    const heard: string[] = [];
    bus.subscribe("heartbeat", (hb) => heard.push(hb.name));
    await bus.flush();
    const doc = await waitFor(
      async () => {
        const d = await cluster.node("node-1").get<StateDoc>("/state");
        return d.nodeHealth.some(
          (h) => h.code === "bus_tls_failures" && h.message.includes(cluster.lab.rootAddress),
        )
          ? d
          : undefined;
      },
      { timeoutMs: 15_000, what: "bus_tls_failures on node-1" },
    );
    expect(doc.node_identities).toHaveLength(3);
    // Nothing of the cluster's traffic reached the foreign server.
    expect(heard).toEqual([]);
  });

  it("a node with the cluster's certificate but another secret is named by every node, and its node token is refused", async () => {
    // With TLS, routes admit a certificate of the cluster CA (docs/decisions.md): node-4 is on the
    // bus, but each side refuses the other's node token, and every node says so by name.
    const n4 = cluster.node("node-4");
    await n4.start();
    const mismatch = (d: StateDoc) =>
      d.nodeHealth.filter((h) => h.code === "cluster_secret_mismatch");
    const named = (d: StateDoc) =>
      Object.fromEntries(
        mismatch(d)
          .map((h) => [h.node_name!, h.message.match(/observed: (.*) present/)?.[1]] as const)
          .sort((a, b) => a[0].localeCompare(b[0])),
      );
    const expected = {
      "node-1": "node-4",
      "node-2": "node-4",
      "node-3": "node-4",
      "node-4": "node-1, node-2, node-3",
    };
    // Each node's entry names the peers it has heard so far: wait for the whole picture.
    const doc = await waitFor(
      async () => {
        const d = await cluster.node("node-1").get<StateDoc>("/state");
        return JSON.stringify(named(d)) === JSON.stringify(expected) ? d : undefined;
      },
      { timeoutMs: 20_000, what: "cluster_secret_mismatch from all four nodes, naming each other" },
    );
    // The odd one out is in error (no longer a placement candidate); the others only warn.
    expect(Object.fromEntries(mismatch(doc).map((h) => [h.node_name, h.severity]))).toEqual({
      "node-1": "warn",
      "node-2": "warn",
      "node-3": "warn",
      "node-4": "error",
    });
    const view = await cluster
      .node("node-1")
      .get<{ unreachable: { node: string; error: string }[] }>("/store/storage/cluster");
    expect(view.unreachable).toEqual([
      { node: "node-4", error: expect.stringMatching(/^HTTP 401/) },
    ]);
    await n4.stop();
    await waitFor(
      async () => {
        const d = await cluster.node("node-1").get<StateDoc>("/state");
        return d.node_identities.length === 3 && mismatch(d).length === 0 ? true : undefined;
      },
      { timeoutMs: 20_000, what: "node-4 gone and the mismatch cleared" },
    );
  });

  it("an event published by a non-master member is ignored, and the master's next event applies everywhere", async () => {
    const nodes = cluster.nodes.slice(0, 3);
    const before = await cluster.node("node-2").get<StateDoc>("/state");
    const victim = before.node_identities.find((n) => n.name === "node-3")!;
    // A process on node-2 holding the secret (a confused member) publishes the next event itself.
    const n2 = cluster.lab.host("node-2").address;
    await using member = await Bus.connect(
      `nats://${n2}:${HOST_PORTS.client}`,
      log,
      clusterCredentials(cluster.secret).busClient,
    );
    const rogue: IndexedEvent = {
      index: before.index + 1,
      session_id: before.session!.session_id as SessionId,
      at: Date.now(),
      event: { type: "NodeLeft", node_id: victim.node_id as NodeId, reason: "rogue" },
    };
    member.publish("events", rogue);
    await member.flush();
    await new Promise((r) => setTimeout(r, 1500));
    for (const n of nodes) {
      const d = await n.get<StateDoc>("/state");
      expect(d.node_identities.map((x) => x.name)).toContain("node-3");
    }
    // The master's next events (a placement) apply on every replica: nobody forked.
    await placeAndWait(cluster.node("node-1"), { model_id: modelId, min_nodes: 1 });
    const docs = await waitFor(
      async () => {
        const ds = await Promise.all(nodes.map((n) => n.get<StateDoc>("/state")));
        return new Set(ds.map((d) => d.index)).size === 1 &&
          ds.every((d) => d.instances.length === 1)
          ? ds
          : undefined;
      },
      { timeoutMs: 15_000, what: "replicas agreeing after the master's events" },
    );
    for (const d of docs) expect(d.node_identities).toHaveLength(3);
    expect(cluster.node("node-2").logLines.some((l) => l.includes("not entitled to it"))).toBe(
      true,
    );
  });
});

describe("the HTTP API across hosts", () => {
  const mutating = [
    { method: "POST", path: "/place_instance", scope: "admin" },
    { method: "DELETE", path: "/instance/i-none", scope: "admin" },
    { method: "POST", path: "/admin/restart", scope: "admin" },
    { method: "POST", path: "/store/purge-staging", scope: "admin" },
    { method: "POST", path: "/v1/chat/completions", scope: "inference" },
  ] as const;

  it.each(mutating)(
    "$method $path: 401 without a token, 403 with the wrong scope, 415 for text/plain",
    async (e) => {
      const url = `${cluster.node("node-3").apiUrl}${e.path}`;
      const send = (headers: Record<string, string>) =>
        fetch(url, {
          method: e.method,
          headers,
          ...(e.method === "DELETE" ? {} : { body: "{}" }),
        });
      const json = { "content-type": "application/json" };
      const none = await send(json);
      expect(none.status).toBe(401);
      expect(await none.json()).toMatchObject({ error: { code: "unauthorized" } });
      const wrong = await send({
        ...json,
        authorization: `Bearer ${e.scope === "admin" ? APP_TOKEN : READ_TOKEN}`,
      });
      expect(wrong.status).toBe(403);
      expect(await wrong.json()).toMatchObject({ error: { code: "forbidden" } });
      const plain = await send({
        "content-type": "text/plain",
        authorization: `Bearer ${cluster.adminToken}`,
      });
      expect(plain.status).toBe(415);
      expect(await plain.json()).toMatchObject({ error: { code: "unsupported_media_type" } });
      const foreign = await send({
        ...json,
        authorization: `Bearer ${cluster.adminToken}`,
        origin: "http://evil.example",
      });
      expect(foreign.status).toBe(403);
    },
  );

  it("the inference token works with the official client's bearer header; reads need read", async () => {
    const base = cluster.node("node-3").apiUrl;
    const models = await fetch(`${base}/v1/models`, {
      headers: { authorization: `Bearer ${APP_TOKEN}` },
    });
    expect(models.status).toBe(200);
    expect(
      (await fetch(`${base}/state`, { headers: { authorization: `Bearer ${APP_TOKEN}` } })).status,
    ).toBe(403);
    expect(
      (await fetch(`${base}/state`, { headers: { authorization: `Bearer ${READ_TOKEN}` } })).status,
    ).toBe(200);
    expect((await fetch(`${base}/v1/ping`)).status).toBe(200);
  });
});

describe("engines", () => {
  it("listen on the node's own address with a key only gateways know, without the node's secrets", async () => {
    const d = await cluster.node("node-1").get<StateDoc>("/state");
    const inst = d.instances.find((i) => i.model_id === modelId)!;
    const endpoint = inst.runners.find((r) => r.rank === 0)!.endpoint!;
    const u = new URL(endpoint);
    const hostName = u.hostname;
    expect(hostName).toMatch(/^node-\d$/);
    const host = cluster.lab.host(hostName);
    // Only on the host's address (no wildcard listener).
    const listening = await cluster.lab.run(hostName, "ss", ["-Hltn", `sport = :${u.port}`]);
    // ss -H: state, recv-q, send-q, local address:port, peer address:port
    const locals = listening
      .split("\n")
      .filter(Boolean)
      .map((l) => l.trim().split(/\s+/)[3]);
    expect(locals).toEqual([`${host.address}:${u.port}`]);
    // Direct access without the key is refused; through any node's gateway it answers.
    expect(u.protocol).toBe("https:");
    const direct = await fetch(`https://${host.address}:${u.port}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: modelId,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 2,
      }),
    });
    expect(direct.status).toBe(401);
    for (const n of cluster.nodes.slice(0, 3)) {
      const r = await fetch(`${n.apiUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${APP_TOKEN}` },
        body: JSON.stringify({
          model: modelId,
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 2,
        }),
      });
      expect(r.status).toBe(200);
    }
    // The engine's environment has its key and none of the node's secrets.
    const pids = (await cluster.lab.run(hostName, "ip", ["netns", "pids", host.ns]))
      .split("\n")
      .filter(Boolean);
    const engine = pids.find((p) => {
      try {
        return readFileSync(`/proc/${p}/comm`, "utf8").trim() === "llama-server";
      } catch {
        return false;
      }
    });
    expect(engine).toBeDefined();
    const env = readFileSync(`/proc/${engine}/environ`, "utf8").split("\0");
    expect(env.some((v) => v.startsWith("LLAMA_API_KEY=ice_"))).toBe(true);
    expect(env.some((v) => v.startsWith("HF_TOKEN="))).toBe(false);
    expect(env.join("\n")).not.toContain(cluster.secret);
    const cmdline = readFileSync(`/proc/${engine}/cmdline`, "utf8");
    expect(cmdline).not.toContain("ice_");
  });
});
