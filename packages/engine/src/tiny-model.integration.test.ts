// Proves the tiny GGUF models are real: the built llama-server loads them, answers OpenAI chat
// completions, and runs speculative decoding with the drafter (-md), reporting its acceptance statistics.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTinyModel } from "@ic/gguf";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { locateEngine } from "./index.ts";

const HEALTH_DEADLINE_MS = 60_000;
/** llama.cpp tools/server/server-context.cpp prints this at slot release when drafts were made. */
const DRAFT_STATS = /draft acceptance = (\d+\.\d+) \(\s*(\d+) accepted \/\s*(\d+) generated\)/;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() =>
        typeof addr === "object" && addr !== null
          ? resolve(addr.port)
          : reject(new Error("no port")),
      );
    });
  });
}

interface RunningServer extends AsyncDisposable {
  readonly url: string;
  readonly msToHealthy: number;
  log(): string;
}

function exited(child: ChildProcess): Promise<void> {
  return child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((resolve) => child.once("exit", () => resolve()));
}

/** Starts llama-server on a free loopback port and resolves once GET /health answers 200. */
async function startLlamaServer(bin: string, args: string[]): Promise<RunningServer> {
  const port = await freePort();
  const started = performance.now();
  const child = spawn(bin, ["--host", "127.0.0.1", "--port", String(port), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout?.on("data", (b: Buffer) => (log += b.toString()));
  child.stderr?.on("data", (b: Buffer) => (log += b.toString()));
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const killed = setTimeout(() => child.kill("SIGKILL"), 5_000);
    await exited(child);
    clearTimeout(killed);
  };
  const url = `http://127.0.0.1:${port}`;
  try {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(
          `llama-server exited (${child.exitCode ?? child.signalCode}) before becoming healthy:\n${log}`,
        );
      }
      if (performance.now() - started > HEALTH_DEADLINE_MS)
        throw new Error(`llama-server not healthy after ${HEALTH_DEADLINE_MS} ms:\n${log}`);
      const status = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) }).then(
        (r) => r.status,
        () => 0,
      );
      if (status === 200) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    url,
    msToHealthy: performance.now() - started,
    log: () => log,
    [Symbol.asyncDispose]: stop,
  };
}

interface ChatCompletion {
  object: string;
  choices: { index: number; finish_reason: string; message: { role: string; content: string } }[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  timings?: { draft_n?: number; draft_n_accepted?: number };
}

async function chat(
  url: string,
  content: string,
  maxTokens: number,
): Promise<{ body: ChatCompletion; ms: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content }], max_tokens: maxTokens, seed: 7 }),
    signal: AbortSignal.timeout(30_000),
  });
  expect(res.status).toBe(200);
  return { body: (await res.json()) as ChatCompletion, ms: performance.now() - t0 };
}

async function waitForLog(
  server: RunningServer,
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpMatchArray | null> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const m = server.log().match(pattern);
    if (m !== null || performance.now() > deadline) return m;
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("tiny GGUF models in the real llama-server", () => {
  let dir = "";
  let bin = "";
  let model = "";
  let drafter = "";
  const common = ["-c", "512", "-ngl", "0", "--no-warmup", "-t", "2", "--parallel", "1"];

  beforeAll(async () => {
    // The managed build from ~/.cache/inference-cluster/engine/current.json, unless overridden.
    const engine = await locateEngine({
      serverBinOverride: process.env.SERVICE_ENGINE_SERVER_BIN || undefined,
    });
    if (!engine.usable || engine.server_bin === null) {
      throw new Error(`llama-server not available: ${engine.problem ?? "unknown problem"}`);
    }
    bin = engine.server_bin;
    dir = await mkdtemp(join(tmpdir(), "ic-gguf-"));
    model = (await writeTinyModel(join(dir, "tiny.gguf"))).path;
    drafter = (await writeTinyModel(join(dir, "tiny-drafter.gguf"), { drafter: true })).path;
  });

  afterAll(async () => {
    if (dir !== "") await rm(dir, { recursive: true, force: true });
  });

  test("serves an OpenAI chat completion from the tiny model", async ({ annotate }) => {
    await using server = await startLlamaServer(bin, ["-m", model, ...common]);
    const { body, ms } = await chat(server.url, "Hello world", 8);
    await annotate(
      `healthy after ${server.msToHealthy.toFixed(0)} ms, completion in ${ms.toFixed(0)} ms`,
    );

    expect(body.object).toBe("chat.completion");
    const choice = body.choices[0];
    expect(choice?.message.role).toBe("assistant");
    expect(typeof choice?.message.content).toBe("string");
    expect(choice?.message.content.length).toBeGreaterThan(0);
    // Special tokens have zero output weights, so generation never stops before max_tokens.
    expect(choice?.finish_reason).toBe("length");
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(8);
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + body.usage.completion_tokens);
  });

  test("drafts with the drafter model and logs speculative decoding statistics", async ({
    annotate,
  }) => {
    // In this llama.cpp, -md only loads the draft model; --spec-type draft-simple makes the server draft with it.
    await using server = await startLlamaServer(bin, [
      "-m",
      model,
      "-md",
      drafter,
      "--spec-type",
      "draft-simple",
      "-ngld",
      "0",
      ...common,
    ]);
    const { body, ms } = await chat(server.url, "Tell me a long story about the world", 32);
    await annotate(
      `healthy after ${server.msToHealthy.toFixed(0)} ms, 32-token completion in ${ms.toFixed(0)} ms`,
    );

    expect(body.usage.completion_tokens).toBe(32);
    expect(body.timings?.draft_n ?? 0).toBeGreaterThan(0);
    const stats = await waitForLog(server, DRAFT_STATS, 5_000);
    expect(stats, server.log()).not.toBeNull();
    expect(Number(stats?.[3])).toBe(body.timings?.draft_n);
    expect(Number(stats?.[2])).toBe(body.timings?.draft_n_accepted);
  });
});
