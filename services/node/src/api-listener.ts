// The Node request listener of the node's HTTP API: the hono app behind @hono/node-server's adapter,
// a typed 503 until the app is wired, and the envelope also for requests Node's parser accepts but a
// URL cannot hold (a backslash in the path, `*` as the target), which never reach the app.
import type { IncomingMessage, ServerResponse } from "node:http";
import { getRequestListener } from "@hono/node-server";
import type { Hono } from "hono";
import { errorBody, errorBodyFor, httpStatusFor, ServiceError } from "@ic/protocol";
import type { Logger } from "@ic/log";

export function apiListener(
  app: () => Hono | undefined,
  log: Logger,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return getRequestListener(
    // The Node request/response pair (env) goes along: streaming responses write to it directly.
    (req, env) => {
      const a = app();
      return a
        ? a.fetch(req, env)
        : Response.json(
            errorBodyFor(
              (req.url ?? "/").split("?")[0]!,
              new ServiceError("unavailable", "node starting"),
            ),
            { status: 503 },
          );
    },
    {
      errorHandler: (err) => {
        const bad = err instanceof Error && err.name === "RequestError";
        const e = bad
          ? new ServiceError("invalid_request", `malformed request: ${err.message}`)
          : new ServiceError("internal", "internal error");
        if (!bad) log.error({ err }, "request failed outside the app");
        return Response.json(errorBody(e), { status: httpStatusFor(e.code) });
      },
    },
  );
}
