// HTTP access control at the edge: bearer tokens in scopes, JSON-only mutating bodies, no foreign
// Origin on mutating requests. One table maps every route to the scope it needs.
import { createHash, timingSafeEqual } from "node:crypto";
import type { MiddlewareHandler } from "hono";
import type { ApiScope } from "@ic/config";
import { ServiceError } from "@ic/protocol";

export interface ApiToken {
  /** Who holds it (logged; the token never is). */
  readonly name: string;
  readonly token: string;
  readonly scopes: readonly ApiScope[];
}

export interface AuthOptions {
  /** Configured tokens plus the cluster's node token. Empty: no token is checked (anonymous). */
  readonly tokens: readonly ApiToken[];
}

/** Answered without a token (GET and HEAD only): the liveness ping and the node's health check. */
const PUBLIC = new Set(["/v1/ping", "/health"]);
const READ_V1 = /^\/v1\/(tracing|traces|diagnostics)(\/|$)/;

/** The scope a request needs; null for the public ping and health check (GET only, as documented). */
export function scopeFor(method: string, path: string): ApiScope | null {
  const reading = method === "GET" || method === "HEAD";
  if (reading && PUBLIC.has(path)) return null;
  if (path.startsWith("/v1/") && !READ_V1.test(path)) return "inference";
  return reading ? "read" : "admin";
}

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();

/** Finds the token (constant time per comparison: equal-length digests). */
function holderOf(tokens: readonly ApiToken[], presented: string): ApiToken | undefined {
  const d = digest(presented);
  let found: ApiToken | undefined;
  for (const t of tokens) if (timingSafeEqual(digest(t.token), d)) found ??= t;
  return found;
}

/** A body is present when the request says it has one. */
function hasBody(h: (name: string) => string | undefined): boolean {
  const len = h("content-length");
  return (len !== undefined && len !== "0") || h("transfer-encoding") !== undefined;
}

export function authMiddleware(o: AuthOptions): MiddlewareHandler {
  return async (c, next) => {
    const method = c.req.method;
    const scope = scopeFor(method, c.req.path);
    const mutating = method !== "GET" && method !== "HEAD" && method !== "OPTIONS";
    if (mutating) {
      // Browsers send Origin on cross-site requests; a page elsewhere must not drive this node.
      const origin = c.req.header("origin");
      if (origin !== undefined && origin !== "null") {
        let originHost: string | undefined;
        try {
          originHost = new URL(origin).host;
        } catch {
          originHost = undefined;
        }
        if (originHost !== c.req.header("host"))
          throw new ServiceError("forbidden", `cross-origin request from ${origin} refused`);
      } else if (origin === "null") {
        throw new ServiceError("forbidden", "cross-origin request from an opaque origin refused");
      }
    }
    if (scope !== null && o.tokens.length > 0) {
      const auth = c.req.header("authorization") ?? "";
      const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
      if (!m) {
        c.header("WWW-Authenticate", 'Bearer realm="inference-cluster"');
        throw new ServiceError("unauthorized", `a bearer token with scope ${scope} is required`);
      }
      const holder = holderOf(o.tokens, m[1]!);
      if (!holder) {
        c.header("WWW-Authenticate", 'Bearer realm="inference-cluster", error="invalid_token"');
        throw new ServiceError("unauthorized", "unknown bearer token");
      }
      if (!holder.scopes.includes(scope))
        throw new ServiceError(
          "forbidden",
          `token "${holder.name}" lacks scope ${scope} (it has ${holder.scopes.join(", ")})`,
        );
    }
    if (mutating) {
      const type = c.req.header("content-type");
      const json = type !== undefined && /^application\/json\s*(;|$)/i.test(type);
      if ((type !== undefined || hasBody((n) => c.req.header(n))) && !json)
        throw new ServiceError(
          "unsupported_media_type",
          `request bodies must be application/json${type ? ` (got ${type})` : ""}`,
        );
    }
    await next();
  };
}
