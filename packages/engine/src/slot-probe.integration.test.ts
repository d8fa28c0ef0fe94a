// The slot-restore probe against the real engine build: a slot saved on one llama-server, restored
// into another's and reused there (its own cache_n), cached per binary; and the pure verdict.
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { locateEngine } from "./locate.ts";
import { probeSlotRestore, verdict } from "./slot-probe.ts";

describe("probeSlotRestore", () => {
  it("this build restores a saved slot into another server and reuses it, answering the same; the verdict is cached", async () => {
    const engine = await locateEngine();
    const cacheDir = mkdtempSync(join(tmpdir(), "eng-cache-"));
    const t0 = Date.now();
    const r = await probeSlotRestore(engine.server_bin, { cacheDir });
    const probeMs = Date.now() - t0;
    expect(r.evidence).toMatch(
      /^saved (\d+) tokens, restored \1, the same prompt then reused \d+ of \d+, same answer$/,
    );
    expect(r.supported).toBe(true);
    const t1 = Date.now();
    expect(await probeSlotRestore(engine.server_bin, { cacheDir })).toEqual(r);
    expect(Date.now() - t1).toBeLessThan(probeMs);
  });

  it("an engine that cannot be probed moves no cache, and says why", async () => {
    const dir = mkdtempSync(join(tmpdir(), "eng-"));
    const fake = join(dir, "llama-server");
    writeFileSync(fake, "#!/bin/sh\necho '0.00.001 E main: broken build' >&2\nexit 1\n");
    chmodSync(fake, 0o755);
    expect(await probeSlotRestore(fake, { timeoutMs: 10_000 })).toEqual({
      supported: false,
      evidence: "probe failed: llama-server did not serve: main: broken build",
    });
    expect(await probeSlotRestore(null)).toEqual({ supported: false, evidence: "no llama-server" });
  });
});

describe("verdict", () => {
  const first = { text: "abc", promptTokens: 300, cached: 0 };
  it.each([
    [
      "reused and the same",
      { text: "abc", promptTokens: 300, cached: 296 },
      304,
      true,
      /same answer$/,
    ],
    [
      "nothing restored",
      { text: "abc", promptTokens: 300, cached: 0 },
      0,
      false,
      /nothing restored$/,
    ],
    [
      "restored, not reused",
      { text: "abc", promptTokens: 300, cached: 0 },
      304,
      false,
      /was not reused$/,
    ],
    [
      "reused, another answer",
      { text: "xyz", promptTokens: 300, cached: 296 },
      304,
      false,
      /answered "xyz" where the saving server answered "abc"$/,
    ],
  ])("%s", (_name, second, restored, supported, evidence) => {
    const v = verdict(first, second, { saved: restored, restored });
    expect(v.supported).toBe(supported);
    expect(v.evidence).toMatch(evidence);
  });
});
