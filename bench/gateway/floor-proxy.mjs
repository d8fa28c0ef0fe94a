// The floor of any Node gateway on this machine: a bare node:http pass-through to one llama-server
// (no validation, no routing, no task, no bus), run as its own process on the node's core. The
// gateway benchmark measures it next to the real gateway, so the report separates the cost of one
// more Node hop from the cost of the gateway's own work.
// Usage: node floor-proxy.mjs <upstream-url>; prints the port it listens on.
import { Agent, createServer, request } from "node:http";

const upstream = new URL(process.argv[2] ?? "");
const agent = new Agent({ keepAlive: true });

const server = createServer((req, res) => {
  const up = request(
    {
      agent,
      host: upstream.hostname,
      port: upstream.port,
      path: req.url,
      method: req.method,
      headers: {
        "content-type": "application/json",
        "content-length": req.headers["content-length"],
        // The engine's API key, as the client sent it.
        ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
      },
    },
    (ur) => {
      res.writeHead(ur.statusCode ?? 502, { "content-type": ur.headers["content-type"] ?? "" });
      res.socket?.setNoDelay(true);
      ur.on("data", (c) => res.write(c));
      ur.on("end", () => res.end());
    },
  );
  up.setNoDelay(true);
  up.on("error", () => res.destroy());
  req.pipe(up);
});
server.listen(0, "127.0.0.1", () => {
  const addr = server.address();
  process.stdout.write(`${typeof addr === "object" && addr ? addr.port : 0}\n`);
});
// Exit normally on SIGINT, so that a profile (node --cpu-prof) is written.
process.on("SIGINT", () => process.exit(0));
