// The capability probe against the real engine build: what llama.cpp of this build can split across
// rpc devices, in its own words, cached per binary.
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { locateEngine } from "./locate.ts";
import { probeSplitSupport, probeTls } from "./capabilities.ts";
import { lastError } from "./loopback-server.ts";

describe("probeSplitSupport", () => {
  it("this build: -sm row cannot split over rpc (its own error line), -sm tensor can and answers as a layer split does; the answer is cached", async () => {
    const engine = await locateEngine();
    const cacheDir = mkdtempSync(join(tmpdir(), "eng-cache-"));
    const t0 = Date.now();
    const r = await probeSplitSupport(engine, { cacheDir });
    const probeMs = Date.now() - t0;
    expect(r.row_over_rpc).toBe(false);
    expect(r.evidence).toMatch(/row: .*device RPC0 does not support split buffers/);
    expect(r.tensor_over_rpc).toBe(true);
    expect(r.evidence).toMatch(/tensor: served over two rpc devices, same answer as a layer split/);
    const t1 = Date.now();
    expect(await probeSplitSupport(engine, { cacheDir })).toEqual(r);
    expect(Date.now() - t1).toBeLessThan(probeMs);
  });

  it("an engine that cannot be probed supports nothing, and says why", async () => {
    const dir = mkdtempSync(join(tmpdir(), "eng-"));
    const fake = join(dir, "llama-server");
    writeFileSync(
      fake,
      "#!/bin/sh\necho '0.00.001 E llama_model_load: broken build' >&2\nexit 1\n",
    );
    chmodSync(fake, 0o755);
    const engine = await locateEngine();
    const r = await probeSplitSupport({ ...engine, server_bin: fake }, { timeoutMs: 10_000 });
    expect(r).toMatchObject({ row_over_rpc: false, tensor_over_rpc: false });
    expect(r.evidence).toMatch(/layer split over rpc failed: llama_model_load: broken build/);
    expect(await probeSplitSupport({ ...engine, usable: false })).toMatchObject({
      row_over_rpc: false,
      tensor_over_rpc: false,
      evidence: "the engine is not usable, or has no ggml-rpc-server",
    });
  });
});

describe("probeTls", () => {
  const certs = mkdtempSync(join(tmpdir(), "eng-tls-"));
  execFileSync(process.execPath, [
    join(import.meta.dirname, "../../../scripts/make-secrets.mjs"),
    certs,
    "--node",
    "n1=127.0.0.1",
    "--node",
    "n2=127.0.0.1",
  ]);
  const files = { certFile: join(certs, "n1.crt"), keyFile: join(certs, "n1.key") };

  it("this build serves HTTPS with a node's certificate, and refuses a key that is not the certificate's", async () => {
    const engine = await locateEngine();
    expect(await probeTls(engine.server_bin!, files)).toEqual({
      supported: true,
      evidence: "llama-server took the certificate and key",
    });
    const wrong = await probeTls(engine.server_bin!, { ...files, keyFile: join(certs, "n2.key") });
    expect(wrong.supported).toBe(false);
  });

  it("an engine built without OpenSSL says so in its own words", async () => {
    const fake = join(certs, "llama-server");
    writeFileSync(
      fake,
      "#!/bin/sh\necho '0.00.009 E srv  init_listene: the server is built without SSL support' >&2\nexit 1\n",
    );
    chmodSync(fake, 0o755);
    expect(await probeTls(fake, files)).toEqual({
      supported: false,
      evidence: "llama-server is built without SSL support",
    });
    expect((await probeTls(undefined, files)).supported).toBe(false);
  });
});

describe("lastError", () => {
  it.each([
    [
      "0.00.051.185 E llama_model_load: error loading model: device RPC0 does not support split buffers\n0.00.053.344 E srv  llama_server: exiting due to model loading error\n",
      "llama_model_load: error loading model: device RPC0 does not support split buffers",
    ],
    [
      "0.00.01 I loading\n0.00.04 E llama_model_load: error loading model: missing tensor 'token_embd.weight'\n0.00.05 E llama_model_load_from_file_impl: failed to load model\n0.00.06 E common_init_from_params: failed to load model '/m.gguf'\n",
      "llama_model_load: error loading model: missing tensor 'token_embd.weight'",
    ],
    ["plain line\n", "plain line"],
    ["", "no output"],
  ])("%j -> %j", (out, want) => {
    expect(lastError(out)).toBe(want);
  });
});
