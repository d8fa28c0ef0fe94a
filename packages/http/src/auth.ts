// HTTP access control at the edge: bearer tokens in scopes, JSON-only mutating bodies, no foreign
// Origin on mutating requests. One table maps every route to the scope it needs.
import { createHash, timingSafeEqual } from "node:crypto";
import type { Context, MiddlewareHandler } from "hono";
import type { ApiScope } from "@ic/config";
import { INSTANCE_KIND_TABLE, INSTANCE_KINDS, ServiceError } from "@ic/protocol";
import type { TokenLimits } from "@ic/protocol";
import { requestHeader } from "./node-http.ts";

export interface ApiToken {
  /** Who holds it (logged; the token never is). */
  readonly name: string;
  readonly token: string;
  readonly scopes: readonly ApiScope[];
  /** Glob patterns of the models it may use (absent: all). */
  readonly models?: readonly string[];
  /** Its limits, counted cluster-wide by the master (absent: none). */
  readonly limits?: TokenLimits;
}

declare module "hono" {
  interface ContextVariableMap {
    /** The token the request presented (absent: anonymous, or a public route). */
    apiToken: ApiToken;
  }
}

/** The token of the request, once the auth middleware has run. */
export const requestToken = (c: Context): ApiToken | undefined => c.get("apiToken");

/** `*` matches any run of characters (`/` included), `?` one character; the rest literally. */
export function globToRegExp(pattern: string): RegExp {
  let re = "";
  for (const ch of pattern) {
    if (ch === "*") re += ".*";
    else if (ch === "?") re += ".";
    else re += ch.replace(/[\\^$.|+()[\]{}]/g, "\\$&");
  }
  return new RegExp(`^${re}$`, "s");
}

/** The configured tokens' patterns, compiled once each. */
const compiled = new WeakMap<readonly string[], RegExp[]>();

/** Whether the token may use the model (a token without `models` may use every model). */
export function mayUseModel(token: ApiToken | undefined, modelId: string): boolean {
  if (!token?.models) return true;
  let res = compiled.get(token.models);
  if (!res) {
    res = token.models.map(globToRegExp);
    compiled.set(token.models, res);
  }
  return res.some((r) => r.test(modelId));
}

/** The 403 for a model the token may not use, naming what it may use. */
export function modelForbidden(token: ApiToken, modelId: string): ServiceError {
  return new ServiceError(
    "forbidden",
    `token "${token.name}" may not use model ${modelId}; it may use models matching ${token.models!.join(", ")}`,
    { details: { token: token.name, allowed_models: [...token.models!] } },
  );
}

/**
 * The tokens a node accepts, replaceable while it runs (SIGHUP, POST /admin/reload): a rotation
 * lists the old and the new token until clients moved, then the old one goes. Each token's digest
 * is computed once per change, so a request hashes only the token it presents.
 */
export class TokenSet {
  private known: { token: ApiToken; digest: Buffer }[] = [];
  constructor(tokens: readonly ApiToken[] = []) {
    this.set(tokens);
  }

  set(tokens: readonly ApiToken[]): void {
    this.known = tokens.map((token) => ({ token, digest: digest(token.token) }));
  }

  /** Empty: no token is checked (anonymous). */
  get size(): number {
    return this.known.length;
  }

  holder(presented: string): ApiToken | undefined {
    return holderOf(this.known, presented);
  }

  names(): string[] {
    return this.known.map((k) => k.token.name);
  }
}

export interface AuthOptions {
  /**
   * Configured tokens plus the cluster's node token (a TokenSet when they may change while the node
   * runs). Empty: no token is checked (anonymous).
   */
  readonly tokens: readonly ApiToken[] | TokenSet;
}

/**
 * Answered without a token (GET and HEAD only): the liveness ping, the health check, the API
 * document and the dashboard's static page (it holds no data; it asks the API with a token).
 */
const PUBLIC = new Set(["/v1/ping", "/health", "/openapi.json", "/", "/favicon.ico"]);
const PUBLIC_PREFIX = "/dashboard/";
const READ_V1 = /^\/v1\/(tracing|traces|diagnostics)(\/|$)/;
/** Inference paths outside /v1 (llama-server's names for rerank, which the gateway answers too). */
const INFERENCE_ELSEWHERE: ReadonlySet<string> = new Set(
  INSTANCE_KINDS.flatMap((k) => INSTANCE_KIND_TABLE[k].paths).filter((p) => !p.startsWith("/v1/")),
);

/** The scope a request needs; null for the public ping and health check (GET only, as documented). */
export function scopeFor(method: string, path: string): ApiScope | null {
  const reading = method === "GET" || method === "HEAD";
  if (reading && (PUBLIC.has(path) || path.startsWith(PUBLIC_PREFIX))) return null;
  if ((path.startsWith("/v1/") && !READ_V1.test(path)) || INFERENCE_ELSEWHERE.has(path))
    return "inference";
  return reading ? "read" : "admin";
}

const digest = (s: string): Buffer => createHash("sha256").update(s).digest();

/**
 * Finds the token (constant time per comparison: equal-length digests). The configured tokens'
 * digests are computed once, so a request hashes only the token it presents.
 */
function holderOf(
  tokens: readonly { token: ApiToken; digest: Buffer }[],
  presented: string,
): ApiToken | undefined {
  const d = digest(presented);
  let found: ApiToken | undefined;
  for (const t of tokens) if (timingSafeEqual(t.digest, d)) found ??= t.token;
  return found;
}

/** A body is present when the request says it has one. */
function hasBody(h: (name: string) => string | undefined): boolean {
  const len = h("content-length");
  return (len !== undefined && len !== "0") || h("transfer-encoding") !== undefined;
}

export function authMiddleware(o: AuthOptions): MiddlewareHandler {
  const known = o.tokens instanceof TokenSet ? o.tokens : new TokenSet(o.tokens);
  return async (c, next) => {
    const method = c.req.method;
    const scope = scopeFor(method, c.req.path);
    const mutating = method !== "GET" && method !== "HEAD" && method !== "OPTIONS";
    if (mutating) {
      // Browsers send Origin on cross-site requests; a page elsewhere must not drive this node.
      const origin = requestHeader(c, "origin");
      if (origin !== undefined && origin !== "null") {
        let originHost: string | undefined;
        try {
          originHost = new URL(origin).host;
        } catch {
          originHost = undefined;
        }
        if (originHost !== requestHeader(c, "host"))
          throw new ServiceError("forbidden", `cross-origin request from ${origin} refused`);
      } else if (origin === "null") {
        throw new ServiceError("forbidden", "cross-origin request from an opaque origin refused");
      }
    }
    if (scope !== null && known.size > 0) {
      const auth = requestHeader(c, "authorization");
      const m = /^Bearer\s+(\S+)\s*$/i.exec(auth ?? "");
      // Anthropic's clients send their key as x-api-key: taken on inference paths, when no
      // Authorization header came.
      const apiKey =
        scope === "inference" && auth === undefined ? requestHeader(c, "x-api-key") : undefined;
      const presented = m?.[1] ?? apiKey?.trim();
      if (!presented) {
        c.header("WWW-Authenticate", 'Bearer realm="inference-cluster"');
        throw new ServiceError("unauthorized", `a bearer token with scope ${scope} is required`);
      }
      const holder = known.holder(presented);
      if (!holder) {
        c.header("WWW-Authenticate", 'Bearer realm="inference-cluster", error="invalid_token"');
        throw new ServiceError("unauthorized", "unknown bearer token");
      }
      if (!holder.scopes.includes(scope))
        throw new ServiceError(
          "forbidden",
          `token "${holder.name}" lacks scope ${scope} (it has ${holder.scopes.join(", ")})`,
        );
      c.set("apiToken", holder);
    }
    if (mutating) {
      const type = requestHeader(c, "content-type");
      const json = type !== undefined && /^application\/json\s*(;|$)/i.test(type);
      // A model file's upload is its raw bytes (a PUT: no HTML form sends one, and a page elsewhere
      // cannot without a preflight this API never grants).
      const upload =
        method === "PUT" &&
        c.req.path.startsWith("/store/uploads/") &&
        type !== undefined &&
        /^application\/octet-stream\s*(;|$)/i.test(type);
      if ((type !== undefined || hasBody((n) => requestHeader(c, n))) && !json && !upload)
        throw new ServiceError(
          "unsupported_media_type",
          `request bodies must be application/json${type ? ` (got ${type})` : ""}`,
        );
    }
    await next();
  };
}
