// How a node asks a peer node's HTTP API: one GET with the cluster's node token and a timeout, the
// answer validated at this edge. The cluster-wide views (traces, storage) fan out with it.
import type { z } from "zod";

/** A live peer as the fan-out sees it. */
export interface PeerApi {
  readonly name: string;
  /** The peer's API base URL (its heartbeat's api_url). */
  readonly apiUrl: string;
}

export interface PeerAskOptions {
  /**
   * The bearer token presented to peers (the cluster's node token, read scope), read at each ask:
   * a reload may rotate the cluster secret. Absent: none (anonymous).
   */
  readonly token?: (() => string) | undefined;
  /** Per-peer timeout (default 2000 ms). */
  readonly timeoutMs?: number;
}

/** The live peers' APIs (this node excluded) and how to ask them: what every fan-out takes. */
export interface PeerApis extends PeerAskOptions {
  list(): readonly PeerApi[];
}

/** A peer that did not answer usefully, and why in a few words. */
export interface UnreachablePeer {
  readonly node: string;
  readonly error: string;
}

/** `absent`: the peer answered 404 not_found from a route it has ("this is not here"). */
export type PeerAnswer<T> =
  { kind: "ok"; body: T } | { kind: "absent" } | { kind: "failed"; error: string };

/** What went wrong with a peer, in a few words (the cause's code when fetch has one). */
function describe(e: unknown, timeoutMs: number): string {
  const err = e as Error & { cause?: { code?: string; message?: string } };
  if (err.name === "TimeoutError" || err.name === "AbortError")
    return `no answer within ${timeoutMs} ms`;
  return err.cause?.code ?? err.cause?.message ?? err.message;
}

/** The error envelope's code and message, when `text` is one. */
function envelope(text: string): { code?: string; message?: string } {
  try {
    return (JSON.parse(text) as { error?: { code?: string; message?: string } }).error ?? {};
  } catch {
    return {};
  }
}

export async function askPeer<T>(
  peer: PeerApi,
  path: string,
  schema: z.ZodType<T>,
  o: PeerAskOptions,
): Promise<PeerAnswer<T>> {
  const timeoutMs = o.timeoutMs ?? 2000;
  try {
    const token = o.token?.();
    const res = await fetch(`${peer.apiUrl}${path}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    if (res.status !== 200) {
      const err = envelope(text);
      // "This is not here" is an answer; a peer without the route (an older version) is not.
      if (res.status === 404 && err.code === "not_found" && !err.message?.startsWith("no route"))
        return { kind: "absent" };
      return {
        kind: "failed",
        error: `HTTP ${res.status}${err.message ? `: ${err.message}` : ""}`,
      };
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return { kind: "failed", error: "answer is not JSON" };
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) return { kind: "failed", error: "malformed answer" };
    return { kind: "ok", body: parsed.data };
  } catch (e) {
    return { kind: "failed", error: describe(e, timeoutMs) };
  }
}
