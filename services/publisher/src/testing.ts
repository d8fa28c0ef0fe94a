// Shared fixtures for the publisher's tests: a hub emulator seeded with a small model family,
// and a publisher server wired to it with a temp config dir and a temp copy of the catalog.
import { copyFile, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import type { IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { createLogger } from "@ic/log";
import type { Logger } from "@ic/log";
import { freePort, generateMtpCheckpoint, modelCard, startHubEmulator } from "@ic/testkit";
import type { HubEmulator, MtpCheckpoint } from "@ic/testkit";
import type { Clock } from "@ic/protocol";
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
export function capturingLogger(): {
  log: (scrub?: (line: string) => string) => Logger;
  text: () => string;
} {
  const stream = new PassThrough();
  const chunks: string[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c.toString()));
  return {
    log: (scrub) =>
      createLogger({
        enabled: true,
        level: "debug",
        destination: stream,
        ...(scrub ? { scrub } : {}),
      }),
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

/** A hub URL on a loopback port nothing listens on: every call is refused (ECONNREFUSED). */
export async function unreachableHubUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

export interface ProxiedRequest {
  readonly method: string;
  /** Path and query. */
  readonly path: string;
  readonly body: string;
}

/** What the proxy does with a request: pass it on, cut the connection, or answer itself. */
export type ProxyAction = "forward" | "drop" | { readonly status: number; readonly json: unknown };

export interface HubProxy {
  readonly url: string;
  /** Every request that reached the proxy, in order, with its body. */
  readonly requests: readonly ProxiedRequest[];
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

async function readAll(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/**
 * A scripted hub in front of the emulator: `rule` decides per request whether it is forwarded,
 * dropped (socket destroyed) or answered with a canned JSON error. LFS part uploads go straight to
 * the emulator (their URLs are absolute), so they are never seen here.
 */
export async function startHubProxy(
  target: string,
  rule: (req: ProxiedRequest) => ProxyAction,
): Promise<HubProxy> {
  const requests: ProxiedRequest[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const body = await readAll(req);
      const seen = { method: req.method ?? "GET", path: req.url ?? "/", body: body.toString() };
      requests.push(seen);
      const action = rule(seen);
      if (action === "drop") {
        req.socket.destroy();
        return;
      }
      if (action !== "forward") {
        res.writeHead(action.status, { "Content-Type": "application/json" });
        res.end(JSON.stringify(action.json));
        return;
      }
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) {
        if (["host", "connection", "content-length", "transfer-encoding"].includes(k)) continue;
        if (typeof v === "string") headers.set(k, v);
      }
      const upstream = await fetch(`${target}${seen.path}`, {
        method: seen.method,
        headers,
        redirect: "manual",
        ...(body.length > 0 ? { body } : {}),
      });
      const out: Record<string, string> = {};
      upstream.headers.forEach((v, k) => {
        if (!["connection", "transfer-encoding", "content-encoding", "keep-alive"].includes(k))
          out[k] = v;
      });
      res.writeHead(upstream.status, out);
      if (!upstream.body || seen.method === "HEAD") {
        res.end();
        return;
      }
      Readable.fromWeb(upstream.body as unknown as NodeWebReadableStream<Uint8Array>).pipe(res);
    })().catch(() => req.socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let stopped: Promise<void> | null = null;
  const stop = (): Promise<void> => {
    stopped ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    return stopped;
  };
  return { url, requests, stop, [Symbol.asyncDispose]: stop };
}
