import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { locateEngine, managedBuild } from "./locate.ts";

describe("locateEngine", () => {
  it("finds the managed build and reports it usable", async () => {
    expect(managedBuild()).not.toBeNull();
    const e = await locateEngine();
    expect(e.usable).toBe(true);
    expect(e.overridden).toBe(false);
    expect(e.server_bin).toMatch(/llama-server$/);
    expect(e.rpc_bin).toMatch(/ggml-rpc-server$/);
  });
  it("reports a missing override as unusable instead of falling back", async () => {
    const e = await locateEngine({ serverBinOverride: "/definitely/not/here" });
    expect(e).toMatchObject({
      usable: false,
      overridden: true,
      server_bin: "/definitely/not/here",
    });
  });
  it("reports an override that fails to run as unusable", async () => {
    const dir = mkdtempSync(join(tmpdir(), "eng-"));
    const bad = join(dir, "llama-server");
    writeFileSync(bad, "#!/bin/sh\necho broken >&2\nexit 3\n");
    chmodSync(bad, 0o755);
    const e = await locateEngine({ serverBinOverride: bad });
    expect(e.usable).toBe(false);
    expect(e.problem).toContain("exit 3");
  });
  it("probes a working override for its backend", async () => {
    const real = managedBuild()!.binaries["llama-server"];
    const e = await locateEngine({ serverBinOverride: real });
    expect(e).toMatchObject({ usable: true, overridden: true, backend: "cpu" });
  });
});
