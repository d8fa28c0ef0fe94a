// What routing on the prompt caches costs the gateway per request, before the request leaves: the
// prompt's block hashes (prompt-blocks.ts), the lookups on two instances and the record on one
// (prompt-cache.ts, with 50 earlier turns of the conversation recorded), at prompt sizes from 4 KB
// to 512 KB of characters. The baseline, measured in the same run on the same bodies: JSON.parse of
// the request body, which the gateway does for every request already. Reports only.
import { performance } from "node:perf_hooks";
import { PromptCacheMap, promptBlocks } from "@ic/gateway";
import { machineLine, writeSection } from "../lib/report.ts";

const SIZES = [4_000, 32_000, 128_000, 512_000];
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 200);

function conversation(chars: number) {
  const messages = [{ role: "system", content: "You are a careful assistant. ".repeat(60) }];
  for (let t = 0; JSON.stringify(messages).length < chars; t++)
    messages.push(
      { role: "user", content: `Turn ${t}: ${"please look at this part again ".repeat(20)}` },
      { role: "assistant", content: `Answer ${t}: ${"here is what I found there ".repeat(12)}` },
    );
  return { model: "org/model", messages, max_tokens: 256, stream: true };
}

function timeMs(rounds: number, f: () => void): number {
  for (let i = 0; i < Math.min(50, rounds); i++) f();
  const t0 = performance.now();
  for (let i = 0; i < rounds; i++) f();
  return (performance.now() - t0) / rounds;
}

const rows: string[] = [];
for (const size of SIZES) {
  const body = conversation(size);
  const raw = JSON.stringify(body);
  const map = new PromptCacheMap();
  for (let i = 0; i < 50; i++) map.record("i-1", promptBlocks(body)!);
  const parse = timeMs(ROUNDS, () => JSON.parse(raw));
  const route = timeMs(ROUNDS, () => {
    const p = promptBlocks(body)!;
    map.reuse("i-1", p);
    map.reuse("i-2", p);
    map.record("i-1", p);
  });
  const line = `| ${raw.length.toLocaleString("en")} | ${parse.toFixed(3)} | ${route.toFixed(3)} | ${(route / parse).toFixed(2)}× |`;
  console.log(line);
  rows.push(line);
}
const body = [
  `Command: \`npm run bench prompt-cache\`. ${machineLine()}. Per request, the mean over ${ROUNDS} rounds after 50 warm-up rounds, one core: the prompt's block hashes, the lookups on two instances and the record on one, with 50 earlier turns of the conversation recorded; against JSON.parse of the same body (what the gateway already does per request), in the same run. About 4 characters per token for English text: 128 KB is a ~32k-token context.`,
  "",
  "| body bytes | JSON.parse ms (baseline) | prompt-cache routing ms | ratio |",
  "|---|---|---|---|",
  ...rows,
].join("\n");
await writeSection("Prompt-cache routing: cost per request (bench/prompt-cache)", body);
