// The real `ic` binary against a real node: tables and --json, pulls with progress from the hub
// emulator, placement, chat, doctor passing on a healthy node and failing with what to fix, and
// errors as one line without a stack trace.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  freePort,
  placeAndWait,
  seedStore,
  startCluster,
  startHubEmulator,
  waitForConvergence,
} from "@ic/testkit";
import { BIN, ic } from "./test-support.ts";

async function until(ok: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`not seen within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const noStack = (s: string) => expect(s).not.toMatch(/\n\s+at /);

describe("ic", () => {
  it("drives a real node: status, models, pull, previews, place, chat, rm, doctor", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using hub = await startHubEmulator();
    await hub.addRepo("acme/pulled", {
      "tiny-llama.gguf": { fromPath: join(store, "test--tiny-llama", "tiny-llama.gguf") },
    });
    await using cluster = await startCluster(1, {
      config: () => ({
        store_path: store,
        model_store: { hub_url: hub.url, staging: { headroom_gb: 0 } },
      }),
    });
    await waitForConvergence(cluster.nodes, 1);
    const url = cluster.nodes[0]!.apiUrl;
    const inst = await placeAndWait(cluster.nodes[0]!, { model_id: modelId, min_nodes: 1 });
    const env = { IC_URL: url };

    const status = await ic(["status", "--json"], env);
    expect(status.code, status.err).toBe(0);
    expect((JSON.parse(status.out) as { node_identities: unknown[] }).node_identities).toHaveLength(
      1,
    );
    const table = await ic(["status"], env);
    expect(table.out).toMatch(/NODE\s+ROLE\s+HEARD/);
    expect(table.out).toContain(inst.instance_id);

    const help = await ic(["pull", "--help"], env);
    expect(help.code).toBe(0);
    expect(help.out).toContain("Usage: ic pull <org/name>");

    // Pull with progress (not a TTY: plain lines), then the model is placeable.
    const pull = await ic(["pull", "acme/pulled"], env);
    expect(pull.code, pull.err).toBe(0);
    expect(pull.out).toMatch(/acme\/pulled done\s+\[#+\] 100%/);
    const models = await ic(["models"], env);
    expect(models.out).toMatch(/acme\/pulled/);
    expect(models.out).toMatch(new RegExp(`${modelId}.*yes`));

    const previews = await ic(["previews", "acme/pulled"], env);
    expect(previews.code, previews.err).toBe(0);
    expect(previews.out).toMatch(/Pipeline\s+1\s+ok/);
    // One name for a node: output names it first, and --exclude takes the name.
    const self = (
      JSON.parse(status.out) as { node_identities: { name: string; node_id: string }[] }
    ).node_identities[0]!;
    expect(previews.out).toContain(`ok: ${self.name} (${self.node_id})`);
    const excluded = await ic(["previews", "acme/pulled", "--exclude", self.name], env);
    expect(excluded.out).toMatch(/Pipeline\s+1\s+all_excluded/);
    const bogus = await ic(["previews", "acme/pulled", "--exclude", "bogus"], env);
    expect(bogus.code).not.toBe(0);
    expect(bogus.err).toContain(
      `excluded_node_ids: no node is named bogus; the nodes are ${self.name} (${self.node_id})`,
    );
    const place = await ic(["place", "acme/pulled", "--json"], env);
    expect(place.code, place.err).toBe(0);
    const placed = JSON.parse(place.out) as { instance: { instance_id: string } };

    // The answer streams as the text itself (no line per chunk): the same as --json's, at temperature 0.
    const args = ["chat", modelId, "hi", "--max-tokens", "8", "--temperature", "0"];
    const chat = await ic(args, env);
    expect(chat.code, chat.err).toBe(0);
    const whole = JSON.parse((await ic([...args, "--json"], env)).out) as { content: string };
    expect(whole.content.length).toBeGreaterThan(0);
    expect(chat.out).toBe(`${whole.content}\n`);
    expect((await ic(["chat", modelId, "--temperature", "hot"], env)).code).toBe(2);

    const doctor = await ic(["doctor"], env);
    expect(doctor.code, doctor.out + doctor.err).toBe(0);
    for (const name of [
      "api",
      "nodes",
      "bus",
      "engine",
      "disk node-1",
      "reach node-1",
      "nats-server",
      "completion",
    ])
      expect(doctor.out).toMatch(new RegExp(`✓ ${name}`));
    const doctorJson = await ic(["doctor", "--json"], env);
    expect((JSON.parse(doctorJson.out) as { ok: boolean }[]).every((c) => c.ok)).toBe(true);

    // Broken: the wrong machine count, a node that is not there.
    const expect3 = await ic(["doctor", "--expect-nodes", "3"], env);
    expect(expect3.code).toBe(1);
    expect(expect3.out).toMatch(
      /✗ nodes\s+1 node\(s\) in the session, expected 3: start the missing ones/,
    );
    const closed = await freePort();
    const down = await ic(["doctor", "--url", `http://127.0.0.1:${closed}`]);
    expect(down.code).toBe(1);
    expect(down.out).toMatch(/✗ api\s+cannot reach http:\/\/127.0.0.1:\d+: .*is the node running/);

    // Node logs: one readable line each, the level by name and the key fields named.
    const logs = await ic(["logs", "--tail", "500", "--level", "info"], env);
    expect(logs.code, logs.err).toBe(0);
    expect(logs.out).toMatch(
      new RegExp(
        `^\\S+Z  INFO   worker  runner ready  node=node-1 model=${modelId} instance=\\S+ rank=0$`,
        "m",
      ),
    );
    expect(logs.out).not.toMatch(/^\{/m);
    // --node names the node by name (or id); an unknown one is an error listing the nodes.
    const byName = await ic(["logs", "--node", self.name, "--tail", "5"], env);
    expect(byName.code, byName.err).toBe(0);
    expect(byName.out.trim().split("\n")).toHaveLength(5);
    expect((await ic(["logs", "--node", self.node_id, "--tail", "1"], env)).code).toBe(0);
    const noNode = await ic(["logs", "--node", "bogus"], env);
    expect(noNode.code).toBe(2);
    expect(noNode.err).toContain(`--node: no node is named bogus; the nodes are ${self.name} (`);
    const oneNode = await ic(["storage", "--node", self.name, "--json"], env);
    expect(oneNode.code, oneNode.err).toBe(0);
    expect((JSON.parse(oneNode.out) as { node: string }[]).map((r) => r.node)).toEqual([self.name]);
    // -f: the tail, then what the node writes next (the runner stopping), until the user leaves.
    const follower = spawn(process.execPath, [BIN, "logs", "-f", "--tail", "1"], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let followed = "";
    follower.stdout.on("data", (c: Buffer) => (followed += c.toString()));
    try {
      await until(() => followed.length > 0);
      // A unique prefix of the id is enough.
      const rm = await ic(["rm", placed.instance.instance_id.slice(0, 10)], env);
      expect(rm.code, rm.err).toBe(0);
      expect(rm.out).toBe(`deleted ${placed.instance.instance_id}\n`);
      await until(() =>
        followed.includes(
          `stopping runner  node=node-1 instance=${placed.instance.instance_id} rank=0`,
        ),
      );
    } finally {
      follower.kill();
    }
    expect((await ic(["logs", "-f", "--instance", "x"], env)).code).toBe(2);
    const noSuch = await ic(["rm", "i-nothing"], env);
    expect(noSuch.code).toBe(1);
    expect(noSuch.err).toMatch(/^ic: no instance id starts with "i-nothing" \(instances: i-/);
    // Purging twice: the second says why it freed nothing.
    expect((await ic(["purge", "--model", "acme/pulled"], env)).code).toBe(0);
    const again = await ic(["purge", "--model", "acme/pulled"], env);
    expect(again.out).toContain("freed nothing: no node holds staged copies of acme/pulled");
    expect((await ic(["--version"], env)).out).toMatch(/^ic \d+\.\d+\.\d+\n$/);
    const storage = await ic(["storage"], env);
    expect(storage.code, storage.err).toBe(0);
    expect(storage.out).toMatch(/NODE\s+STAGED[\s\S]*node-1\s+\S+/);

    // Mistakes: one line, no stack trace; usage 2, refusals 1.
    const bad = await ic(["status", "--bogus"], env);
    expect(bad.code).toBe(2);
    expect(bad.err.trim().split("\n")).toHaveLength(1);
    const refused = await ic(["place", "org/none"], env);
    expect(refused.code).toBe(1);
    expect(refused.err).toMatch(/^ic: model_not_found: /);
    noStack(refused.err);
    const unreachable = await ic(["status", "--url", `http://127.0.0.1:${closed}`]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.err).toMatch(/^ic: cannot reach http:\/\/127.0.0.1:\d+/);
    noStack(unreachable.err);
  }, 180_000);
});
