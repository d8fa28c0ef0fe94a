// What the engine build can do, asked of the engine itself rather than believed: whether llama-server
// splits tensors across ggml-rpc devices (other nodes), in its `row` and its `tensor` split modes.
// The probe starts two ggml-rpc-servers on loopback and llama-server over them with a tiny generated
// model, once per split mode, with the command lines a node's runner would start for a three-rank
// instance (SplitCommands, given by the node); a mode counts only when the server comes up and
// answers exactly what the same engine answers with a Pipeline (layer) split (greedy decoding).
// Results are cached per engine binary (path, size, mtime) and command line under the engine cache,
// so a build is probed once per machine and again when the node's engine flags change.
import { createHash } from "node:crypto";
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

/** A split the probe runs: `layer` is a Pipeline (the reference), `row` and `tensor` a Tensor split. */
export type SplitMode = "layer" | "row" | "tensor";

/** The probe's model, as a command line needs it. */
export interface ProbeModel {
  readonly path: string;
  readonly layers: number;
  readonly contextLength: number;
}

/**
 * The command lines the split probe runs: rank 0's llama-server for an instance whose other ranks are
 * the ggml-rpc-servers at `rpc` (host:port, rank order), listening on 127.0.0.1:`port`, and a rank's
 * ggml-rpc-server. A node passes its runner's own (services/worker args.ts), so the probe exercises
 * the flags, context, slots and devices a placement would start; without them, PLAIN_COMMANDS.
 */
export interface SplitCommands {
  server(model: ProbeModel, mode: SplitMode, rpc: readonly string[], port: number): string[];
  rpc(port: number): string[];
}

/** The engine's own defaults around a split: what the probe runs when no node says otherwise. */
const PLAIN_COMMANDS: SplitCommands = {
  server: (model, mode, rpc, port) => {
    const a = ["-m", model.path, "--rpc", rpc.join(","), "-sm", mode, "-ngl", "99", "-fit", "off"];
    return [...a, "-c", "256", "-np", "1", "--host", "127.0.0.1", "--port", String(port)];
  },
  rpc: (port) => ["-H", "127.0.0.1", "-p", String(port)],
};

export interface ProbeOptions {
  /** Whole probe bound (default 60 s: a CUDA engine initializes its device for every process). */
  readonly timeoutMs?: number;
  /** Where the cache file lives (default: none, always probe). */
  readonly cacheDir?: string | undefined;
  /** The command lines to run (default: the engine's defaults around a split). */
  readonly commands?: SplitCommands | undefined;
}

const CACHE_FILE = "capabilities.json";
const CACHE_VERSION = 4;
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
  const commands = opts.commands ?? PLAIN_COMMANDS;
  const key = `${await binaryKey(engine.server_bin, engine.rpc_bin)}:${fingerprint(commands)}`;
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
    const { facts } = await writeTinyModel(model, {
      nEmbd: 256,
      nHead: 4,
      nHeadKv: 2,
      nFf: 512,
      weightType: "F16",
    });
    const probeModel = {
      path: model,
      layers: facts.blockCount ?? 4,
      contextLength: facts.contextLength ?? 2048,
    };
    const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
    const bins = { serverBin: engine.server_bin, rpcBin: engine.rpc_bin, commands };
    const run = (mode: SplitMode) => runOverRpc(bins, probeModel, mode, deadline);
    const reference = await run("layer");
    let result: SplitSupport;
    if (!reference.ok) {
      result = none(`the engine's plain layer split over rpc failed: ${reference.evidence}`);
    } else {
      const verdict = async (mode: SplitMode): Promise<ModeResult> => {
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

/** The engine's two programs the probe runs, llama-server and ggml-rpc-server, and their commands. */
interface EngineBins {
  serverBin: string;
  rpcBin: string;
  commands: SplitCommands;
}

/** One llama-server over two local rpc servers in `mode`: its greedy answer, or why there is none. */
async function runOverRpc(
  { serverBin, rpcBin, commands }: EngineBins,
  model: ProbeModel,
  mode: SplitMode,
  deadline: number,
): Promise<{ ok: true; text: string } | { ok: false; evidence: string }> {
  const children: Child[] = [];
  try {
    const rpcPorts = [await freePort(), await freePort()];
    for (const p of rpcPorts)
      children.push(spawnChild({ bin: rpcBin, args: commands.rpc(p), stderr: "ignore" }));
    await waitListening(rpcPorts, deadline);
    const rpc = rpcPorts.map((p) => `127.0.0.1:${p}`);
    const started = await startLoopbackServer(
      serverBin,
      (port) => commands.server(model, mode, rpc, port),
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

/** The command lines with placeholders: a change of the node's engine flags probes again. */
function fingerprint(c: SplitCommands): string {
  const model = { path: "MODEL", layers: 4, contextLength: 2048 };
  return createHash("sha256")
    .update(JSON.stringify([c.server(model, "tensor", ["R1", "R2"], 1), c.rpc(1)]))
    .digest("hex")
    .slice(0, 16);
}

async function binaryKey(serverBin: string, rpcBin: string): Promise<string> {
  const [a, b] = await Promise.all([stat(serverBin), stat(rpcBin)]);
  return `${CACHE_VERSION}:${serverBin}:${a.size}:${Math.round(a.mtimeMs)}:${rpcBin}:${b.size}:${Math.round(b.mtimeMs)}`;
}
