// Shared fixtures for the publisher's tests: a hub emulator seeded with a small model family,
// and a publisher server wired to it with a temp config dir and a temp copy of the catalog.
import { copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { createLogger } from "@ic/log";
import type { Logger } from "@ic/log";
import { generateMtpCheckpoint, modelCard, startHubEmulator } from "@ic/testkit";
import type { HubEmulator, MtpCheckpoint } from "@ic/testkit";
import type { Clock } from "./clock.ts";
import { BUILTIN_CATALOG, loadConfig } from "./config.ts";
import { PublisherServer } from "./server.ts";

export const TEST_TOKEN = "hf_testtoken0123456789abcdef";

/** The model family every integration test uses. */
export const REPOS = {
  /** Full-precision DeepSeek-style base with MTP layers, 3 shards. */
  base: "acme/Tiny-MTP",
  /** q4k quant of `base` (GGUF), the usual input of detection. */
  q4k: "quant-org/Tiny-MTP-Q4K",
  /** q8k quant of `base`: detected, refused by registration. */
  q8k: "quant-org/Tiny-MTP-Q8_K",
  /** Expert-server slice of the q4k quant: a second catalog entry for the same source model. */
  expertServer: "quant-org/Tiny-MTP-expert-server-Q4K",
  /** Gemma-type base without MTP heads, its q4k quant and the quant's companion assistant. */
  gemmaBase: "gem-org/Gemma-Tiny",
  gemmaQ4k: "quant-org/Gemma-Tiny-Q4K",
  gemmaAssistant: "quant-org/Gemma-Tiny-Q4K-assistant",
  /** Qwen3-Next-style single-file checkpoint with `mtp.*` tensors. */
  qwenNext: "qwen-like/Tiny-Next",
} as const;

export interface HubFixture {
  readonly hub: HubEmulator;
  readonly base: MtpCheckpoint;
  readonly gemma: MtpCheckpoint;
  readonly qwen: MtpCheckpoint;
  stop(): Promise<void>;
}

function quantRepo(base: string, file: string): Record<string, string> {
  return {
    "README.md": modelCard({ base_model: base, tags: ["gguf"] }, "A quantized test model.\n"),
    [file]: `GGUF fixture for ${base}\n`,
  };
}

export async function startHubFixture(
  opts: { multipartChunkSize?: number } = {},
): Promise<HubFixture> {
  const hub = await startHubEmulator({ token: TEST_TOKEN, ...opts });
  const base = await generateMtpCheckpoint({
    hiddenSize: 64,
    intermediateSize: 256,
    numHiddenLayers: 2,
    shards: 3,
  });
  const gemma = await generateMtpCheckpoint({ style: "none", shards: 2 });
  const qwen = await generateMtpCheckpoint({ style: "mtp-prefix", shards: 1 });
  await hub.addRepo(REPOS.base, base.repoFiles());
  await hub.addRepo(REPOS.q4k, quantRepo(REPOS.base, "tiny-mtp-Q4_K_M.gguf"));
  await hub.addRepo(REPOS.q8k, quantRepo(REPOS.base, "tiny-mtp-Q8_K.gguf"));
  await hub.addRepo(
    REPOS.expertServer,
    quantRepo(REPOS.base, "tiny-mtp-expert-server-Q4_K_M.gguf"),
  );
  await hub.addRepo(REPOS.gemmaBase, gemma.repoFiles());
  await hub.addRepo(REPOS.gemmaQ4k, quantRepo(REPOS.gemmaBase, "gemma-tiny-Q4_K_M.gguf"));
  await hub.addRepo(REPOS.gemmaAssistant, {
    "README.md": modelCard({ tags: ["assistant"] }),
    "assistant.gguf": "x",
  });
  await hub.addRepo(REPOS.qwenNext, qwen.repoFiles());
  return {
    hub,
    base,
    gemma,
    qwen,
    async stop() {
      await hub.stop();
      await Promise.all([base.cleanup(), gemma.cleanup(), qwen.cleanup()]);
    },
  };
}

/** A logger whose JSON lines are collected, to check what is (not) logged. */
export function capturingLogger(): { log: Logger; text: () => string } {
  const stream = new PassThrough();
  const chunks: string[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c.toString()));
  return {
    log: createLogger({ enabled: true, level: "debug", destination: stream }),
    text: () => chunks.join(""),
  };
}

export interface TestServer {
  readonly server: PublisherServer;
  readonly url: string;
  readonly dir: string;
  readonly catalogPath: string;
  readonly logText: () => string;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export async function startTestServer(
  hubUrl: string,
  opts: { envToken?: string; clock?: Clock; env?: Record<string, string> } = {},
): Promise<TestServer> {
  const dir = await mkdtemp(join(tmpdir(), "publisher-test-"));
  const catalogPath = join(dir, "catalog.yaml");
  await copyFile(BUILTIN_CATALOG, catalogPath);
  const config = loadConfig({
    PUBLISHER_PORT: "0",
    PUBLISHER_CONFIG_DIR: join(dir, "config"),
    PUBLISHER_CATALOG: catalogPath,
    PUBLISHER_WORK_DIR: dir,
    HF_ENDPOINT: hubUrl,
    ...opts.env,
  });
  const { log, text } = capturingLogger();
  const server = new PublisherServer({
    config,
    log,
    envToken: opts.envToken,
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  const url = await server.start();
  const stop = async (): Promise<void> => {
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  };
  return { server, url, dir, catalogPath, logText: text, stop, [Symbol.asyncDispose]: stop };
}

/** Reads an SSE response into its `data:` lines (comments skipped) until `[done]` or the end. */
export async function readSse(res: Response, opts: { maxLines?: number } = {}): Promise<string[]> {
  const lines: string[] = [];
  if (!res.body) return lines;
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const l of event.split("\n")) if (l.startsWith("data: ")) lines.push(l.slice(6));
        if (
          lines.at(-1) === "[done]" ||
          (opts.maxLines !== undefined && lines.length >= opts.maxLines)
        )
          return lines;
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return lines;
}
