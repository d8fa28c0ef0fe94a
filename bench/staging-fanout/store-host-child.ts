// A store host for bench/staging-fanout, run inside the store's network namespace: serves
// <store_path> on <host>:<port>, prints its URL, and its counters whenever a line "stats" comes in.
import { createInterface } from "node:readline";
import { silentLogger } from "@ic/log";
import { StoreHost } from "@ic/store";

const [storePath, host = "127.0.0.1", port = "0"] = process.argv.slice(2);
if (!storePath) throw new Error("usage: store-host-child.ts <store_path> [host] [port]");
const store = new StoreHost({ storePath, logger: silentLogger(), headroomBytes: 0 });
await store.start({ host, port: Number(port) });
await store.registerAll();
process.stdout.write(`${JSON.stringify({ url: store.url })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "stats") process.stdout.write(`${JSON.stringify(store.stats())}\n`);
}
await store.stop();
