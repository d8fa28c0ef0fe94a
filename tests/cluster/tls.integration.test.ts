// TLS between nodes, as deployed: four hosts in network namespaces with a cluster CA and node
// certificates made by scripts/make-secrets.mjs. Bus routes verify their peers' certificates, the API
// answers HTTPS, engines serve HTTPS with the node's certificate, and nodes talk to each other (store
// downloads, peer fan-outs, the relay to engines) over it. A node whose certificate comes from
// another CA never joins. A packet capture on the hosts' links, taken from before the nodes start,
// finds none of the tokens, derived keys, prompts or answers in clear text; a plaintext control sent
// across the same links is found, so the capture sees what crosses them.
import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { connect as tlsConnect } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clusterCredentials } from "@ic/config";
import {
  engineKeyOf,
  HOST_PORTS,
  makeClusterCerts,
  PacketCapture,
  patchConfig,
  placeAndWait,
  REPO_ROOT,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string; api_url?: string }[];
  nodeHealth: { code: string; severity: string; message: string }[];
  instances: { instance_id: string; runners: { rank: number; endpoint?: string }[] }[];
}

const PROMPT = "zebra-quartz-ocelot-7731 tell me a secret";
const CONTROL = "plaintext-control-5d1c0ffee";

let cluster: HostCluster;
let capture: PacketCapture;
let frames: Buffer;
let answer = "";
let instanceId = "";
let engineKey = "";

beforeAll(async () => {
  const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-tls-store-")));
  cluster = await startHostCluster(4, {
    startOnly: [],
    config: (i) => (i === 0 ? { store_path: store } : {}),
  });
  // From before the first route connects: the route passwords cross at CONNECT.
  capture = await PacketCapture.start(cluster.lab.hosts.map((h) => h.bridgeIfname));
  const nodes = cluster.nodes.slice(0, 3);
  for (const n of nodes) await n.start();
  await waitForConvergence(nodes, 3);
  const doc = await nodes[0]!.get<StateDoc>("/state");
  const node1 = doc.node_identities.find((n) => n.name === "node-1")!.node_id;
  // On another host than node-1, which holds the store: staging and chat cross the wire.
  const placed = await placeAndWait(nodes[0]!, {
    model_id: modelId,
    min_nodes: 1,
    excluded_nodes: [node1],
  });
  instanceId = placed.instance_id;
  // The engine's key (its node made it; heartbeats carry it over the routes): read off the process.
  const running = await nodes[0]!.get<StateDoc>("/state");
  const endpoint = new URL(
    running.instances.find((i) => i.instance_id === instanceId)!.runners[0]!.endpoint!,
  );
  engineKey = engineKeyOf(endpoint.port, cluster.lab.host(endpoint.hostname).address);
  const client = new OpenAI({
    baseURL: `${nodes[0]!.apiUrl}/v1`,
    apiKey: cluster.adminToken,
    maxRetries: 0,
  });
  const r = await client.chat.completions.create({
    model: modelId,
    messages: [{ role: "user", content: PROMPT }],
    max_tokens: 24,
  });
  answer = r.choices[0]!.message.content ?? "";
  // A peer fan-out (every node's chart series), with the node token between nodes.
  const series = await nodes[0]!.get<{ nodes: unknown[] }>("/v1/diagnostics/series?scope=cluster");
  expect(series.nodes.length).toBe(3);
  // The control: clear text from node-1's host to node-2's route port, over the same links.
  const [, n2] = cluster.lab.hosts;
  execFileSync(
    cluster.lab.wrap("node-1")[0]!,
    [
      ...cluster.lab.wrap("node-1").slice(1),
      "python3",
      "-c",
      `import socket; s = socket.create_connection(("${n2!.address}", 6222), 5); s.sendall(b"${CONTROL}"); s.close()`,
    ],
    { stdio: "ignore" },
  );
  frames = await capture.stop();
}, 180_000);

afterAll(async () => {
  await capture?.stop().catch(() => undefined);
  await cluster?.[Symbol.asyncDispose]();
});

describe("TLS between nodes", () => {
  it("every node advertises an https API, and engines serve https", async () => {
    const doc = await cluster.node("node-1").get<StateDoc>("/state");
    const inst = doc.instances.find((i) => i.instance_id === instanceId)!;
    expect(inst.runners[0]!.endpoint).toMatch(/^https:\/\/node-[23]:\d+$/);
    expect(cluster.node("node-2").apiUrl).toMatch(/^https:\/\//);
    // Clear text to the API port is not HTTP the node answers.
    const plain = cluster.node("node-2").apiUrl.replace("https://", "http://");
    const refused = await fetch(`${plain}/health`, { signal: AbortSignal.timeout(3000) }).then(
      (r) => r.status,
      () => "refused",
    );
    expect(refused).not.toBe(200);
    expect(answer.length).toBeGreaterThan(0);
  });

  it("a capture of the hosts' links finds no token, derived key, prompt or answer in clear text", () => {
    expect(frames.length).toBeGreaterThan(100_000);
    expect(frames.includes(CONTROL), "the plaintext control crossed the captured links").toBe(true);
    const creds = clusterCredentials(cluster.secret);
    const secrets: Record<string, string> = {
      "admin token": cluster.adminToken,
      "cluster secret": cluster.secret,
      "bus route password": creds.busRoute.password,
      "node token": creds.nodeToken,
      "engine key": engineKey,
      prompt: PROMPT,
      ...(answer.length >= 8 ? { answer: answer.slice(0, 16) } : {}),
    };
    const found = Object.entries(secrets).filter(([, s]) => frames.includes(s));
    process.stderr.write(
      `capture: ${frames.length} bytes of frames; in clear text: ${JSON.stringify(found.map(([w]) => w))}\n`,
    );
    for (const [what, s] of Object.entries(secrets))
      expect(frames.includes(s), `${what} in clear text on the wire`).toBe(false);
  });

  it("a renewed certificate goes into force with a reload, and the node stays a member", async () => {
    const n2 = cluster.node("node-2");
    const host = cluster.lab.host("node-2");
    const certs = cluster.certs!;
    // A new key and certificate from the same CA (make-secrets keeps the CA), over the files in use.
    execFileSync(process.execPath, [
      join(REPO_ROOT, "scripts/make-secrets.mjs"),
      certs.dir,
      "--node",
      `renewed=node-2,${host.address},${cluster.lab.rootAddress}`,
    ]);
    const files = certs.tlsConfig("node-2");
    writeFileSync(files.cert_file, readFileSync(join(certs.dir, "renewed.crt")));
    writeFileSync(files.key_file, readFileSync(join(certs.dir, "renewed.key")));
    const r = await n2.post("/admin/reload", {});
    expect(r.status).toBe(200);
    expect(await r.json()).toMatchObject({ ok: true, tls: "reloaded" });
    const served = await new Promise<string>((resolve, reject) => {
      const s = tlsConnect(
        { host: host.address, port: HOST_PORTS.api, ca: readFileSync(certs.caFile) },
        () => {
          resolve(s.getPeerX509Certificate()!.fingerprint256);
          s.end();
        },
      );
      s.once("error", reject);
    });
    expect(served).toBe(new X509Certificate(readFileSync(files.cert_file)).fingerprint256);
    // A second reload with nothing changed says so.
    expect(await (await n2.post("/admin/reload", {})).json()).toMatchObject({ tls: "unchanged" });
    // The routes keep working: heartbeats flow both ways for longer than the liveness timeout.
    await new Promise((res) => setTimeout(res, 3000));
    const doc = await cluster.node("node-1").get<StateDoc>("/state");
    expect(doc.node_identities.map((n) => n.name)).toContain("node-2");
    expect((await n2.get<StateDoc>("/state")).node_identities).toHaveLength(3);
  });

  it("a node whose certificate comes from another CA is refused by the routes and says so", async () => {
    const n4 = cluster.node("node-4");
    const host = cluster.lab.host("node-4");
    // Trusted by this test process only (so it can read node-4's state), not by the cluster.
    const foreign = makeClusterCerts([{ name: "node-4", hosts: ["node-4", host.address] }]);
    patchConfig(n4, { tls: foreign.tlsConfig("node-4") });
    await n4.start();
    const alone = await waitFor(
      async () => {
        const d = await n4.get<StateDoc>("/state");
        return d.nodeHealth.some((h) => h.code === "cluster_tls_rejected") ? d : undefined;
      },
      { timeoutMs: 20_000, what: "cluster_tls_rejected on node-4" },
    );
    expect(alone.node_identities.map((n) => n.name)).toEqual(["node-4"]);
    const seen = await waitFor(
      async () => {
        const d = await cluster.node("node-1").get<StateDoc>("/state");
        return d.nodeHealth.some(
          (h) => h.code === "bus_tls_failures" && h.message.includes(host.address),
        )
          ? d
          : undefined;
      },
      { timeoutMs: 15_000, what: "node-1 naming node-4 in bus_tls_failures" },
    );
    expect(seen.node_identities.map((n) => n.name).sort()).toEqual(["node-1", "node-2", "node-3"]);
  });
});
