// Models in, as a user brings them: from a `*-GGUF` repo on the hub, `ic pull org/repo:Q8_0` fetches
// only that quantization (and the metadata), `ic place --wait` waits until the engine serves it, and
// it answers; an unknown quantization is a 400 naming the available ones; pulling another
// quantization replaces the first; finished pulls can be dismissed. From disk, `ic import` sends a
// GGUF file or a folder to the store host, where it registers; an id already in the store is refused.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  startCluster,
  startHubEmulator,
  tinyGgufRepo,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import { ic } from "./test-support.ts";

interface StateDoc {
  models: { model_id: string; file: string }[];
}

describe("models in: ic pull org/repo:QUANT, ic import", () => {
  it("fetches one quantization and serves it, replaces it with another, imports from disk", async () => {
    const repo = await tinyGgufRepo(["F32", "F16", "Q8_0"]);
    await using hub = await startHubEmulator();
    await hub.addRepo("acme/tiny-GGUF", repo.files);
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    await using cluster = await startCluster(1, {
      config: () => ({
        store_path: store,
        model_store: { hub_url: hub.url, staging: { headroom_gb: 0 } },
      }),
    });
    await waitForConvergence(cluster.nodes, 1);
    const node = cluster.nodes[0]!;
    const env = { IC_URL: node.apiUrl };
    /** The files the hub sent bodies of, with their bytes. */
    const fetched = () =>
      new Map(
        hub.requests
          .filter((r) => r.method === "GET" && r.path.includes("/resolve/") && r.status < 300)
          .map((r) => {
            const path = decodeURIComponent(r.path.split("/resolve/")[1]!.split("?")[0]!)
              .split("/")
              .slice(1)
              .join("/");
            return [path, repo.bytes.get(path) ?? 0] as const;
          }),
      );

    // An unknown quantization: refused before anything is queued, naming the available ones.
    const bad = await ic(["pull", "acme/tiny-GGUF:Q5_K_S"], env);
    expect(bad.code).not.toBe(0);
    expect(bad.err).toContain("no quantization Q5_K_S in the repo; available: Q8_0, F16, F32");
    expect(bad.err).not.toMatch(/\n\s+at /);
    expect((await ic(["pull", "acme/tiny-GGUF:Q 8"], env)).err).toContain("quant");
    expect(fetched().size).toBe(0);

    // Q8_0, asked in lower case: only its GGUF and the metadata cross the wire.
    const pull = await ic(["pull", "acme/tiny-GGUF:q8_0"], env);
    expect(pull.code, pull.err).toBe(0);
    expect(pull.out).toContain(
      "pulled acme/tiny-GGUF:Q8_0: the engine loads tiny-llama-Q8_0.gguf (ic place acme/tiny-GGUF)",
    );
    const got = fetched();
    expect([...got.keys()].sort()).toEqual(["README.md", "config.json", "tiny-llama-Q8_0.gguf"]);
    const fetchedBytes = [...got.values()].reduce((a, b) => a + b, 0);
    const wholeRepo = [...repo.bytes.values()].reduce((a, b) => a + b, 0);
    expect(fetchedBytes).toBe(
      repo.bytes.get("tiny-llama-Q8_0.gguf")! +
        repo.bytes.get("README.md")! +
        repo.bytes.get("config.json")!,
    );
    expect(fetchedBytes).toBeLessThan(wholeRepo / 4);
    expect(readdirSync(join(store, "acme--tiny-GGUF")).filter((f) => !f.startsWith("."))).toEqual([
      "README.md",
      "config.json",
      "tiny-llama-Q8_0.gguf",
    ]);
    const pulls = await ic(["pulls"], env);
    expect(pulls.out).toMatch(/acme\/tiny-GGUF\s+Q8_0\s+done/);

    // The registry serves the chosen file, and the engine loads and answers with it.
    const registered = await waitFor(
      async () =>
        (await node.get<StateDoc>("/state")).models.find((m) => m.model_id === "acme/tiny-GGUF"),
      { timeoutMs: 15_000, what: "the pulled model registered" },
    );
    expect(registered.file).toBe("tiny-llama-Q8_0.gguf");
    const placed = await ic(["place", "acme/tiny-GGUF", "--wait"], env);
    expect(placed.code, placed.err).toBe(0);
    expect(placed.out).toMatch(/rank 0 RunnerReady\n(i-\S+) serves\n$/);
    const inst = { instance_id: /(i-\S+) serves/.exec(placed.out)![1]! };
    const chat = await node.post("/v1/chat/completions", {
      model: "acme/tiny-GGUF",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
    });
    expect(chat.status).toBe(200);
    const removed = await fetch(`${node.apiUrl}/instance/${inst.instance_id}`, {
      method: "DELETE",
      headers: node.authHeaders,
    });
    expect(removed.status).toBe(200);

    // Another quantization replaces the first: the store keeps one per model id.
    const f16 = await ic(["pull", "acme/tiny-GGUF:F16"], env);
    expect(f16.code, f16.err).toBe(0);
    expect(readdirSync(join(store, "acme--tiny-GGUF")).filter((f) => !f.startsWith("."))).toEqual([
      "README.md",
      "config.json",
      "tiny-llama-F16.gguf",
    ]);
    expect(fetched().has("tiny-llama-F32.gguf")).toBe(false);
    await waitFor(
      async () =>
        (await node.get<StateDoc>("/state")).models.find((m) => m.file === "tiny-llama-F16.gguf"),
      { timeoutMs: 15_000, what: "the registry serving the F16 file" },
    );

    // A model whose model.json names a drafter brings it along: pulled next, registered too.
    const q8path = (repo.files["tiny-llama-Q8_0.gguf"] as { fromPath: string }).fromPath;
    await hub.addRepo("acme/with-drafter", {
      "tiny-llama-Q8_0.gguf": { fromPath: q8path },
      "model.json": JSON.stringify({ drafter: "acme/its-drafter" }),
    });
    await hub.addRepo("acme/its-drafter", { "drafter.gguf": { fromPath: q8path } });
    const withDrafter = await ic(["pull", "acme/with-drafter"], env);
    expect(withDrafter.code, withDrafter.err).toBe(0);
    await waitFor(
      async () => {
        const s = await node.get<StateDoc>("/state");
        return s.models.some((m) => m.model_id === "acme/its-drafter") ? true : undefined;
      },
      { timeoutMs: 30_000, what: "the drafter pulled and registered along with its model" },
    );
    expect((await ic(["pulls"], env)).out).toMatch(/acme\/its-drafter\s+-\s+done/);

    // A finished pull can be dismissed from the list.
    const dismiss = await ic(["pulls", "--dismiss", "acme/tiny-GGUF"], env);
    expect(dismiss.code, dismiss.err).toBe(0);
    expect(dismiss.out).toBe("dismissed the done pull of acme/tiny-GGUF\n");
    for (const id of ["acme/with-drafter", "acme/its-drafter"])
      expect((await ic(["pulls", "--dismiss", id], env)).code).toBe(0);
    expect((await ic(["pulls"], env)).out).toBe("no pulls\n");

    // From disk: one file, then a folder; each registers and is placeable.
    const disk = mkdtempSync(join(tmpdir(), "ic-import-"));
    const q8 = (repo.files["tiny-llama-Q8_0.gguf"] as { fromPath: string }).fromPath;
    const one = await ic(["import", q8, "--as", "acme/imported"], env);
    expect(one.code, one.err).toBe(0);
    expect(one.out).toMatch(/sending tiny-llama-Q8_0\.gguf \(.+\) to node-1/);
    expect(one.out).toMatch(/imported acme\/imported \(1 file\(s\), .+\): ic place acme\/imported/);
    expect(readdirSync(join(store, "acme--imported"))).toContain("tiny-llama-Q8_0.gguf");
    const again = await ic(["import", q8, "--as", "acme/imported"], env);
    expect(again.code).not.toBe(0);
    expect(again.err).toContain("acme/imported is already in the store");
    mkdirSync(join(disk, "folder", "sub"), { recursive: true });
    copyFileSync(q8, join(disk, "folder", "model.gguf"));
    writeFileSync(join(disk, "folder", "sub", "notes.txt"), "hello");
    writeFileSync(join(disk, "folder", ".hidden"), "x");
    const dir = await ic(["import", join(disk, "folder"), "--as", "acme/folder", "--place"], env);
    expect(dir.code, dir.err).toBe(0);
    expect(dir.out).toMatch(/imported acme\/folder \(2 file\(s\), .+\) and placed i-/);
    expect(readdirSync(join(store, "acme--folder")).filter((f) => !f.startsWith("."))).toEqual([
      "model.gguf",
      "sub",
    ]);
    // Nothing is left in the upload area; a folder without a GGUF is refused before sending.
    expect(readdirSync(join(store, ".uploads"))).toEqual([]);
    mkdirSync(join(disk, "empty"));
    writeFileSync(join(disk, "empty", "README.md"), "no weights");
    const none = await ic(["import", join(disk, "empty"), "--as", "acme/none"], env);
    expect(none.code).toBe(2);
    expect(none.err).toContain("holds no .gguf file");
    expect((await ic(["import", q8], env)).err).toContain("--as org/name is required");

    // A GGUF dropped at the top of store_path is not silently ignored.
    writeFileSync(join(store, "loose.gguf"), "not a model folder");
    const loose = await waitFor(
      async () =>
        (
          await node.get<{ nodeHealth: { code: string; message: string; remediation: string }[] }>(
            "/state",
          )
        ).nodeHealth.find((h) => h.code === "store_loose_file"),
      { timeoutMs: 30_000, what: "store_loose_file in nodeHealth" },
    );
    expect(loose.message).toBe("loose.gguf in store_path is not served");
    expect(loose.remediation).toContain("local--loose/loose.gguf");
  }, 180_000);
});
