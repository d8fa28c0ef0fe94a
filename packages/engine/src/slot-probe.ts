// Whether the engine build moves a conversation's KV cache between servers, asked of the engine
// rather than believed (issue 50: a restore that loads but is not reused has been reported). Two
// llama-servers start on loopback with a tiny generated model and a slot directory each: the first
// answers a prompt (greedy) and saves its slot to a file; the file is copied to the second, which
// restores it into another slot and answers the same prompt there. The build counts only when the
// second answer reused the restored prefix (its own `timings.cache_n`) and said what the first said.
// The verdict is cached per llama-server binary (path, size, mtime) under the engine cache.
import { copyFile, mkdir, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeTinyModel } from "@ic/gguf";
import type { Child } from "@ic/process";
import type { SlotRestore } from "@ic/protocol";
import { startLoopbackServer } from "./loopback-server.ts";
import { readProbeCache, writeProbeCache } from "./probe-cache.ts";

const CACHE_FILE = "slot-restore.json";
const CACHE_VERSION = 1;
/** A prompt of a few hundred tokens (the tiny model's vocabulary is bytes): reuse shows plainly. */
const PROMPT = {
  messages: [
    {
      role: "user",
      content: Array.from({ length: 20 }, (_, i) => `line ${i}: the probe's prompt`).join("\n"),
    },
  ],
  max_tokens: 8,
  temperature: 0,
};
/** The share of the restored tokens the second answer must have reused. */
const REUSED_AT_LEAST = 0.9;

interface Answer {
  readonly text: string;
  readonly promptTokens: number;
  readonly cached: number;
}

/**
 * Whether this llama-server saves a slot, restores it into another server's slot, and reuses it
 * there. Never throws: an engine that cannot be probed does not move caches, with the reason.
 */
export async function probeSlotRestore(
  serverBin: string | null | undefined,
  opts: { readonly timeoutMs?: number; readonly cacheDir?: string | undefined } = {},
): Promise<SlotRestore> {
  if (!serverBin) return { supported: false, evidence: "no llama-server" };
  let key: string;
  try {
    const s = await stat(serverBin);
    key = `${CACHE_VERSION}:${serverBin}:${s.size}:${Math.round(s.mtimeMs)}`;
  } catch (e) {
    return { supported: false, evidence: `llama-server unreadable: ${(e as Error).message}` };
  }
  const cached = opts.cacheDir
    ? await readProbeCache(opts.cacheDir, CACHE_FILE, key, isSlotRestore)
    : undefined;
  if (cached) return cached;
  const work = await mkdtemp(join(tmpdir(), "ic-slot-probe-"));
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  const servers: Child[] = [];
  try {
    const model = join(work, "probe.gguf");
    await writeTinyModel(model, { contextLength: 2048 });
    const start = async (name: string) => {
      const dir = join(work, name);
      await mkdir(dir);
      const args = ["-m", model, "-c", "2048", "-np", "2", "-t", "1", "-fit", "off"];
      const s = await startLoopbackServer(serverBin, [...args, "--slot-save-path", dir], deadline);
      servers.push(s.child);
      if (!s.ok) throw new Error(`llama-server did not serve: ${s.evidence}`);
      return { base: s.base, dir };
    };
    const [a, b] = [await start("a"), await start("b")];
    const first = await chat(a.base, 0, deadline);
    const saved = await slotAction(a.base, 0, "save", deadline);
    await copyFile(join(a.dir, "probe.bin"), join(b.dir, "probe.bin"));
    const restored = await slotAction(b.base, 1, "restore", deadline);
    const second = await chat(b.base, 1, deadline);
    const result = verdict(first, second, { saved, restored });
    if (opts.cacheDir) await writeProbeCache(opts.cacheDir, CACHE_FILE, key, result);
    return result;
  } catch (e) {
    return { supported: false, evidence: `probe failed: ${(e as Error).message}`.slice(0, 400) };
  } finally {
    await Promise.all(servers.map((c) => c.stop(2000)));
    await rm(work, { recursive: true, force: true });
  }
}

/** The verdict on the two answers (pure): reused and the same, or why not. */
export function verdict(
  first: Answer,
  second: Answer,
  moved: { readonly saved: number; readonly restored: number },
): SlotRestore {
  const what = `saved ${moved.saved} tokens, restored ${moved.restored}, the same prompt then reused ${second.cached} of ${second.promptTokens}`;
  if (moved.restored === 0) return { supported: false, evidence: `${what}: nothing restored` };
  if (second.cached < REUSED_AT_LEAST * Math.min(moved.restored, second.promptTokens))
    return { supported: false, evidence: `${what}: the restored prefix was not reused` };
  if (second.text !== first.text)
    return {
      supported: false,
      evidence: `${what}, but answered ${JSON.stringify(second.text)} where the saving server answered ${JSON.stringify(first.text)}`,
    };
  return { supported: true, evidence: `${what}, same answer` };
}

async function post(url: string, body: unknown, deadline: number): Promise<unknown> {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(Math.max(1000, deadline - Date.now())),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`${url} answered ${r.status}: ${text.slice(0, 200)}`);
  return JSON.parse(text) as unknown;
}

async function chat(base: string, slot: number, deadline: number): Promise<Answer> {
  const body = (await post(
    `${base}/v1/chat/completions`,
    { ...PROMPT, id_slot: slot },
    deadline,
  )) as {
    choices?: { message?: { content?: string } }[];
    timings?: { cache_n?: number; prompt_n?: number };
  };
  const text = body.choices?.[0]?.message?.content;
  const t = body.timings;
  if (typeof text !== "string" || t?.cache_n === undefined || t.prompt_n === undefined)
    throw new Error(`an answer without content or timings: ${JSON.stringify(body).slice(0, 200)}`);
  return { text, promptTokens: t.cache_n + t.prompt_n, cached: t.cache_n };
}

/** `POST /slots/{slot}?action=save|restore` of the probe's file: the tokens saved or restored. */
async function slotAction(
  base: string,
  slot: number,
  action: "save" | "restore",
  deadline: number,
): Promise<number> {
  const r = (await post(
    `${base}/slots/${slot}?action=${action}`,
    { filename: "probe.bin" },
    deadline,
  )) as { n_saved?: number; n_restored?: number };
  const n = action === "save" ? r.n_saved : r.n_restored;
  if (typeof n !== "number") throw new Error(`slot ${action} answered ${JSON.stringify(r)}`);
  return n;
}

function isSlotRestore(v: unknown): v is SlotRestore {
  const s = v as Partial<SlotRestore> | undefined;
  return typeof s?.supported === "boolean" && typeof s.evidence === "string";
}
