// What the engine build can do, asked of the engine itself rather than believed: whether llama-server
// splits tensors across ggml-rpc devices (other nodes), in its `row` and its `tensor` split modes.
// The probe starts two ggml-rpc-servers on loopback and llama-server over them with a tiny generated
// model, once per split mode; a mode counts only when the server comes up and answers exactly what
// the same engine answers with a plain layer split (greedy decoding). Results are cached per engine
// binary (path, size, mtime) under the engine cache, so a build is probed once per machine.
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTinyModel } from "@ic/gguf";
import { canConnect, freePort, spawnChild } from "@ic/process";
import type { Child } from "@ic/process";
import { sleep } from "@ic/protocol";
import type { EngineInfo, SplitSupport } from "@ic/protocol";
import { collectOutput, lastError, startLoopbackServer } from "./loopback-server.ts";
import { readProbeCache, writeProbeCache } from "./probe-cache.ts";

/** What a probe found for one split mode: supported, and the engine's own words either way. */
export interface ModeResult {
  readonly supported: boolean;
  readonly evidence: string;
}

export interface ProbeOptions {
  /** Whole probe bound (default 60 s: a CUDA engine initializes its device for every process). */
  readonly timeoutMs?: number;
  /** Where the cache file lives (default: none, always probe). */
  readonly cacheDir?: string | undefined;
}

const CACHE_FILE = "capabilities.json";
const CACHE_VERSION = 3;
const PROMPT = { messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 12 };

/**
 * The split modes the engine supports across nodes. Never throws: an engine that cannot be probed
 * (unusable, no rpc server, a probe that fails) supports nothing, with the reason as evidence.
 */
export async function probeSplitSupport(
  engine: Pick<EngineInfo, "server_bin" | "rpc_bin" | "usable">,
  opts: ProbeOptions = {},
): Promise<SplitSupport> {
  if (!engine.usable || !engine.server_bin || !engine.rpc_bin)
    return none("the engine is not usable, or has no ggml-rpc-server");
  const key = await binaryKey(engine.server_bin, engine.rpc_bin);
  const cached = opts.cacheDir
    ? await readProbeCache(opts.cacheDir, CACHE_FILE, key, isSplitSupport)
    : undefined;
  if (cached) return cached;
  const work = await mkdtemp(join(tmpdir(), "ic-engine-probe-"));
  try {
    const model = join(work, "probe.gguf");
    // Shaped like real models where it matters to the split: F16 weights, grouped-query attention,
    // heads of 64 dimensions (CUDA's flash attention, which -sm tensor requires, has no kernel for the
    // 16-dimension heads of the smallest tiny model: its rpc server aborts).
    await writeTinyModel(model, {
      nEmbd: 256,
      nHead: 4,
      nHeadKv: 2,
      nFf: 512,
      weightType: "F16",
    });
    const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
    const run = (mode: string) =>
      runOverRpc({ serverBin: engine.server_bin!, rpcBin: engine.rpc_bin! }, model, mode, deadline);
    const reference = await run("layer");
    let result: SplitSupport;
    if (!reference.ok) {
      result = none(`the engine's plain layer split over rpc failed: ${reference.evidence}`);
    } else {
      const verdict = async (mode: string): Promise<ModeResult> => {
        const r = await run(mode);
        if (!r.ok) return { supported: false, evidence: r.evidence };
        if (r.text !== reference.text)
          return {
            supported: false,
            evidence: `answered ${JSON.stringify(r.text)} where a layer split answers ${JSON.stringify(reference.text)}`,
          };
        return {
          supported: true,
          evidence: "served over two rpc devices, same answer as a layer split",
        };
      };
      const row = await verdict("row");
      const tensor = await verdict("tensor");
      result = {
        row_over_rpc: row.supported,
        tensor_over_rpc: tensor.supported,
        tensor_opt_in: false,
        evidence: `row: ${row.evidence}; tensor: ${tensor.evidence}`,
      };
    }
    if (opts.cacheDir) await writeProbeCache(opts.cacheDir, CACHE_FILE, key, result);
    return result;
  } catch (e) {
    return none(`probe failed: ${e instanceof Error ? e.message : String(e)}`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

function isSplitSupport(v: unknown): v is SplitSupport {
  const s = v as Partial<SplitSupport> | undefined;
  return typeof s?.row_over_rpc === "boolean" && typeof s.tensor_over_rpc === "boolean";
}

function none(evidence: string): SplitSupport {
  return { row_over_rpc: false, tensor_over_rpc: false, tensor_opt_in: false, evidence };
}

/** The engine's two programs the probe runs: llama-server and ggml-rpc-server. */
interface EngineBins {
  serverBin: string;
  rpcBin: string;
}

/** One llama-server over two local rpc servers in `mode`: its greedy answer, or why there is none. */
async function runOverRpc(
  { serverBin, rpcBin }: EngineBins,
  model: string,
  mode: string,
  deadline: number,
): Promise<{ ok: true; text: string } | { ok: false; evidence: string }> {
  const children: Child[] = [];
  try {
    const rpcPorts = [await freePort(), await freePort()];
    for (const p of rpcPorts)
      children.push(
        spawnChild({ bin: rpcBin, args: ["-H", "127.0.0.1", "-p", String(p)], stderr: "ignore" }),
      );
    await waitListening(rpcPorts, deadline);
    const started = await startLoopbackServer(
      serverBin,
      [
        "-m",
        model,
        "--rpc",
        rpcPorts.map((p) => `127.0.0.1:${p}`).join(","),
        "-sm",
        mode,
        "-ngl",
        "99",
        "-fit",
        "off",
        "-c",
        "256",
        "-np",
        "1",
      ],
      deadline,
    );
    children.push(started.child);
    if (!started.ok) return { ok: false, evidence: started.evidence };
    const { base } = started;
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...PROMPT, temperature: 0 }),
      signal: AbortSignal.timeout(Math.max(1000, deadline - Date.now())),
    });
    const body = (await r.json()) as { choices?: { message?: { content?: string } }[] };
    const text = body.choices?.[0]?.message?.content;
    if (r.status !== 200 || typeof text !== "string")
      return {
        ok: false,
        evidence: `answered ${r.status}: ${JSON.stringify(body).slice(0, 200)}`,
      };
    return { ok: true, text };
  } finally {
    await Promise.all(children.map((c) => c.stop(2000)));
  }
}

/**
 * Whether llama-server serves HTTPS with this certificate and key, asked of the engine: it is started
 * with them and a model path that does not exist. Its HTTP listener (TLS context included) starts
 * before the model loads, so an engine built without OpenSSL, or one that rejects the files, fails
 * first with its own words; one that gets as far as the missing model serves TLS. Never throws.
 */
export async function probeTls(
  serverBin: string | undefined,
  files: { readonly certFile: string; readonly keyFile: string },
  timeoutMs = 20_000,
): Promise<ModeResult> {
  if (!serverBin) return { supported: false, evidence: "no llama-server" };
  const work = await mkdtemp(join(tmpdir(), "ic-engine-tls-"));
  try {
    const child = spawnChild({
      bin: serverBin,
      args: ["--ssl-key-file", files.keyFile, "--ssl-cert-file", files.certFile].concat([
        "-m",
        join(work, "absent.gguf"),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
      ]),
      stdout: "pipe",
      stderr: "pipe",
    });
    const output = collectOutput(child);
    const timer = setTimeout(() => void child.stop(1000), timeoutMs);
    await child.exited;
    clearTimeout(timer);
    const text = output();
    if (/built without SSL support/.test(text))
      return { supported: false, evidence: "llama-server is built without SSL support" };
    if (/failed to initialize HTTP server/.test(text))
      return { supported: false, evidence: lastError(text) };
    if (/absent\.gguf|load(ing)? model/i.test(text))
      return { supported: true, evidence: "llama-server took the certificate and key" };
    return { supported: false, evidence: `unexpected output: ${lastError(text)}` };
  } catch (e) {
    return {
      supported: false,
      evidence: `probe failed: ${e instanceof Error ? e.message : String(e)}`,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function waitListening(ports: readonly number[], deadline: number): Promise<void> {
  for (const port of ports) {
    while (!(await canConnect("127.0.0.1", port))) {
      if (Date.now() > deadline) throw new Error(`ggml-rpc-server on ${port} did not listen`);
      await sleep(50);
    }
  }
}

async function binaryKey(serverBin: string, rpcBin: string): Promise<string> {
  const [a, b] = await Promise.all([stat(serverBin), stat(rpcBin)]);
  return `${CACHE_VERSION}:${serverBin}:${a.size}:${Math.round(a.mtimeMs)}:${rpcBin}:${b.size}:${Math.round(b.mtimeMs)}`;
}
