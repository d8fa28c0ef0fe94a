// Rotating an API token, then the cluster secret, without downtime across 3 hosts (network
// namespaces, TLS), with chat traffic flowing through every node the whole time. The token: the new
// one is added beside the old one and each node reloads (one by SIGHUP, two by POST /admin/reload),
// the clients move to it, the old one is dropped and the nodes reload again. The secret: three rounds
// of reloads (window open, new one presented, window closed) while the nodes' cluster-wide views,
// which ask every peer with the node token, are read all along. No request fails and no peer is
// unreachable; the old token and node token are refused afterwards; a config file that does not
// load changes nothing; a node left with another secret is reported by name on both sides.
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { clusterCredentials } from "@ic/config";
import {
  patchConfig,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

const OLD = "old-app-token-0123456789abcdef";
const NEW = "new-app-token-fedcba9876543210";
const NEXT_SECRET = "next-cluster-secret-0123456789abcdef";

interface StateDoc {
  nodeHealth: { node_name: string; code: string; severity: string; message: string }[];
}

describe("key rotation under load", () => {
  it("rotates a token, then the cluster secret: no failed request, no unreachable peer", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    const { modelId } = await seedStore(store);
    const app = (name: string, token: string) => ({ name, token, scopes: ["inference"] });
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        auth: { tokens: [app("app", OLD)] },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    const nodes = cluster.nodes as NodeProcess[];
    await waitForConvergence(nodes, 3);
    await placeAndWait(nodes[0]!, { model_id: modelId });
    const admin = {
      name: "test-admin",
      token: cluster.adminToken,
      scopes: ["admin", "read", "inference"],
    };
    const setTokens = (tokens: object[]) => {
      for (const n of nodes) patchConfig(n, { auth: { tokens: [...tokens, admin] } });
    };
    const chat = (node: NodeProcess, token: string) =>
      fetch(`${node.apiUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({
          model: modelId,
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 2,
        }),
      });
    const reload = async (node: NodeProcess) => {
      const r = await node.post("/admin/reload", {});
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };

    // The clients: two loops over all three nodes with the token they hold now.
    let token = OLD;
    let stop = false;
    const statuses: number[] = [];
    const clients = [0, 1].map(async (k) => {
      for (let i = k; !stop; i++) {
        const r = await chat(nodes[i % 3]!, token);
        await r.arrayBuffer();
        statuses.push(r.status);
      }
    });

    // 1. The new token beside the old one, on every node: node-1 by SIGHUP, the others by the API.
    setTokens([app("app", OLD), app("app-next", NEW)]);
    // To the node's main process only: its process group also holds llama-server.
    nodes[0]!.killProcess("SIGHUP");
    for (const n of nodes.slice(1)) {
      const r = await reload(n);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ ok: true, added: ["app-next"], removed: [], changed: [] });
      expect(r.body.tokens).toEqual(["app", "app-next", "test-admin"]);
    }
    await waitFor(async () => ((await chat(nodes[0]!, NEW)).status === 200 ? true : undefined), {
      timeoutMs: 10_000,
      what: "node-1 to accept the new token after SIGHUP",
    });
    for (const n of nodes) expect((await chat(n, NEW)).status).toBe(200);

    // 2. The clients move to the new token.
    const before = statuses.length;
    token = NEW;
    await waitFor(async () => (statuses.length >= before + 10 ? true : undefined), {
      timeoutMs: 30_000,
      what: "traffic with the new token",
    });

    // A file that does not load changes nothing, and says why.
    const good = readFileSync(nodes[1]!.configPath, "utf8");
    appendFileSync(nodes[1]!.configPath, "auth: [not, a, mapping\n");
    const broken = await reload(nodes[1]!);
    expect(broken.status).toBe(400);
    expect((broken.body.error as { message: string }).message).toMatch(
      /^reload refused, nothing changed: /,
    );
    expect((await chat(nodes[1]!, NEW)).status).toBe(200);
    writeFileSync(nodes[1]!.configPath, good);

    // 3. The old token goes, on every node.
    setTokens([app("app-next", NEW)]);
    for (const n of nodes) {
      const r = await reload(n);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ removed: ["app"], added: [] });
    }
    for (const n of nodes) {
      expect((await chat(n, OLD)).status).toBe(401);
      expect((await chat(n, NEW)).status).toBe(200);
    }

    // 4. The cluster secret, in three rounds of reloads across the nodes, while a reader asks each
    // node for its cluster-wide storage view (it asks every peer with the node token).
    const secret = cluster.secret;
    const nodeToken = (s: string) => clusterCredentials(s).nodeToken;
    const storage = (node: NodeProcess, token: string) =>
      fetch(`${node.apiUrl}/store/storage`, { headers: { authorization: `Bearer ${token}` } });
    const unreachable: unknown[] = [];
    let views = 0;
    const reader = (async () => {
      for (let i = 0; !stop; i++) {
        const v = await nodes[i % 3]!.get<{ unreachable: unknown[] }>("/store/storage/cluster");
        unreachable.push(...v.unreachable);
        views++;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const round = async (
      c: Record<string, unknown>,
      want: Record<string, string>,
    ): Promise<void> => {
      for (const n of nodes) patchConfig(n, { cluster: c });
      for (const n of nodes) {
        const r = await reload(n);
        expect(r.status).toBe(200);
        expect(r.body).toMatchObject(want);
      }
      // A few views and chats in this state.
      const seen = views;
      await waitFor(async () => (views >= seen + 6 ? true : undefined), {
        timeoutMs: 20_000,
        what: "cluster views after a round",
      });
    };
    await round(
      { secret, rotation_secret: NEXT_SECRET },
      { cluster_secret: "unchanged", rotation_window: "open" },
    );
    for (const n of nodes) expect((await storage(n, nodeToken(NEXT_SECRET))).status).toBe(200);
    await round(
      { secret: NEXT_SECRET, rotation_secret: secret },
      { cluster_secret: "rotated", rotation_window: "open" },
    );
    await round(
      { secret: NEXT_SECRET, rotation_secret: undefined },
      { cluster_secret: "unchanged", rotation_window: "closed" },
    );
    for (const n of nodes) {
      expect((await storage(n, nodeToken(secret))).status).toBe(401);
      expect((await storage(n, nodeToken(NEXT_SECRET))).status).toBe(200);
    }
    stop = true;
    await Promise.all([...clients, reader]);
    expect(unreachable).toEqual([]);
    // Each round waited for six more views.
    expect(views).toBeGreaterThanOrEqual(18);
    expect(statuses.length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);

    // 5. A node left with another secret (a rotation the operator did not finish on it) is named
    // by the others and names them; chat through it still works (engine keys do not follow the
    // secret); putting the secret back clears it.
    const mismatch = async (node: NodeProcess) =>
      (await node.get<StateDoc>("/state")).nodeHealth.filter(
        (h) => h.code === "cluster_secret_mismatch",
      );
    patchConfig(nodes[2]!, { cluster: { secret: "a-third-secret-0123456789abcdef" } });
    expect((await reload(nodes[2]!)).body).toMatchObject({ cluster_secret: "rotated" });
    const names = nodes.map((n) => n.spec.name);
    const expected = [
      [names[0], names[2], "warn"],
      [names[1], names[2], "warn"],
      [names[2], `${names[0]}, ${names[1]}`, "error"],
    ];
    // Each node names the peers it has heard since: wait for the whole picture.
    await waitFor(
      async () => {
        const got = (await mismatch(nodes[0]!))
          .map((e) => [e.node_name, e.message.match(/observed: (.*) present/)?.[1], e.severity])
          .sort((a, b) => String(a[0]).localeCompare(String(b[0])));
        return JSON.stringify(got) === JSON.stringify(expected) ? true : undefined;
      },
      { timeoutMs: 20_000, what: "cluster_secret_mismatch from every node, naming the others" },
    );
    expect((await chat(nodes[2]!, NEW)).status).toBe(200);
    patchConfig(nodes[2]!, { cluster: { secret: NEXT_SECRET } });
    expect((await reload(nodes[2]!)).status).toBe(200);
    await waitFor(async () => ((await mismatch(nodes[0]!)).length === 0 ? true : undefined), {
      timeoutMs: 20_000,
      what: "cluster_secret_mismatch to clear",
    });
  }, 300_000);
});
