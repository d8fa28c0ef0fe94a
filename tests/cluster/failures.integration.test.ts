// A model that cannot load looks like a failure everywhere: two lab hosts, a GGUF whose header reads
// fine (it registers) but whose weights lack a tensor llama.cpp needs. Its runner crash-loops on the
// first node (nodeHealth says so, with the engine's words), the master moves the deployment to the
// other node (Failing), where it fails too, then gives it up (Failed) with every node's error line.
// Chat answers model_not_ready with retryable false and the cause, `ic doctor` exits 1 naming it,
// and a new placement of the model supersedes the failed deployment.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it, onTestFailed } from "vitest";
import { seedStore, startHostCluster, waitFor, waitForConvergence } from "@ic/testkit";

const BROKEN = "test/broken-llama";
const IC = fileURLToPath(new URL("../../services/cli/bin/ic.mjs", import.meta.url));

interface Doc {
  nodeHealth: { node_name: string; code: string; message: string; model_id?: string }[];
  deployments: {
    deployment_id: string;
    model_id: string;
    status: string;
    refusal?: { code: string; message: string };
    failures?: { node_name: string; error: string }[];
  }[];
}

function ic(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [IC, ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    child.on("exit", (code) => resolve({ code, out }));
  });
}

describe("a model that cannot load", () => {
  it("shows as failing, then failed, with the engine's words: state, chat, doctor; a new placement retries", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    await seedStore(store, { modelId: BROKEN, unloadable: true });
    await using cluster = await startHostCluster(2, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    onTestFailed(() => {
      for (const n of cluster.nodes)
        process.stderr.write(`--- ${n.spec.name} ---\n${n.logLines.slice(-30).join("\n")}\n`);
    });
    await waitForConvergence(cluster.nodes, 2, 60_000);
    const [n1, n2] = cluster.nodes as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
    await waitFor(
      async () =>
        (await n1.get<{ models: { model_id: string }[] }>("/state")).models.some(
          (m) => m.model_id === BROKEN,
        )
          ? true
          : undefined,
      { timeoutMs: 30_000, what: "the broken model registered" },
    );
    const placed = await n1.post("/place_instance", { model_id: BROKEN, min_nodes: 1 });
    expect(placed.status).toBe(200);

    // While its runner crash-loops, its node says so with the engine's words.
    const crashing = await waitFor(
      async () => {
        const d = await n2.get<Doc>("/state");
        return d.nodeHealth.find(
          (h) =>
            (h.code === "runner_crash_loop" || h.code === "runner_failed") && h.model_id === BROKEN,
        );
      },
      { timeoutMs: 60_000, intervalMs: 100, what: "a runner_crash_loop entry in nodeHealth" },
    );
    expect(crashing.message).toMatch(/token_embd\.weight/);

    // Then the master moves it and finally gives it up, with each node's error line.
    const failed = await waitFor(
      async () => {
        const d = (await n2.get<Doc>("/state")).deployments.find((x) => x.model_id === BROKEN);
        return d?.status === "Failed" ? d : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 250, what: "the deployment Failed" },
    );
    expect(failed.failures?.map((f) => f.node_name).sort()).toEqual(["node-1", "node-2"]);
    for (const f of failed.failures ?? []) expect(f.error).toMatch(/token_embd\.weight/);
    expect(failed.refusal).toMatchObject({ code: "load_failed" });
    expect(failed.refusal?.message).toMatch(/failed to run on every node it was tried on/);

    // Chat says it will not come back by itself, and why.
    const chat = await n2.post("/v1/chat/completions", {
      model: BROKEN,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
    const body = (await chat.json()) as {
      error: { code: string; retryable: boolean; message: string };
    };
    expect(chat.status).toBe(404);
    expect(body.error).toMatchObject({ code: "model_not_ready", retryable: false });
    expect(body.error.message).toMatch(/token_embd\.weight/);

    // The operator's checklist fails and names it.
    const doctor = await ic(["doctor"], {
      IC_URL: n1.apiUrl,
      IC_TOKEN: n1.spec.apiToken!,
      IC_CA_FILE: cluster.certs!.caFile,
    });
    expect(doctor.code, doctor.out).toBe(1);
    expect(doctor.out).toMatch(/models.*test\/broken-llama failed/s);
    expect(doctor.out).toMatch(/token_embd\.weight/);

    // Placing the model again replaces the failed deployment (and tries again).
    const again = await n1.post("/place_instance", { model_id: BROKEN, min_nodes: 1 });
    expect(again.status).toBe(200);
    const deps = (await n1.get<Doc>("/state")).deployments.filter((d) => d.model_id === BROKEN);
    expect(deps.map((d) => d.deployment_id)).not.toContain(failed.deployment_id);
    expect(deps).toHaveLength(1);
  }, 300_000);
});
