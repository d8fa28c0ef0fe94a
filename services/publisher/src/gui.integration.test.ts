// The GUI in headless Chromium against a real publisher and the hub emulator: token setup, detect,
// publish with a live log and progress bar (including a reload that resumes the stream), register
// and catalog lookup. Screenshots go to test-results/publisher/ (gitignored).
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchChromium, REPO_ROOT } from "@ic/testkit";
import type { TestBrowser } from "@ic/testkit";
import { REPOS, startHubFixture, startTestServer, TEST_TOKEN } from "./testing.ts";
import type { HubFixture, TestServer } from "./testing.ts";

const SHOTS = join(REPO_ROOT, "test-results", "publisher");

describe("publisher GUI in headless Chromium", () => {
  let fx: HubFixture;
  let s: TestServer;
  let browser: TestBrowser;
  let page: Page;

  const shot = (name: string): Promise<Buffer> =>
    page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });

  beforeAll(async () => {
    await mkdir(SHOTS, { recursive: true });
    fx = await startHubFixture();
    s = await startTestServer(fx.hub.url);
    browser = await launchChromium();
    page = browser.page;
    await page.goto(s.url);
  });

  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    await fx?.stop();
  });

  it("saves a token and shows it masked", async () => {
    await expect.poll(() => page.textContent("#token-badge")).toBe("no token");
    expect(await page.isDisabled("#publish-button")).toBe(true);
    await shot("01-no-token");
    await page.fill("#token-input", TEST_TOKEN);
    await page.click("#token-save");
    await expect.poll(() => page.textContent("#token-badge")).toBe("token set");
    expect(await page.textContent("#token-masked")).toBe("hf_t…cdef");
    expect(await page.inputValue("#token-input")).toBe("");
    expect(await page.content()).not.toContain(TEST_TOKEN);
    await shot("02-token-set");
  });

  it("shows an error from the API envelope", async () => {
    await page.fill("#detect-url", "");
    await page.click("#detect-button");
    await expect.poll(() => page.textContent("#detect-error")).toBe("url must not be empty");
  });

  it("detects a q4k model and fills the publish form", async () => {
    await page.fill("#detect-url", `https://huggingface.co/${REPOS.q4k}`);
    await page.click("#detect-button");
    await expect
      .poll(() => page.textContent("#r-mtp_key_count"))
      .toBe(String(fx.base.mtpKeys.length));
    expect(await page.textContent("#r-base_model")).toBe(REPOS.base);
    expect(await page.textContent("#r-quant")).toBe("q4k");
    expect(await page.textContent("#r-can_publish")).toBe("yes");
    expect(await page.locator("#r-mtp_keys li").count()).toBe(fx.base.mtpKeys.length);
    expect(await page.inputValue("#publish-base")).toBe(REPOS.base);
    expect(await page.inputValue("#publish-sidecar")).toBe("quant-org/Tiny-MTP-MTP");
    expect(await page.isDisabled("#publish-button")).toBe(false);
    await shot("03-detected");
  });

  it("clears the publish form when the next detected model cannot be published", async () => {
    await page.fill("#detect-url", REPOS.gemmaQ4k);
    await page.click("#detect-button");
    await expect.poll(() => page.textContent("#r-model_id")).toBe(REPOS.gemmaQ4k);
    expect(await page.textContent("#r-can_publish")).toBe("no");
    expect(await page.inputValue("#publish-base")).toBe("");
    expect(await page.inputValue("#publish-sidecar")).toBe("");
    expect(await page.isDisabled("#publish-button")).toBe(true);
    await shot("03b-detected-unpublishable");
    // A failed detection does not leave the previous model in the form either.
    await page.fill("#detect-url", `https://huggingface.co/${REPOS.q4k}`);
    await page.click("#detect-button");
    await expect.poll(() => page.inputValue("#publish-base")).toBe(REPOS.base);
    await page.fill("#detect-url", "nobody/nothing");
    await page.click("#detect-button");
    await expect.poll(() => page.textContent("#detect-error")).toMatch(/nobody\/nothing/);
    expect(await page.inputValue("#publish-base")).toBe("");
    expect(await page.isDisabled("#publish-button")).toBe(true);
    // Detecting the q4k model again fills the form for the publish test.
    await page.fill("#detect-url", `https://huggingface.co/${REPOS.q4k}`);
    await page.click("#detect-button");
    await expect.poll(() => page.inputValue("#publish-base")).toBe(REPOS.base);
    expect(await page.inputValue("#publish-sidecar")).toBe("quant-org/Tiny-MTP-MTP");
  });

  it("publishes with a live log and progress bar, and resumes the stream after a reload", async () => {
    const hold = fx.hub.hold(
      (r) => r.method === "GET" && /model-\d+-of-\d+\.safetensors$/.test(r.path),
    );
    try {
      await page.click("#publish-button");
      await expect
        .poll(() => page.textContent("#publish-log"))
        .toContain(`finding shards of ${REPOS.base}`);
      expect(await page.textContent("#job-state")).toMatch(/running/);
      await shot("04-publish-running");
      await page.reload();
      await expect
        .poll(() => page.textContent("#publish-log"))
        .toContain(`finding shards of ${REPOS.base}`);
      hold.release();
      await expect
        .poll(() => page.textContent("#job-state"), { timeout: 20_000 })
        .toBe("succeeded");
      const log = (await page.textContent("#publish-log")) ?? "";
      expect(log.split("\n").filter((l) => l.startsWith("finding shards"))).toHaveLength(1);
      expect(log).toMatch(/streaming to disk: \d+\/\d+ bytes/);
      expect(log).toMatch(/uploading mtp\.safetensors: (\d+)\/\1 bytes \(100%\)/);
      expect(log.trimEnd().endsWith("publish complete")).toBe(true);
      expect(await page.getAttribute("#publish-progress", "value")).toBe("100");
      // The live property, not just the attribute.
      expect(
        await page.$eval("#publish-progress", (el) => (el as unknown as { value: number }).value),
      ).toBe(100);
      await shot("05-published");
    } finally {
      hold.release();
    }
    expect(fx.hub.listRepoFiles("quant-org/Tiny-MTP-MTP")).toEqual([
      "README.md",
      "mtp.safetensors",
    ]);
  });

  it("sends one publish request for a double click and disables the button while it is in flight", async () => {
    const posts: string[] = [];
    const onRequest = (r: { method(): string; url(): string }): void => {
      if (r.method() === "POST" && r.url().endsWith("/api/publish")) posts.push(r.url());
    };
    page.on("request", onRequest);
    let releasePost!: () => void;
    const gate = new Promise<void>((r) => (releasePost = r));
    await page.route("**/api/publish", async (route) => {
      await gate;
      await route.continue().catch(() => undefined);
    });
    try {
      // The reload above emptied the form.
      await page.fill("#publish-base", REPOS.base);
      await page.fill("#publish-sidecar", "quant-org/Tiny-MTP-MTP");
      await page.dblclick("#publish-button");
      await expect.poll(() => page.isDisabled("#publish-button")).toBe(true);
      releasePost();
      await expect
        .poll(() => page.textContent("#job-state"), { timeout: 20_000 })
        .toBe("succeeded");
      expect(posts).toHaveLength(1);
      // Enabled again once the job's stream has ended.
      await expect.poll(() => page.isDisabled("#publish-button")).toBe(false);
    } finally {
      releasePost();
      page.off("request", onRequest);
      await page.unroute("**/api/publish");
    }
  });

  it("registers an assistant pairing and shows the entry block; a second try shows the conflict", async () => {
    await page.fill("#register-url", REPOS.gemmaQ4k);
    await page.click("#register-button");
    await expect.poll(() => page.textContent("#register-key")).toBe("gemma-tiny-q4k");
    expect(await page.textContent("#register-path")).toBe(s.catalogPath);
    expect(await page.textContent("#register-block")).toContain(
      `assistant_model_repo: ${REPOS.gemmaAssistant}`,
    );
    await shot("06-registered");
    await page.click("#register-button");
    await expect
      .poll(() => page.textContent("#register-error"))
      .toMatch(/already has an entry with key "gemma-tiny-q4k"/);
  });

  it("looks up catalog entries by source model and reports a miss", async () => {
    await page.fill("#find-url", REPOS.gemmaBase);
    await page.click("#find-button");
    await expect.poll(() => page.locator("#find-rows tr").count()).toBe(1);
    expect(await page.textContent("#find-rows tr td")).toBe("gemma-tiny-q4k");
    await shot("07-catalog-found");
    await page.fill("#find-url", "nobody/nothing");
    await page.click("#find-button");
    await expect
      .poll(() => page.textContent("#find-error"))
      .toBe("No catalog entry for nobody/nothing.");
    expect(await page.isHidden("#find-result")).toBe(true);
    await shot("08-catalog-miss");
  });

  it("ran without script errors or CSP violations", () => {
    // The answers the steps above provoke: bad input, a catalog miss, a collision, and the spec's
    // 500 for a model the hub does not have (the console notes every non-2xx fetch).
    expect(
      browser.errors.filter(
        (e) => !/the server responded with a status of (400|404|409|500)/.test(e),
      ),
    ).toEqual([]);
  });
});
