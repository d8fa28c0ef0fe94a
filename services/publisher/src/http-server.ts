// The HTTP layer under the app: node's http server with the hono app as its listener, bound to one
// address. Requests that fail before reaching the app still get the `{ "error": string }` envelope.
import { createServer } from "node:http";
import type { Server } from "node:http";
import type { Duplex } from "node:stream";
import { getRequestListener } from "@hono/node-server";
import type { Hono } from "hono";
import type { Logger } from "@ic/log";
import { errorMessage, rawErrorResponse } from "./errors.ts";

const json = (status: number, message: string): Response =>
  new Response(JSON.stringify({ error: message }), {
    status,
    headers: { "Content-Type": "application/json", "Cache-Control": "no-store" },
  });

/** Listens on `host:port` (0: a free port) and resolves once listening. */
export async function listenHttp(
  app: Hono,
  opts: { host: string; port: number; log: Logger },
): Promise<Server> {
  const log = opts.log.child({ component: "http" });
  const listener = getRequestListener(app.fetch, {
    hostname: opts.host,
    // A request node parsed but the adapter cannot turn into a URL (bad Host, backslash in the path).
    errorHandler: (err) => {
      if (err instanceof Error && err.name === "RequestError")
        return json(400, `malformed request: ${err.message}`);
      log.error({ err: errorMessage(err) }, "request failed before the app");
      return json(500, "internal error");
    },
  });
  const server = createServer(listener);
  // Malformed HTTP (bad method, bad framing, headers over the limit): node's default answer has no
  // body; this one carries the envelope. Nothing is written once a response has started.
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    // Bytes after a `Connection: close` request: the request in flight is still answered, then
    // the connection closes; answering the stray bytes would replace that answer.
    if (err.code === "HPE_CLOSED_CONNECTION") return;
    const written = (socket as Duplex & { bytesWritten?: number }).bytesWritten ?? 0;
    if (!socket.writable || written > 0) {
      socket.destroy();
      return;
    }
    const code = err.code ?? "error";
    const response =
      code === "HPE_HEADER_OVERFLOW"
        ? rawErrorResponse(431, "request headers are too large")
        : code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? rawErrorResponse(408, "request timed out")
          : rawErrorResponse(400, `malformed HTTP request (${code})`);
    socket.end(response);
  });
  server.on("checkExpectation", (_req, res) => {
    const body = JSON.stringify({ error: "only Expect: 100-continue is supported" });
    res.writeHead(417, {
      "Content-Type": "application/json",
      "Content-Length": Buffer.byteLength(body),
      "Cache-Control": "no-store",
    });
    res.end(body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return server;
}
