// Limits and models per API token across 3 hosts (network namespaces), with a real llama-server:
// the master counts every gateway's requests, so a limit holds cluster-wide exactly, bursts
// included; a model outside a token's patterns is 403 and missing from its /v1/models.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startHostCluster, waitForConvergence } from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

const PER_MINUTE = "per-minute-token-0123456789";
const BURST = "burst-token-0123456789abc";
const NARROW = "narrow-token-0123456789ab";

let cluster: HostCluster;
let modelId: string;

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  ({ modelId } = await seedStore(store));
  cluster = await startHostCluster(3, {
    config: (i) => ({
      auth: {
        tokens: [
          {
            name: "per-minute",
            token: PER_MINUTE,
            scopes: ["inference"],
            limits: { requests_per_minute: 60 },
          },
          {
            name: "burst",
            token: BURST,
            scopes: ["inference"],
            limits: { requests_per_minute: 30, concurrent_requests: 100 },
          },
          { name: "narrow", token: NARROW, scopes: ["inference"], models: ["other-org/*"] },
        ],
      },
      ...(i === 0 ? { store_path: store } : {}),
    }),
  });
  await waitForConvergence(cluster.nodes, 3);
  await placeAndWait(cluster.nodes[0]!, { model_id: modelId });
}, 180_000);

afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

async function chat(node: NodeProcess, token: string) {
  const r = await fetch(`${node.apiUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    }),
  });
  const body = (await r.json()) as { error?: { code: string; message: string } };
  return { status: r.status, retryAfter: r.headers.get("retry-after"), body };
}

/** The value of `ic_token_requests_total{token,code}` in a node's /metrics (0 when absent). */
async function tokenRequests(node: NodeProcess, token: string, code: string): Promise<number> {
  const text = await (await fetch(`${node.apiUrl}/metrics`, { headers: node.authHeaders })).text();
  const line = text
    .split("\n")
    .find(
      (l) =>
        l.startsWith("ic_token_requests_total{") &&
        l.includes(`token="${token}"`) &&
        l.includes(`code="${code}"`),
    );
  return line ? Number(line.split(" ").at(-1)) : 0;
}

describe("limits per token across 3 hosts", () => {
  it("60 requests per minute: 60 answered through all three gateways, then every gateway answers 429 with Retry-After", async () => {
    const nodes = cluster.nodes;
    const answered: number[] = [];
    for (let i = 0; i < 60; i++) answered.push((await chat(nodes[i % 3]!, PER_MINUTE)).status);
    expect(answered.filter((s) => s === 200)).toHaveLength(60);
    for (const node of nodes) {
      const r = await chat(node, PER_MINUTE);
      expect(r.status, JSON.stringify(r.body)).toBe(429);
      expect(r.body.error?.code).toBe("rate_limited");
      expect(r.body.error?.message).toContain(
        'token "per-minute" reached its limit of 60 requests per minute',
      );
      const after = Number(r.retryAfter);
      expect(after).toBeGreaterThanOrEqual(1);
      expect(after).toBeLessThanOrEqual(61);
    }
    // Counted per token name on the gateway that answered.
    for (const node of nodes) {
      expect(await tokenRequests(node, "per-minute", "ok")).toBe(20);
      expect(await tokenRequests(node, "per-minute", "rate_limited")).toBe(1);
    }
  });

  it("a burst of 45 requests at once over 3 gateways with a limit of 30: exactly 30 are answered", async () => {
    const results = await Promise.all(
      Array.from({ length: 45 }, (_, i) => chat(cluster.nodes[i % 3]!, BURST)),
    );
    const statuses = results.map((r) => r.status);
    expect(
      statuses.filter((s) => s === 200),
      JSON.stringify(statuses),
    ).toHaveLength(30);
    expect(statuses.filter((s) => s === 429)).toHaveLength(15);
  });

  it("a token limited to other models: 403 naming its patterns, and /v1/models lists none of this cluster's", async () => {
    for (const node of cluster.nodes) {
      const r = await chat(node, NARROW);
      expect(r.status).toBe(403);
      expect(r.body.error?.message).toBe(
        `token "narrow" may not use model ${modelId}; it may use models matching other-org/*`,
      );
      const models = (await (
        await fetch(`${node.apiUrl}/v1/models`, { headers: { authorization: `Bearer ${NARROW}` } })
      ).json()) as { data: unknown[] };
      expect(models.data).toEqual([]);
    }
    // The same model through a token without patterns is listed.
    const all = (await (
      await fetch(`${cluster.nodes[1]!.apiUrl}/v1/models`, {
        headers: { authorization: `Bearer ${BURST}` },
      })
    ).json()) as { data: { id: string }[] };
    expect(all.data.map((m) => m.id)).toContain(modelId);
  });
});
