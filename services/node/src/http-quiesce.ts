// The last step of a drain: the API stops taking connections and lets the open ones end by
// themselves. http.Server.close() would also close every idle keep-alive connection at once, and a
// client (a load balancer's pool) may be sending its next request on one of them in that instant:
// the request is lost with a reset that nothing retries (a POST is not resent). Instead the listener
// closes (new connections are refused, which load balancers retry elsewhere), each open connection
// gets at most one more answer (a draining node answers with `Connection: close`), and idle ones
// end when their client's keep-alive timer fires (undici: the server's `Keep-Alive: timeout=5` hint
// less 1 s) or the server's own, whichever comes first. Bounded; the stop closes what is left.
import { Server as NetServer } from "node:net";
import type { Server } from "node:http";

/**
 * Stops accepting connections and waits, at most `boundMs` (or until `cut` aborts), for the open ones
 * to close. Returns how many were still open when it stopped waiting.
 */
export async function quiesceConnections(
  server: Server,
  boundMs: number,
  cut?: AbortSignal,
): Promise<number> {
  // net.Server's close: stops listening without http.Server's closeIdleConnections().
  if (server.listening) NetServer.prototype.close.call(server);
  const deadline = Date.now() + boundMs;
  for (;;) {
    const open = await new Promise<number>((resolve) =>
      server.getConnections((err, n) => resolve(err ? 0 : n)),
    );
    if (open === 0 || Date.now() >= deadline || cut?.aborted) return open;
    await new Promise((r) => setTimeout(r, 25));
  }
}
