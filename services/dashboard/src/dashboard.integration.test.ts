// The dashboard in headless Chromium against a real 2-node cluster on two hosts (network namespaces,
// bearer tokens, the store on node-1, the page served by node-2 to a browser on a third host): the
// token prompt, the live state, placement previews with a refusal and a placement from the page,
// the model ready, a runner log, the event log, a staging setting edited in the page (the YAML file
// keeps its comments and the node applies it), a purge that empties node-2's staging, and no console
// or CSP errors throughout.
// Screenshots go to test-results/dashboard/ (gitignored).
import { appendFileSync, mkdtempSync, readFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import {
  DelayRelay,
  launchChromium,
  patchConfig,
  REPO_ROOT,
  seedStore,
  startHostCluster,
  startHubEmulator,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster, NodeProcess, TestBrowser } from "@ic/testkit";

const SHOTS = join(REPO_ROOT, "test-results", "dashboard");
/** A model whose header reads fine and whose weights llama.cpp refuses: it fails on every node. */
const BROKEN = "test/broken-llama";

interface Storage {
  staged_models: { model_id: string; in_use: boolean }[];
  staging: { staging_keep_recent_bytes: number };
}

describe("dashboard in headless Chromium on a 2-host cluster", () => {
  let cluster: HostCluster;
  let hub: Awaited<ReturnType<typeof startHubEmulator>>;
  let hubRelay: DelayRelay;
  let n2: NodeProcess;
  let modelId: string;
  let browser: TestBrowser;
  let page: Page;

  // From the top: a full-page capture paints the sticky header where the page was scrolled to.
  const shot = async (name: string) => {
    await page.evaluate("window.scrollTo(0, 0)");
    await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  };
  const text = (selector: string) => page.locator(selector).innerText();
  const api = async <T>(path: string): Promise<T> =>
    (await (await fetch(`${n2.apiUrl}${path}`, { headers: n2.authHeaders })).json()) as T;

  beforeAll(async () => {
    await mkdir(SHOTS, { recursive: true });
    const seeded = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    modelId = seeded.modelId;
    await seedStore(seeded.store, { modelId: BROKEN, unloadable: true });
    cluster = await startHostCluster(2, {
      // node-1 declares a CUDA backend it does not have: a nodeHealth warning for the page to show.
      // The model that cannot load is given up after its restarts: short backoffs between them.
      config: (i) => ({
        engine: { restart_backoff_ms: 20 },
        ...(i === 0 ? { store_path: seeded.store, node: { backend: "cuda" } } : {}),
      }),
      startOnly: [],
      // The operator's browser on a machine of its own: the other files' labs come and go in the
      // root namespace, and Chromium drops its requests when an interface it sees changes.
      clientHosts: ["operator"],
    });
    n2 = cluster.nodes[1]!;
    // The hub emulator (on this host's loopback), reached by the store host through a relay on the
    // lab's root address: a model to pull from the page.
    hub = await startHubEmulator();
    await hub.addRepo("acme/pulled", {
      "tiny-llama.gguf": { fromPath: join(seeded.store, "test--tiny-llama", "tiny-llama.gguf") },
    });
    hubRelay = await DelayRelay.start({
      listenHost: cluster.lab.rootAddress,
      targetHost: "127.0.0.1",
      targetPort: Number(new URL(hub.url).port),
      delayMs: 0,
    });
    patchConfig(cluster.nodes[0]!, { model_store: { hub_url: `http://${hubRelay.address}` } });
    // An operator's comment in node-2's file: the settings editor must keep it.
    appendFileSync(n2.configPath, "# operator note: keep this comment\n");
    await Promise.all(cluster.nodes.map((n) => n.start()));
    await waitForConvergence(cluster.nodes, 2);
    // Refusals the page shows in its panels (the first requests without a token, the invalid
    // setting) are logged by Chromium as failed loads: not page errors. CSP violations are.
    // The nodes serve HTTPS with certificates of the cluster's CA: the browser accepts exactly those.
    browser = await launchChromium({
      viewport: { width: 1400, height: 1000 },
      ignoreConsole: /Failed to load resource: .* status of 4\d\d/,
      trustCertFiles: ["node-1", "node-2"].map((n) => cluster.certs!.tlsConfig(n).cert_file),
      wrap: cluster.lab.wrap("operator"),
    });
    page = browser.page;
    page.on("dialog", (d) => void d.accept());
    await page.goto(`${n2.apiUrl}/`);
  });

  afterAll(async () => {
    await browser?.close();
    await cluster?.[Symbol.asyncDispose]();
    await hubRelay?.close();
    await hub?.[Symbol.asyncDispose]();
  });

  it("asks for the token, then shows the live cluster", async () => {
    await expect.poll(() => page.locator("#token-dialog").getAttribute("open")).not.toBeNull();
    await shot("01-token");
    await page.fill("#token-input", cluster.adminToken);
    await page.click("#token-save");
    await expect.poll(() => text("#live")).toBe("live");
    await expect.poll(() => text("#nodes-table")).toContain("node-1");
    expect(await text("#nodes-table")).toContain("node-2");
    expect(await text("#nodes-table")).toContain("master");
    // Links between the two hosts, with a round trip in ms.
    await expect.poll(() => text("#links-table")).toMatch(/\d+\.\d\d/);
    await expect.poll(() => text("#health-list")).toContain("backend_override_conflict");
    expect(await text("#health-list")).toMatch(/warn\s+node-1[\s\S]*fix: set node.backend to auto/);
    await expect.poll(() => text("#models-table")).toContain(modelId);
    await expect.poll(() => text("#storage-table")).toContain("node-1");
    expect(await page.content()).not.toContain(cluster.adminToken);
    await shot("02-live");
  });

  it("previews placements with the typed refusal, and places the model on node-2 from the page", async () => {
    await page.selectOption("#place-model", modelId);
    await page.selectOption("#place-exclude", { label: "node-1" });
    await page.click("#preview-button");
    // Two nodes with one excluded: the 2-node previews are refused with a typed reason.
    await expect.poll(() => text("#previews-table")).toContain("all_excluded");
    // Each node's memory as placement counts it.
    expect(await text("#preview-nodes")).toMatch(/node-2\s+[\d.]+ GiB of [\d.]+ GiB/);
    await shot("03-previews");
    await page.click('#previews-table button[data-preview="Pipeline-1"]');
    await expect.poll(() => text("#previews-table")).toMatch(/placed i-/);
    await expect
      .poll(() => text("#instances-table"), { timeout: 60_000 })
      .toMatch(/rank 0 on node-2[^\n]*Ready/);
    await expect.poll(() => text("#models-table")).toContain("ready");
    await expect.poll(() => text("#deployments-table")).toContain("placed");
    await shot("04-ready");
  });

  it("the charts move under load, the playground streams an answer, and the page fits a phone", async () => {
    // Load through node-2's gateway (the node serving the page): the charts' requests and tokens.
    const sent = Array.from({ length: 6 }, () =>
      n2.post("/v1/chat/completions", {
        model: modelId,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 8,
      }),
    );
    expect((await Promise.all(sent)).map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const max = async (id: string) => Number(await page.locator(id).getAttribute("data-max"));
    await expect.poll(() => max("#chart-requests"), { timeout: 20_000 }).toBeGreaterThan(0);
    await expect.poll(() => max("#chart-tokens"), { timeout: 20_000 }).toBeGreaterThan(0);
    await expect.poll(() => max("#chart-ttft"), { timeout: 20_000 }).toBeGreaterThan(0);
    expect(await max("#chart-memory")).toBeGreaterThan(0);
    expect(await text("#chart-memory")).toContain("node-1");
    expect(await text("#chart-memory")).toContain("node-2");
    await page.locator("#chart-requests svg polyline").first().waitFor();

    // The playground: the model offered, an answer streamed chunk by chunk, a snippet to call it.
    await expect
      .poll(() => page.locator("#play-model option").allInnerTexts(), { timeout: 15_000 })
      .toContain(modelId);
    await page.selectOption("#play-model", modelId);
    await page.click("#play-send");
    await expect.poll(() => text("#play-meta"), { timeout: 30_000 }).toMatch(/chunk\(s\) in/);
    expect((await text("#play-output")).length).toBeGreaterThan(0);
    expect(await text("#play-error")).toBe("");
    expect(await text("#snippet-curl")).toContain(`${n2.apiUrl}/v1/chat/completions`);
    expect(await text("#snippet-curl")).toContain(`"model":"${modelId}"`);
    expect(await text("#snippet-python")).toContain(`base_url="${n2.apiUrl}/v1"`);
    expect(await page.content()).not.toContain(cluster.adminToken);
    await shot("04b-charts-playground");

    // A phone's width: one column, nothing wider than the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    await expect
      .poll(() => page.evaluate("document.documentElement.scrollWidth"))
      .toBeLessThanOrEqual(390);
    await shot("04c-phone");
    await page.setViewportSize({ width: 1400, height: 1000 });
    // The icon is served (the tab shows it), public like the page.
    const icon = await fetch(`${n2.apiUrl}/favicon.ico`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get("content-type")).toBe("image/svg+xml");
  });

  it("pulls a model from the hub with its progress, then removes it from the store", async () => {
    // An unknown quantization is refused with the ones the repo has.
    await page.fill("#pull-model", "acme/pulled:Q5_K_S");
    await page.click("#pull-button");
    await expect
      .poll(() => text("#pull-error"))
      .toContain("no quantization Q5_K_S in the repo; available: tiny-llama");
    await page.fill("#pull-model", "acme/pulled");
    await page.click("#pull-button");
    await expect.poll(() => text("#pull-error")).toBe("");
    await expect
      .poll(() => text("#pulls-table"), { timeout: 30_000 })
      .toMatch(/acme\/pulled[\s\S]*main · tiny-llama\.gguf[\s\S]*done[\s\S]*100%[\s\S]*1 \/ 1/);
    // Registered with no restart: placeable.
    await expect.poll(() => text("#models-table"), { timeout: 15_000 }).toContain("acme/pulled");
    await expect
      .poll(() => page.locator("#place-model option").allInnerTexts())
      .toContain("acme/pulled");
    await shot("05-pulled");
    // A finished pull can be dismissed from the list. The list comes from the store host's
    // heartbeat through the state stream: it goes with the next heartbeat (later on a busy machine).
    await page.locator("#pulls-table button", { hasText: "dismiss" }).click();
    await expect.poll(() => text("#pulls-table"), { timeout: 15_000 }).toContain("no pulls");
    await page.locator("#models-table tr", { hasText: "acme/pulled" }).locator("button").click();
    await expect
      .poll(() => text("#models-table"), { timeout: 15_000 })
      .not.toContain("acme/pulled");
  });

  it("turns tracing on, and shows a chat request's trace with its stats", async () => {
    await page.check("#tracing-enabled");
    await expect
      .poll(async () => (await api<{ enabled: boolean }>("/v1/tracing")).enabled)
      .toBe(true);
    const chat = await n2.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
    });
    expect(chat.status).toBe(200);
    await expect
      .poll(async () => {
        await page.click("#traces-refresh");
        return text("#traces-table");
      })
      .toContain(modelId);
    await page.click("#traces-table button");
    await expect.poll(() => text("#trace-stats")).toContain("time to first token");
    expect(await text("#trace-stats")).toMatch(/completion tokens\s+[1-4]/);
  });

  it("shows the runner's log and the event log", async () => {
    await page.click("#log-button");
    await expect.poll(() => text("#log-meta")).toContain("node-2");
    expect((await text("#log-text")).length).toBeGreaterThan(100);
    await expect.poll(() => text("#events-table"), { timeout: 10_000 }).toContain("InstancePlaced");
    // Filtered by kind and text; a row opens to the whole event.
    await page.selectOption("#events-kind", "instance");
    await expect
      .poll(async () => (await page.locator("#events-table tbody tr").allInnerTexts()).join("\n"))
      .not.toMatch(/RunnerStatus|NodeJoined/);
    expect(await page.locator("#events-table .badge.kind-instance").count()).toBeGreaterThan(0);
    await page.locator("#events-table details summary").first().click();
    expect(await page.locator("#events-table details[open] pre").first().innerText()).toContain(
      '"instance_id"',
    );
    await page.fill("#events-filter", "no-such-thing-anywhere");
    await expect.poll(() => text("#events-table")).toContain("no events");
    await page.fill("#events-filter", "");
    await page.selectOption("#events-kind", "");
    await page.click("#storage-refresh");
    await expect.poll(() => text("#storage-table")).toContain("in use");
    await shot("06-logs");
  });

  it("edits a staging setting: the YAML file changes with its comments kept, and node-2 applies it", async () => {
    await expect.poll(() => page.inputValue("#set-base-staging_keep_recent_gb")).toBe("40");
    await page.fill("#set-base-staging_keep_recent_gb", "-3");
    await page.click("#settings-save");
    await expect.poll(() => text("#settings-error")).toContain("staging_keep_recent_gb");
    // The refused value never reached the file (the parsed value, not the text: a temp path may
    // hold "-3" by chance).
    expect(
      (
        parseYaml(readFileSync(n2.configPath, "utf8")) as {
          model_store?: { staging?: { staging_keep_recent_gb?: number } };
        }
      ).model_store?.staging?.staging_keep_recent_gb,
    ).not.toBe(-3);
    await page.fill("#set-base-staging_keep_recent_gb", "0.5");
    await page.click("#settings-save");
    await expect.poll(() => text("#settings-message")).toContain("applied");
    const file = readFileSync(n2.configPath, "utf8");
    expect(file).toContain("# operator note: keep this comment");
    expect(
      (parseYaml(file) as { model_store: { staging: Record<string, unknown> } }).model_store
        .staging,
    ).toMatchObject({ staging_keep_recent_gb: 0.5 });
    expect(await text("#applied-staging_keep_recent_gb")).toBe("0.5");
    const report = await api<Storage>("/store/storage");
    expect(report.staging.staging_keep_recent_bytes).toBe(0.5 * 1024 ** 3);
    // node-1 keeps its own file and settings.
    const other = (await (
      await fetch(`${cluster.nodes[0]!.apiUrl}/store/storage`, {
        headers: cluster.nodes[0]!.authHeaders,
      })
    ).json()) as Storage;
    expect(other.staging.staging_keep_recent_bytes).toBe(40 * 1024 ** 3);
    await shot("07-settings");
  });

  it("deletes the instance and purges: node-2's staging is emptied and the page shows it", async () => {
    await page.click("#instances-table button.danger");
    await expect
      .poll(() => text("#instances-table"), { timeout: 30_000 })
      .toContain("no instances");
    await page.click("#storage-refresh");
    await expect.poll(() => text("#storage-table")).toContain("idle");
    await shot("08-before-purge");
    await page.click("#purge-all");
    await expect.poll(() => text("#purge-result")).toMatch(/freed [1-9][\d.]* [KM]iB on 2 node/);
    await expect
      .poll(async () => (await api<Storage>("/store/storage")).staged_models.length)
      .toBe(0);
    await expect
      .poll(async () => await page.locator("#storage-table tr", { hasText: "node-2" }).innerText())
      .toContain("nothing staged");
    await shot("09-purged");
    expect(browser.errors).toEqual([]);
  });

  it("a model that cannot load shows red: failed deployment with each node's error line, runner error, node log", async () => {
    const placed = await n2.post("/place_instance", { model_id: BROKEN, min_nodes: 1 });
    expect(placed.status).toBe(200);
    const row = page.locator("#deployments-table tr", { hasText: BROKEN });
    // Failing on the first node (a runner with the engine's words), then given up on both.
    await expect
      .poll(() => row.locator(".badge.bad").allInnerTexts(), { timeout: 90_000 })
      .toEqual(["failed"]);
    expect(
      await page.locator("#models-table tr", { hasText: BROKEN }).locator(".badge.bad").innerText(),
    ).toBe("failed");
    const why = await row.innerText();
    expect(why).toContain("given up");
    for (const node of ["node-1", "node-2"])
      expect(why).toMatch(new RegExp(`${node} \\([^)]*\\): .*token_embd\\.weight`));
    // The node log at warn and above: the runner's failure, one line, its model and error named.
    await page.selectOption("#node-log-level", "warn");
    await expect
      .poll(
        async () => {
          await page.click("#node-log-button");
          return text("#node-log-text");
        },
        { timeout: 10_000 },
      )
      .toMatch(new RegExp(`(WARN|ERROR) .*model=${BROKEN}.*error=.*token_embd\\.weight`));
    expect(await text("#node-log-text")).not.toMatch(/INFO/);
    await shot("10-failed");
    expect(browser.errors).toEqual([]);
  });

  it("the state stream frees its slot when a client leaves (more than the 64-stream cap, one after another)", async () => {
    for (let i = 0; i < 70; i++) {
      const abort = new AbortController();
      const r = await fetch(`${n2.apiUrl}/state/stream?links=0`, {
        headers: n2.authHeaders,
        signal: abort.signal,
      });
      expect(r.status).toBe(200);
      const reader = r.body!.getReader();
      const first = new TextDecoder().decode((await reader.read()).value);
      expect(first).toMatch(/^event: state\ndata: \{/);
      abort.abort();
      await reader.cancel().catch(() => undefined);
    }
  });
});
