// One node of bench/staging-fanout, run inside its own network namespace: a staging client over
// <root> that serves its copies to peers (the node's /store/staged routes) on <host>:<port>. It
// prints {"ready":true}; a line "go" stages the model and prints the outcome; "stats" prints what it
// served to peers; end of input stops it.
import { createInterface } from "node:readline";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { silentLogger } from "@ic/log";
import { errorBody, httpStatusFor, ServiceError, type ModelId } from "@ic/protocol";
import { peerCopyRoutes, StagingClient, type PeerEndpoint, type PeerServeStats } from "@ic/store";

const [root, storeUrl, host, port, name, peersJson, model] = process.argv.slice(2);
if (!root || !storeUrl || !host || !port || !name || !peersJson || !model)
  throw new Error(
    "usage: peer-node-child.ts <root> <storeUrl> <host> <port> <name> <peersJson> <model>",
  );
const peers = JSON.parse(peersJson) as PeerEndpoint[];
const client = new StagingClient({
  root,
  storeUrl,
  settings: { cleanupOnDeactivate: false, keepRecentBytes: 1024 ** 4, headroomBytes: 0 },
  logger: silentLogger(),
  ...(peers.length > 0 ? { peers: () => peers } : {}),
  nodeName: name,
});
await client.start();
const served: PeerServeStats = { bytes_served: 0, range_requests: 0 };
const app = new Hono();
// The node's error envelope: a range not verified here yet is a 409, as on a node.
app.onError((err, c) => {
  const e = err instanceof ServiceError ? err : new ServiceError("internal", String(err));
  return c.json(errorBody(e), httpStatusFor(e.code));
});
peerCopyRoutes(app, () => client, served);
const server = serve({ fetch: app.fetch, hostname: host, port: Number(port) });
await new Promise((r) => server.once("listening", r));
const say = (v: unknown) => process.stdout.write(`${JSON.stringify(v)}\n`);
say({ ready: true });
for await (const line of createInterface({ input: process.stdin })) {
  const cmd = line.trim();
  if (cmd === "go") {
    const t0 = performance.now();
    const r = await client.stage(model as ModelId);
    const s = (performance.now() - t0) / 1000;
    if (r.ok) {
      const m = r.models[0]!;
      say({
        done: true,
        ok: true,
        s,
        fetched: m.fetchedBytes,
        peer: m.peerBytes,
        total: m.totalBytes,
      });
    } else say({ done: true, ok: false, s, message: r.message });
  } else if (cmd === "stats") say({ served: served.bytes_served, requests: served.range_requests });
}
await client.stop();
server.close();
