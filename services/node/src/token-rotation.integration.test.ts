// Rotating an API token without downtime across 3 hosts (network namespaces), with chat traffic
// flowing through every node the whole time: the new token is added beside the old one and each node
// reloads (one by SIGHUP, two by POST /admin/reload), the clients move to it, the old one is dropped
// and the nodes reload again. No request fails; the old token is refused afterwards; a config file
// that does not load changes nothing.
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  patchConfig,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "./launcher/node-process.ts";

const OLD = "old-app-token-0123456789abcdef";
const NEW = "new-app-token-fedcba9876543210";

describe("token rotation under load", () => {
  it("adds the new token, moves the clients, drops the old one: no failed request", async () => {
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
    stop = true;
    await Promise.all(clients);
    expect(statuses.length).toBeGreaterThan(20);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  }, 240_000);
});
