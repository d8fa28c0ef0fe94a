// The cache follows the conversation (issue 50), on 3 hosts with real engines: a long conversation
// (more than 1,500 prompt tokens of the wide model) streams through node-1 from the only instance,
// on one of node-2 and node-3. That node is drained mid-stream: the master places the model on the
// other, and once it is ready node-1's gateway hands the stream over. The draining node saves the
// stream's slot, the other fetches the file over the node API (TLS, node token, sha256) and restores
// it, and the continuation names that slot. The stream ends as one completion, and the target
// engine's own counts (timings of the continuation) show it prefilled at most a tenth of the
// context. The slot files are gone afterwards on both nodes.
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startHostCluster, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  nodes?: unknown;
}
interface Chunk {
  id: string;
  choices: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  timings?: { cache_n: number; prompt_n: number };
  x_ic?: { migrated_from?: string; kv?: { restored_tokens: number; bytes: number } };
  error?: { code: string; message: string };
}

const words = "river stone lantern orchard harbor meadow signal copper window garden".split(" ");
/** A long user message: the tiny models' vocabulary is bytes, so about one token a character. */
const history = Array.from({ length: 130 }, (_, i) => words[(i * 7) % words.length]).join(" ");

/** Files left in a node's slot directories (`<runner_log_dir>/kv/<instance>/`). */
function slotFiles(node: NodeProcess): string[] {
  const root = join(node.dataDir, "runners", "kv");
  try {
    return readdirSync(root).flatMap((d) => readdirSync(join(root, d)).map((f) => `${d}/${f}`));
  } catch {
    return [];
  }
}

/** The sum of a metric's samples whose line holds `match`, in a node's /metrics. */
async function metric(node: NodeProcess, name: string, match = ""): Promise<number> {
  const res = await fetch(`${node.apiUrl}/metrics`, { headers: node.authHeaders });
  return (await res.text())
    .split("\n")
    .filter((l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && l.includes(match))
    .reduce((s, l) => s + Number(l.split(" ").at(-1)), 0);
}

/**
 * 3 hosts (two llama-server slots of 4096 tokens each, one thread) and the wide model placed off
 * node-1 (the client's gateway): on node-2 or node-3 (`holder`), its replacement on the other.
 */
async function heldOffNode1(modelId: string) {
  const { store } = await seedStore(mkdtempSync(join(tmpdir(), "ic-kv-move-")), {
    modelId,
    slow: true,
  });
  const cluster = await startHostCluster(3, {
    config: (i) => ({
      node: { drain_timeout_ms: 60_000 },
      engine: { context_size: 8192, extra_args: ["-np", "2", "-t", "1"] },
      ...(i === 0 ? { store_path: store } : {}),
    }),
  });
  const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
  await waitForConvergence(cluster.nodes, 3);
  const doc = await n1.get<StateDoc>("/state");
  const id = (name: string) => doc.node_identities.find((n) => n.name === name)!.node_id;
  const placed = await placeAndWait(n1, { model_id: modelId, excluded_nodes: [id("node-1")] });
  const [holder, other] = placed.assignments[0]!.node_id === id("node-2") ? [n2, n3] : [n3, n2];
  return {
    n1,
    holder,
    other,
    placed,
    modelId,
    [Symbol.asyncDispose]: () => cluster[Symbol.asyncDispose](),
  };
}

describe("the cache follows the conversation", () => {
  it("a stream on a draining node moves with its KV cache: the other node restores it and prefills at most a tenth", async () => {
    await using c = await heldOffNode1("kv/wide");
    const { n1, holder, other, placed, modelId } = c;

    const res = await fetch(`${n1.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-ic-migrate": "1", ...n1.authHeaders },
      body: JSON.stringify({
        model: modelId,
        messages: [
          { role: "system", content: `You keep the notes of a long conversation. ${history}` },
          { role: "user", content: `Go on from here: ${history}` },
        ],
        // Long enough to outlast the replacement's start: in CI the move came after about 240
        // generated tokens (1747 restored, a prompt of about 1500), a fifth of these.
        max_tokens: 1200,
        ignore_eos: true,
        temperature: 0,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    const first = res.headers.get("x-instance-id")!;
    expect(first).toBe(placed.instance_id);

    // Read events; after the fifth with text, drain the holder (as POST /admin/drain does).
    const chunks: string[] = [];
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let carry = "";
    let drained: Promise<Response> | undefined;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      carry += decoder.decode(value, { stream: true });
      const parts = carry.split("\n\n");
      carry = parts.pop()!;
      for (const p of parts) chunks.push(p.replace(/^id: \d+\n/, "").slice("data: ".length));
      if (!drained && chunks.filter((c) => c.includes('"content":"')).length >= 5)
        drained = holder.post("/admin/drain", {});
    }
    expect(drained, "the holder was drained mid-stream").toBeDefined();
    expect((await drained!).status).toBe(202);
    expect(chunks.at(-1)).toBe("[DONE]");
    const events = chunks.slice(0, -1).map((c) => JSON.parse(c) as Chunk);
    expect(events.filter((e) => e.error)).toEqual([]);
    expect(new Set(events.map((e) => e.id)).size).toBe(1);
    expect(events.some((e) => e.choices[0]?.finish_reason === "length")).toBe(true);

    // The continuation's final event: where it came from, and the cache that came with it.
    const last = events.findLast((e) => e.x_ic !== undefined)!;
    expect(last.x_ic?.migrated_from).toBe(first);
    const kv = last.x_ic!.kv!;
    const moveLog = n1.logLines.filter((l) => l.includes("KV cache")).join("\n");
    expect(kv, moveLog).toBeDefined();
    expect(kv.restored_tokens).toBeGreaterThan(1500);
    expect(kv.bytes).toBeGreaterThan(0);
    // The target engine's own counts: what it reused of the restored slot and what it computed.
    const t = events.findLast((e) => e.timings !== undefined)!.timings!;
    const context = t.cache_n + t.prompt_n;
    expect(context).toBeGreaterThan(1500);
    expect(t.prompt_n, JSON.stringify(t)).toBeLessThanOrEqual(context / 10);

    // The gateway counted the move; the drain ended idle (the stream left, nothing was cut).
    expect(await metric(n1, "ic_kv_moves_total", 'outcome="moved"')).toBe(1);
    expect(await metric(n1, "ic_kv_move_restored_tokens_total")).toBe(kv.restored_tokens);
    expect(await metric(n1, "ic_kv_move_bytes_total")).toBe(kv.bytes);
    await expect
      .poll(() => holder.logLines.find((l) => l.includes('"msg":"drained"')), { timeout: 30_000 })
      .toContain('"outcome":"idle"');
    // No slot file is left behind on either side.
    expect(slotFiles(other)).toEqual([]);
    expect(slotFiles(holder)).toEqual([]);
    process.stdout.write(
      `kv move: ${kv.restored_tokens} tokens (${kv.bytes} bytes) restored; the continuation reused ${t.cache_n} and computed ${t.prompt_n} of ${context}\n`,
    );
  }, 180_000);

  it("a drained node's warm conversations go to the replica taking them: their next turns reuse the history there", async () => {
    await using c = await heldOffNode1("kv/warm");
    const { n1, holder, other, placed, modelId } = c;
    const ask = async (node: NodeProcess, messages: unknown[]) => {
      const r = await node.post("/v1/chat/completions", {
        model: modelId,
        messages,
        max_tokens: 8,
        temperature: 0,
      });
      const body = await r.text();
      expect(r.status, body).toBe(200);
      const a = JSON.parse(body) as {
        choices: { message: { content: string } }[];
        timings: { cache_n: number; prompt_n: number };
      };
      return { instance: r.headers.get("x-instance-id")!, ...a };
    };
    // Three conversations on the holder's two slots: the oldest (c) is no longer in a slot.
    const convs = ["c", "a", "b"].map((name, k) => [
      { role: "system", content: `Conversation ${name}. ${history.slice(k * 7)}` },
      { role: "user", content: `Tell me about ${name}: ${history.slice(k * 11)}` },
    ]);
    const first = [];
    for (const m of convs) first.push(await ask(n1, m));
    expect(first.map((f) => f.instance)).toEqual([
      placed.instance_id,
      placed.instance_id,
      placed.instance_id,
    ]);

    // The drain: the replica starts elsewhere; once nothing is in flight, the holder moves its
    // warm conversations there (as many as the replica's engine has slots) and stops.
    expect((await holder.post("/admin/drain", {})).status).toBe(202);
    await expect.poll(() => holder.running, { timeout: 60_000, interval: 250 }).toBe(false);
    const moves = holder.logLines.filter((l) => l.includes("a warm conversation's KV cache moved"));
    expect(moves, holder.logLines.filter((l) => l.includes("KV cache")).join("\n")).toHaveLength(2);
    expect(holder.logLines.find((l) => l.includes('"msg":"drained"'))).toContain(
      '"outcome":"idle"',
    );

    // Next turns, through the other node's gateway: a and b reuse their whole history on the new replica,
    // c (not moved) computes it again. c goes last: as a new prompt it takes the least recently
    // used of the replica's two slots, which holds one of the others.
    const next: Awaited<ReturnType<typeof ask>>[] = [];
    for (const k of [1, 2, 0])
      next[k] = await ask(other, [
        ...convs[k]!,
        { role: "assistant", content: first[k]!.choices[0]!.message.content },
        { role: "user", content: "And then?" },
      ]);
    const replica = next[0]!.instance;
    expect(replica).not.toBe(placed.instance_id);
    for (const [k, n] of next.entries()) {
      const history = first[k]!.timings.prompt_n + first[k]!.timings.cache_n;
      if (k === 0) expect(n.timings.cache_n, "c was not moved").toBeLessThan(history / 10);
      else expect(n.timings.cache_n, `conversation ${k}`).toBeGreaterThanOrEqual(history * 0.9);
    }
    expect(slotFiles(holder)).toEqual([]);
    expect(slotFiles(other)).toEqual([]);
    process.stdout.write(
      `warm hand-off: next turns reused ${next.map((n) => n.timings.cache_n).join(", ")} of ${first.map((f) => f.timings.prompt_n + f.timings.cache_n).join(", ")} (c, a, b)\n`,
    );
  }, 180_000);
});
