// Reloading the API tokens while the node runs (SIGHUP, POST /admin/reload): the config file is read
// and checked again exactly as at start, and its `auth.tokens` replace the ones in force at once,
// between two requests. A rotation without downtime: list the new token beside the old one and
// reload every node, move the clients, then drop the old one and reload again. A file that does not
// load changes nothing (the answer says why). Only `auth.tokens` is applied; the other keys still
// need a restart (the answer names none of them: it does not diff the rest of the file).
import type { Hono } from "hono";
import { z } from "zod";
import { ConfigError, loadConfig } from "@ic/config";
import type { ResolvedToken } from "@ic/config";
import type { ApiToken, TokenSet } from "@ic/gateway";
import type { Logger } from "@ic/log";
import { ServiceError } from "@ic/protocol";

export const ReloadResponseSchema = z.object({
  ok: z.literal(true),
  node: z.string(),
  /** The token names in force now (the cluster's own node token not listed). */
  tokens: z.array(z.string()),
  added: z.array(z.string()),
  removed: z.array(z.string()),
  /** Same name, another secret, scopes, models or limits. */
  changed: z.array(z.string()),
});
export type ReloadResponse = z.infer<typeof ReloadResponseSchema>;

/** Token names added, removed and changed from `before` to `after`. Pure. */
export function tokenChanges(
  before: readonly ResolvedToken[],
  after: readonly ResolvedToken[],
): { added: string[]; removed: string[]; changed: string[] } {
  const old = new Map(before.map((t) => [t.name, t]));
  const now = new Map(after.map((t) => [t.name, t]));
  const same = (a: ResolvedToken, b: ResolvedToken) =>
    JSON.stringify([a.token, a.scopes, a.models, a.limits]) ===
    JSON.stringify([b.token, b.scopes, b.models, b.limits]);
  return {
    added: [...now.keys()].filter((n) => !old.has(n)),
    removed: [...old.keys()].filter((n) => !now.has(n)),
    changed: [...now].filter(([n, t]) => old.has(n) && !same(old.get(n)!, t)).map(([n]) => n),
  };
}

/**
 * The tokens the API accepts: the configured ones plus the cluster's node token (read scope: peers'
 * store downloads and fan-outs), or none at all (anonymous) when none is configured.
 */
export function withNodeToken(tokens: readonly ApiToken[], nodeToken: string): ApiToken[] {
  return tokens.length === 0
    ? []
    : [...tokens, { name: "cluster-node", token: nodeToken, scopes: ["read"] }];
}

export interface TokenReloaderOptions {
  /** The file the node started from; without one there is nothing to reload. */
  readonly file: string | undefined;
  /** The set the API's auth checks (TokenSet in the gateway). */
  readonly set: TokenSet;
  /** The tokens in force at start. */
  readonly initial: readonly ResolvedToken[];
  /** The cluster's node token (read scope), in force whenever any token is. */
  readonly nodeToken: string;
  readonly name: string;
  readonly log: Logger;
}

export class TokenReloader {
  private current: readonly ResolvedToken[];
  /** One reload at a time: a second waits for the first. */

  constructor(private readonly o: TokenReloaderOptions) {
    this.current = o.initial;
  }

  /** The file is read and the set swapped synchronously: two reloads never interleave. */
  async reload(): Promise<ReloadResponse> {
    if (!this.o.file)
      throw new ServiceError(
        "conflict",
        "this node started without a config file (--config or SERVICE_CONFIG): nothing to reload",
      );
    let tokens: readonly ResolvedToken[];
    try {
      tokens = loadConfig({ file: this.o.file }).auth.tokens;
    } catch (e) {
      const why = e instanceof ConfigError ? e.message : String(e);
      this.o.log.warn({ file: this.o.file, err: why }, "reload refused; the tokens in force stay");
      throw new ServiceError("invalid_request", `reload refused, nothing changed: ${why}`);
    }
    const diff = tokenChanges(this.current, tokens);
    this.o.set.set(withNodeToken(tokens, this.o.nodeToken));
    this.current = tokens;
    // Names only: a token is never logged.
    this.o.log.info({ file: this.o.file, ...diff }, "API tokens reloaded");
    return { ok: true, node: this.o.name, tokens: tokens.map((t) => t.name), ...diff };
  }
}

/** POST /admin/reload (admin scope): the reload as SIGHUP does it, with what changed. */
export function reloadRoutes(app: Hono, reloader: TokenReloader): void {
  app.post("/admin/reload", async (c) => c.json(await reloader.reload()));
}
