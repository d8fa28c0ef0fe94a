import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import {
  argAfter,
  placeAndWait,
  processesOf,
  seedStore,
  startCluster,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

/** Processes of `binary` whose argument after `flag` is `value` (e.g. `-H <a lab host's address>`). */
function pidsOf(binary: string, flag: string, value: string): { pid: number; argv: string[] }[] {
  return processesOf(binary).filter(({ argv }) => argAfter(argv, flag) === value);
}

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  instances: {
    instance_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string; restarts: number; endpoint?: string }[];
  }[];
}

describe("runners", () => {
  it("a drafter pairing runs llama-server with -md and the runner log shows speculative decoding statistics", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")), {
      drafterId: "test/tiny-drafter",
    });
    await using cluster = await startCluster(1, {
      config: () => ({ store_path: store, engine: { context_size: 1024 } }),
    });
    const node = cluster.nodes[0]!;
    await waitForConvergence(cluster.nodes, 1);
    await waitFor(
      async () =>
        (await node.get<{ models: unknown[] }>("/state")).models.length === 2 ? true : undefined,
      { timeoutMs: 10_000 },
    );
    const inst = await placeAndWait(node, { model_id: modelId });
    const client = new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: "unused" });
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "Tell me about the world" }],
      max_tokens: 32,
      temperature: 0,
    });
    expect(r.usage?.completion_tokens).toBe(32);
    // llama-server prints the statistics as the request finishes, possibly just after the response.
    const line = await waitFor(
      () => {
        const log = readFileSync(
          join(node.dataDir, "runners", `${inst.instance_id}-rank0.log`),
          "utf8",
        );
        return /draft acceptance = [\d.]+ \(\s*\d+ accepted \/\s*\d+ generated\)/.exec(log)?.[0];
      },
      { timeoutMs: 5000, what: "speculative decoding statistics in the runner log" },
    );
    expect(line).toMatch(/accepted/);
    // The drafter is staged with the model and counted as in use.
    const rep = await node.get<{ staged_models: { model_id: string; in_use: boolean }[] }>(
      "/store/storage",
    );
    expect(rep.staged_models.find((m) => m.model_id === "test/tiny-drafter")?.in_use).toBe(true);
  });

  it("a crashed remote rank is restarted, rank 0 reconnects to it, and the instance serves again", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startHostCluster(2, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    const [n1] = cluster.nodes as [NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 2);
    const inst = await placeAndWait(n1, { model_id: modelId, min_nodes: 2 });
    const doc = await n1.get<StateDoc>("/state");
    const hostOf = (rank: number) =>
      doc.node_identities.find(
        (n) => n.node_id === inst.assignments.find((a) => a.rank === rank)!.node_id,
      )!.name;
    const [host0, host1] = [hostOf(0), hostOf(1)];
    expect(host0).not.toBe(host1);
    // Rank 1 is the ggml-rpc-server listening on its own host's address (not another test's).
    const rpc = pidsOf("ggml-rpc-server", "-H", cluster.lab.host(host1).address);
    expect(rpc).toHaveLength(1);
    process.kill(rpc[0]!.pid, "SIGKILL");
    // Rank 1 restarts; rank 0 is stopped meanwhile and restarted against the rank's endpoint.
    const s = await waitFor(
      async () => {
        const s = await n1.get<StateDoc>("/state");
        const rs = s.instances.find((i) => i.instance_id === inst.instance_id)?.runners ?? [];
        const r1 = rs.find((r) => r.rank === 1);
        const r0 = rs.find((r) => r.rank === 0);
        return r1?.restarts === 1 && r1.state === "RunnerReady" && r0?.state === "RunnerReady"
          ? s
          : undefined;
      },
      { timeoutMs: 30_000, what: "instance serving again" },
    );
    // Both ranks are advertised under their hosts' names, and rank 0's llama-server (on its own
    // host's address) dials rank 1 by that name.
    const runners = s.instances.find((i) => i.instance_id === inst.instance_id)!.runners;
    const ep1 = runners.find((r) => r.rank === 1)!.endpoint!;
    expect(ep1).toMatch(new RegExp(`^${host1}:\\d+$`));
    expect(runners.find((r) => r.rank === 0)!.endpoint).toMatch(
      new RegExp(`^https://${host0}:\\d+$`),
    );
    const servers = pidsOf("llama-server", "--host", cluster.lab.host(host0).address);
    expect(servers).toHaveLength(1);
    const argv = servers[0]!.argv;
    expect(argv[argv.indexOf("--rpc") + 1]).toBe(ep1);
    const client = new OpenAI({ baseURL: `${n1.apiUrl}/v1`, apiKey: cluster.adminToken });
    // The state above can still show rank 0 ready from before its own restart (it is stopped once
    // rank 1 is back); meanwhile the answer is the retryable 404, which a client retries.
    const r = await waitFor(
      async () => {
        try {
          return await client.chat.completions.create({
            model: modelId,
            messages: [{ role: "user", content: "hi" }],
            max_tokens: 4,
          });
        } catch (e) {
          if (e instanceof OpenAI.APIError && e.status === 404) return undefined;
          throw e;
        }
      },
      { timeoutMs: 30_000, intervalMs: 100, what: "a chat answered after the restarts" },
    );
    expect(r.usage?.completion_tokens).toBe(4);
  });

  it("an unusable SERVICE_ENGINE_SERVER_BIN is reported in nodeHealth as invalid_engine_binary and is not replaced", async () => {
    await using cluster = await startHostCluster(2, {
      env: (i): Record<string, string> =>
        i === 1 ? { SERVICE_ENGINE_SERVER_BIN: "/nonexistent/llama-server" } : {},
    });
    const doc = await waitFor(
      async () => {
        const d = await cluster.nodes[0]!.get<{
          nodeHealth: {
            node_name: string;
            code: string;
            severity: string;
            message: string;
            remediation: string;
          }[];
        }>("/state");
        return d.nodeHealth.some((h) => h.node_name === "node-2") ? d : undefined;
      },
      { timeoutMs: 15_000, what: "nodeHealth entry" },
    );
    const h = doc.nodeHealth.find((x) => x.node_name === "node-2")!;
    expect(h).toMatchObject({ code: "invalid_engine_binary", severity: "warn" });
    expect(h.message).toContain("/nonexistent/llama-server");
    expect(h.remediation).toContain("SERVICE_ENGINE_SERVER_BIN");
    // node-1's own engine is the managed build: nothing about it. (Only engine codes are checked:
    // a fresh 2-node cluster on a loaded runner once took over 5 s to open its intent store, which
    // node-1 then rightly reported as intent_store_unavailable for a moment.)
    const engineCodes = ["invalid_engine_binary", "gpu_serving_disabled", "engine_plaintext"];
    expect(
      doc.nodeHealth.filter((x) => x.node_name === "node-1" && engineCodes.includes(x.code)),
    ).toEqual([]);
  });
});
