// The shipped configuration forms a cluster as shipped: deploy/compose/node-{1,2,3}.yaml (and the
// example config the systemd unit points at) run unchanged except for paths, each in a network
// namespace named like its compose service, with secrets made by scripts/make-secrets.mjs. Compose's
// health check (GET /health without a token) passes on each of them once the cluster has formed.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import {
  makeClusterCerts,
  NetLab,
  NodeProcess,
  REPO_ROOT,
  seedStore,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";

const SECRETS_IN_CONFIG = "/etc/inference-cluster/secrets";
const STORE_IN_CONFIG = "/srv/models";

let lab: NetLab;
let work: string;
let secrets: string;
let store: string;
let modelId: string;
const token = (name: string) => readFileSync(join(secrets, name), "utf8").trim();

beforeAll(async () => {
  lab = await NetLab.create({ hosts: ["node-1", "node-2", "node-3"] });
  work = mkdtempSync(join(tmpdir(), "ic-deploy-"));
  // The operator's step, as the compose file's header says (scripts/make-secrets.mjs; each
  // certificate also names the host's lab address, which this test process dials, and this process
  // trusts the cluster CA as a client).
  secrets = makeClusterCerts(
    lab.hosts.map((h) => ({ name: h.name, hosts: [h.name, h.address] })),
  ).dir;
  store = join(work, "models");
  ({ modelId } = await seedStore(store));
});

afterAll(async () => {
  await lab?.dispose();
  if (work) rmSync(work, { recursive: true, force: true });
  if (secrets) rmSync(secrets, { recursive: true, force: true });
});

/**
 * A node from a shipped file: only paths change (secrets and store directories, and the per-node
 * state directories, which default under a home directory the three hosts here share).
 */
function shippedNode(host: string, file: string): NodeProcess {
  const dir = join(work, `${host}-${file.replaceAll("/", "_")}`);
  mkdirSync(dir, { recursive: true });
  const text = readFileSync(join(REPO_ROOT, "deploy", file), "utf8")
    .replaceAll(SECRETS_IN_CONFIG, secrets)
    .replaceAll(STORE_IN_CONFIG, store);
  const doc = parseYaml(text) as Record<string, Record<string, unknown> | unknown>;
  const section = (k: string) => (doc[k] ??= {}) as Record<string, unknown>;
  doc.node_cache_path = join(dir, "staging");
  section("event_log").dir = join(dir, "events");
  section("bus").store_dir = join(dir, "jetstream");
  section("tracing").dir = join(dir, "traces");
  section("engine").runner_log_dir = join(dir, "runners");
  const config = stringifyYaml(doc);
  const configPath = join(dir, "config.yaml");
  writeFileSync(configPath, config, { mode: 0o600 });
  return new NodeProcess(
    {
      name: host,
      clusterPort: 6222,
      peers: [],
      wrap: lab.wrap(host),
      reachAt: lab.host(host).address,
      apiToken: token("admin.token"),
      verbose: process.env.IC_TEST_VERBOSE === "1",
    },
    configPath,
    dir,
  );
}

describe("the shipped configuration across three hosts", () => {
  it("deploy/compose/node-{1,2,3}.yaml form a 3-node cluster that places and serves, and keeps its deployment across down/up", async () => {
    const nodes = ["node-1", "node-2", "node-3"].map((h) => shippedNode(h, `compose/${h}.yaml`));
    try {
      for (const n of nodes) await n.start(60_000);
      // The spec's default timings: formation takes an election timeout or two.
      const docs = await waitForConvergence(nodes, 3, 60_000);
      expect(docs[0]!.node_identities.map((n) => n.name).sort()).toEqual([
        "node-1",
        "node-2",
        "node-3",
      ]);
      // The compose health check's request: no token, 200 once in the session, on every node.
      const health = await waitFor(
        async () => {
          const answers = await Promise.all(nodes.map((n) => fetch(`${n.apiUrl}/health`)));
          if (answers.some((r) => r.status !== 200)) {
            await Promise.all(answers.map((r) => r.body?.cancel()));
            return undefined;
          }
          return Promise.all(
            answers.map(
              (r) => r.json() as Promise<{ node: string; session_id: string; is_master: boolean }>,
            ),
          );
        },
        { timeoutMs: 30_000, what: "GET /health 200 on every node" },
      );
      expect(health.map((h) => h.node)).toEqual(["node-1", "node-2", "node-3"]);
      expect(new Set(health.map((h) => h.session_id)).size).toBe(1);
      expect(health.filter((h) => h.is_master)).toHaveLength(1);
      // Tokens from the shipped token files guard the API.
      const n3 = nodes[2]!;
      expect((await fetch(`${n3.apiUrl}/state`)).status).toBe(401);
      const read = await fetch(`${n3.apiUrl}/state`, {
        headers: { authorization: `Bearer ${token("read.token")}` },
      });
      expect(read.status).toBe(200);
      // The dashboard: the page is public, its settings view needs a token and names the shipped file.
      const page = await fetch(`${n3.apiUrl}/`);
      expect(page.status).toBe(200);
      expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
      expect((await fetch(`${n3.apiUrl}/admin/settings`)).status).toBe(401);
      const settings = (await (
        await fetch(`${n3.apiUrl}/admin/settings`, {
          headers: { authorization: `Bearer ${token("read.token")}` },
        })
      ).json()) as { node: string; file: string };
      expect(settings.node).toBe("node-3");
      expect(settings.file).toMatch(/config\.yaml$/);
      // The store host (node-1) registers the model; a placement through node-2 serves through node-3.
      await waitFor(
        async () => {
          const s = await nodes[1]!.get<{ models: { model_id: string }[] }>("/state");
          return s.models.some((m) => m.model_id === modelId) ? true : undefined;
        },
        { timeoutMs: 30_000, what: "model registered" },
      );
      const placed = await nodes[1]!.post("/place_instance", {
        model_id: modelId,
        min_nodes: 1,
        excluded_nodes: [],
      });
      expect(placed.status).toBe(200);
      await waitFor(
        async () => {
          const r = await fetch(`${n3.apiUrl}/v1/chat/completions`, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              authorization: `Bearer ${token("inference.token")}`,
            },
            body: JSON.stringify({
              model: modelId,
              messages: [{ role: "user", content: "Hello" }],
              max_tokens: 2,
            }),
          });
          return r.status === 200 ? ((await r.json()) as { choices: unknown[] }) : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 500, what: "a 2-token completion through node-3" },
      );
      // `docker compose down && docker compose up`: every node stops, the volumes stay, all start
      // again. The deployment comes back from the intent store and serves, with no operator.
      const before = await nodes[1]!.get<{ deployments: { deployment_id: string }[] }>("/state");
      await Promise.all(nodes.map((n) => n.stop()));
      for (const n of nodes) await n.start(60_000);
      await waitForConvergence(nodes, 3, 60_000);
      await waitFor(
        async () => {
          const s = await n3.get<{ deployments: { deployment_id: string }[] }>("/state");
          if (
            JSON.stringify(s.deployments.map((d) => d.deployment_id)) !==
            JSON.stringify(before.deployments.map((d) => d.deployment_id))
          )
            return undefined;
          const r = await fetch(`${n3.apiUrl}/v1/chat/completions`, {
            method: "POST",
            headers: {
              "content-type": "application/json",
              authorization: `Bearer ${token("inference.token")}`,
            },
            body: JSON.stringify({
              model: modelId,
              messages: [{ role: "user", content: "Hello" }],
              max_tokens: 2,
            }),
          });
          await r.arrayBuffer();
          return r.status === 200 ? true : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 500, what: "the deployment serving again after down/up" },
      );
    } finally {
      // The end of the test, not a stop it is about: kill -9, as the testkit's clusters end.
      for (const n of nodes) n.kill("SIGKILL");
      await Promise.all(nodes.map((n) => n.stop(5000)));
    }
  });

  it("deploy/config.example.yaml (the systemd unit's config) joins as node-1", async () => {
    const nodes = [
      shippedNode("node-1", "config.example.yaml"),
      shippedNode("node-2", "compose/node-2.yaml"),
      shippedNode("node-3", "compose/node-3.yaml"),
    ];
    try {
      for (const n of nodes) await n.start(60_000);
      const docs = await waitForConvergence(nodes, 3, 60_000);
      expect(docs[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-1");
    } finally {
      // The end of the test, not a stop it is about: kill -9, as the testkit's clusters end.
      for (const n of nodes) n.kill("SIGKILL");
      await Promise.all(nodes.map((n) => n.stop(5000)));
    }
  });
});
