// Models in while the cluster runs, across hosts: a pull asked on one node runs on the store host
// (another host) from the hub emulator, shows its progress in /state, is cancelled and resumed without
// fetching again what it had, and the model becomes placeable with no restart; a model directory
// copied into store_path is registered once it settles and is placeable; removal is refused while a
// pull of the model runs or an instance serves it; bad model ids are typed 400s.
import { cpSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  DelayRelay,
  patchConfig,
  placeAndWait,
  seedStore,
  startHostCluster,
  startHubEmulator,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface Pull {
  model_id: string;
  revision: string;
  state: string;
  bytes_done: number;
  bytes_total: number | null;
  files_done: number;
  files_total: number | null;
  started_at: string;
  error?: { code: string; message: string };
}
interface StateDoc {
  models: { model_id: string }[];
  pulls: Pull[];
  nodeHealth: { code: string; message: string }[];
}

async function send(node: NodeProcess, method: string, path: string, body?: unknown) {
  const r = await fetch(`${node.apiUrl}${path}`, {
    method,
    headers: { "content-type": "application/json", ...node.authHeaders },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

describe("models in while running", () => {
  it("pulls from the hub through any node, with progress, cancel and resume; copied models register", async () => {
    const seeded = await seedStore(mkdtempSync(join(tmpdir(), "ic-seed-")));
    const tinyPath = join(seeded.store, "test--tiny-llama", "tiny-llama.gguf");
    const extra = randomBytes(2 * 1024 * 1024);
    await using hub = await startHubEmulator();
    await hub.addRepo("acme/pulled", {
      "a-extra.txt": extra,
      "tiny-llama.gguf": { fromPath: tinyPath },
    });
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    await using cluster = await startHostCluster(2, {
      config: (i) =>
        i === 0 ? { store_path: store, model_store: { staging: { headroom_gb: 0 } } } : {},
      startOnly: [],
    });
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess];
    await using hubRelay = await DelayRelay.start({
      listenHost: cluster.lab.rootAddress,
      targetHost: "127.0.0.1",
      targetPort: Number(new URL(hub.url).port),
      delayMs: 0,
    });
    patchConfig(n1, { model_store: { hub_url: `http://${hubRelay.address}` } });
    await n1.start();
    await n2.start();
    await waitForConvergence(cluster.nodes, 2);

    // Bad input: a typed 400, nothing started.
    for (const bad of [
      { model_id: "../x" },
      { model_id: "a/b/c" },
      {},
      { model_id: "acme/x", y: 1 },
      { model_id: "acme/x", revision: "../main" },
      { model_id: "acme/x", revision: "" },
    ]) {
      const r = await send(n2, "POST", "/store/pulls", bad);
      expect(r.status).toBe(400);
      expect((r.body.error as { code: string }).code).toBe("invalid_request");
    }
    for (const path of [
      "/store/pulls/a/b/c",
      "/store/pulls/..%2Fx",
      "/store/pulls/a%2Fb/c",
      "/store/models/a/b/c",
      "/store/models/..%2Fx",
    ]) {
      const r = await send(n2, "DELETE", path);
      expect([path, r.status]).toEqual([path, 400]);
      expect((r.body.error as { code: string }).code).toBe("invalid_request");
    }
    expect((await send(n2, "DELETE", "/store/pulls/acme/none")).status).toBe(404);

    // The second file is held at the hub: the pull stops half-way, visible from every node.
    const held = hub.hold((req) => req.path.includes("tiny-llama.gguf"));
    const started = await send(n2, "POST", "/store/pulls", { model_id: "acme/pulled" });
    expect(started.status).toBe(202);
    expect(started.body.pull).toMatchObject({ model_id: "acme/pulled", revision: "main" });
    const mid = await waitFor(
      async () => {
        const s = await n2.get<StateDoc>("/state");
        const p = s.pulls.find((x) => x.model_id === "acme/pulled");
        // The first file's bytes count as they arrive; it is done once verified and in place.
        return p && p.state === "running" && p.files_done >= 1 ? p : undefined;
      },
      { timeoutMs: 20_000, what: "pull progress in /state of another node" },
    );
    expect(mid.bytes_done).toBeGreaterThanOrEqual(extra.length);
    expect(mid.bytes_total).toBeGreaterThan(extra.length);
    expect(mid).toMatchObject({ files_done: 1, files_total: 2 });
    // Asked again while it runs: the same pull (200); at another revision: a conflict.
    const again = await send(n1, "POST", "/store/pulls", { model_id: "acme/pulled" });
    expect(again.status).toBe(200);
    expect((again.body.pull as Pull).started_at).toBe((started.body.pull as Pull).started_at);
    const other = await send(n1, "POST", "/store/pulls", {
      model_id: "acme/pulled",
      revision: "v2",
    });
    expect(other.status).toBe(409);
    // Removal is refused while the pull runs, before the registry or the disk change.
    const busy = await send(n2, "DELETE", "/store/models/acme/pulled");
    expect(busy.status).toBe(409);
    expect((busy.body.error as { message: string }).message).toContain("cancel it first");
    expect(existsSync(join(store, "acme--pulled", "a-extra.txt"))).toBe(true);
    const cancelled = await send(n2, "DELETE", "/store/pulls/acme/pulled");
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ dismissed: false, pull: { state: "cancelled" } });
    held.release();
    const extraFetches = () =>
      hub.requests.filter((r) => r.path.includes("a-extra.txt") && r.method === "GET").length;
    const fetchedBefore = extraFetches();

    // Asked again: resumes, fetches only what it did not have, and the model becomes placeable.
    expect((await send(n1, "POST", "/store/pulls", { model_id: "acme/pulled" })).status).toBe(202);
    await waitFor(
      async () => {
        const { body } = await send(n2, "GET", "/store/pulls");
        const p = (body.pulls as Pull[]).find((x) => x.model_id === "acme/pulled");
        if (p?.state === "failed") throw new Error(`pull failed: ${p.error?.message}`);
        return p?.state === "done" ? p : undefined;
      },
      { timeoutMs: 30_000, what: "the resumed pull to finish" },
    );
    expect(extraFetches()).toBe(fetchedBefore);
    const done = (await send(n2, "GET", "/store/pulls")).body.pulls as Pull[];
    expect(done.find((x) => x.model_id === "acme/pulled")).toMatchObject({
      files_done: 2,
      files_total: 2,
    });
    // A finished pull is dismissed from the list (DELETE cancels only a live one).
    const dismissed = await send(n2, "DELETE", "/store/pulls/acme/pulled");
    expect(dismissed.status).toBe(200);
    expect(dismissed.body).toMatchObject({ dismissed: true, pull: { state: "done" } });
    expect((await send(n2, "GET", "/store/pulls")).body.pulls).toEqual([]);
    const inst = await placeAndWait(n2, { model_id: "acme/pulled", min_nodes: 1 }, 60_000);
    const chat = await n2.post("/v1/chat/completions", {
      model: "acme/pulled",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
    expect(chat.status).toBe(200);

    // A model copied into store_path while running is registered without a restart.
    cpSync(join(seeded.store, "test--tiny-llama"), join(store, "acme--copied"), {
      recursive: true,
    });
    await waitFor(
      async () => {
        const s = await n2.get<StateDoc>("/state");
        return s.models.some((m) => m.model_id === "acme/copied") ? true : undefined;
      },
      { timeoutMs: 30_000, what: "the copied model registered" },
    );
    const previews = await n2.get<{ previews: { ok: boolean }[] }>(
      "/instance/previews?model_id=acme/copied",
    );
    expect(previews.previews.some((p) => p.ok)).toBe(true);

    // Removal: refused while an instance serves the model; a model nothing uses goes from the
    // registry and the disk.
    const refused = await send(n2, "DELETE", "/store/models/acme/pulled");
    expect(refused.status).toBe(409);
    expect((refused.body.error as { code: string; message: string }).message).toContain(
      inst.instance_id,
    );
    expect(existsSync(join(store, "acme--pulled"))).toBe(true);
    const removed = await send(n2, "DELETE", "/store/models/acme/copied");
    expect(removed.status).toBe(200);
    expect(removed.body).toEqual({ ok: true, model_id: "acme/copied" });
    expect(existsSync(join(store, "acme--copied"))).toBe(false);
    const registered = async (id: string) =>
      (await n2.get<StateDoc>("/state")).models.some((m) => m.model_id === id);
    await waitFor(async () => ((await registered("acme/copied")) ? undefined : true), {
      timeoutMs: 10_000,
      what: "acme/copied out of the registry",
    });
    expect((await send(n2, "DELETE", "/store/models/acme/copied")).status).toBe(404);

    // A directory removed by hand while an instance uses it: a warning in nodeHealth, still
    // registered; once the instance is gone, out of the registry and the warning clears.
    rmSync(join(store, "acme--pulled"), { recursive: true, force: true });
    const warning = await waitFor(
      async () =>
        (await n2.get<StateDoc>("/state")).nodeHealth.find((h) => h.code === "store_model_missing"),
      { timeoutMs: 30_000, what: "store_model_missing in nodeHealth" },
    );
    expect(warning.message).toContain("acme/pulled");
    expect(await registered("acme/pulled")).toBe(true);
    expect((await send(n2, "DELETE", `/instance/${inst.instance_id}`)).status).toBe(200);
    await waitFor(
      async () => {
        const s = await n2.get<StateDoc>("/state");
        const gone =
          !s.models.some((m) => m.model_id === "acme/pulled") &&
          !s.nodeHealth.some((h) => h.code === "store_model_missing");
        return gone ? true : undefined;
      },
      { timeoutMs: 30_000, what: "acme/pulled out of the registry, warning cleared" },
    );
  }, 180_000);
});
