// Child process of the staging benchmark: a store host serving <store_path> on a free loopback port.
// Running it out of process keeps the server's work off the measured client's event loop.
import { silentLogger } from "@ic/log";
import { StoreHost } from "@ic/store";

const storePath = process.argv[2];
if (!storePath) throw new Error("usage: store-host-child.ts <store_path>");
const host = new StoreHost({ storePath, logger: silentLogger(), headroomBytes: 0 });
await host.start({ host: "127.0.0.1", port: 0 });
await host.registerAll();
process.stdout.write(`${JSON.stringify({ url: host.url })}\n`);
process.on("SIGTERM", () => {
  void host.stop().then(() => process.exit(0));
});
