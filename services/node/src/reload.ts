// Reloading the API tokens, the cluster secret and the TLS files while the node runs (SIGHUP, POST
// /admin/reload): the config file is read and checked again exactly as at start; its `auth.tokens`
// replace the ones in force at once, between two requests; its `cluster.secret` and
// `cluster.rotation_secret` become the node token it presents and the ones it accepts; renewed
// certificate, key or CA files (new contents, or other paths) go into force for the API's new
// connections and this node's HTTPS clients. A token rotation without downtime: list the new token
// beside the old one and reload every node, move the clients, then drop the old one and reload
// again; the cluster secret rotates in three such rounds (docs/security.md). A file that does not
// load changes nothing (the answer says why). Only these keys are applied; the other keys, and
// turning TLS on or off, still need a restart (the answer names none of them: it does not diff the
// rest of the file). Running engines and the bus routes keep the certificate they started with
// until the node restarts (same CA: still valid).
import type { Hono } from "hono";
import { z } from "zod";
import { ConfigError, loadConfig } from "@ic/config";
import type { ClusterSecret, Config, ResolvedTls, ResolvedToken } from "@ic/config";
import type { ApiToken, TokenSet } from "@ic/http";
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
  /**
   * The TLS files: `reloaded` (a certificate, key or CA changed and is in force now), `unchanged`,
   * or `off` (the node runs without TLS).
   */
  tls: z.enum(["reloaded", "unchanged", "off"]),
  /**
   * The cluster secret this node presents: `rotated` (the file names another one, in force now) or
   * `unchanged`; and whether a rotation window is open (`cluster.rotation_secret` accepted too).
   */
  cluster_secret: z.enum(["rotated", "unchanged"]),
  rotation_window: z.enum(["open", "closed"]),
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
 * The tokens the API accepts: the configured ones plus the cluster's node tokens (read scope: peers'
 * store downloads and fan-outs; two during a rotation window), or none at all (anonymous) when none
 * is configured.
 */
export function withNodeToken(
  tokens: readonly ApiToken[],
  nodeTokens: readonly string[],
): ApiToken[] {
  return tokens.length === 0
    ? []
    : [
        ...tokens,
        ...nodeTokens.map((token) => ({ name: "cluster-node", token, scopes: ["read" as const] })),
      ];
}

export interface ConfigReloaderOptions {
  /** The file the node started from; without one there is nothing to reload. */
  readonly file: string | undefined;
  /** The set the API's auth checks (TokenSet in the gateway). */
  readonly set: TokenSet;
  /** The tokens in force at start. */
  readonly initial: readonly ResolvedToken[];
  /** The cluster secret in force (node token presented and accepted, heartbeat proof). */
  readonly secret: ClusterSecret;
  /** The TLS files in force at start (null: no TLS), and what puts renewed ones in force (synchronous). */
  readonly tls: { readonly initial: ResolvedTls | null; apply(next: ResolvedTls): void };
  readonly name: string;
  readonly log: Logger;
}

/** Whether two loads of the TLS files differ (paths or contents). Pure. */
export function tlsChanged(a: ResolvedTls, b: ResolvedTls): boolean {
  const keys = ["ca_file", "cert_file", "key_file", "ca", "cert", "key"] as const;
  return keys.some((k) => a[k] !== b[k]);
}

export class ConfigReloader {
  private current: readonly ResolvedToken[];
  private currentTls: ResolvedTls | null;

  constructor(private readonly o: ConfigReloaderOptions) {
    this.current = o.initial;
    this.currentTls = o.tls.initial;
  }

  /** The file is read and the set swapped synchronously: two reloads never interleave. */
  async reload(): Promise<ReloadResponse> {
    if (!this.o.file)
      throw new ServiceError(
        "conflict",
        "this node started without a config file (--config or SERVICE_CONFIG): nothing to reload",
      );
    let tokens: readonly ResolvedToken[];
    let tls: ResolvedTls | null;
    let cluster: Config["cluster"];
    const refuse = (why: string) => {
      this.o.log.warn({ file: this.o.file, err: why }, "reload refused; what is in force stays");
      return new ServiceError("invalid_request", `reload refused, nothing changed: ${why}`);
    };
    try {
      ({
        auth: { tokens },
        tls,
        cluster,
      } = loadConfig({ file: this.o.file }));
    } catch (e) {
      throw refuse(e instanceof ConfigError ? e.message : String(e));
    }
    if ((tls === null) !== (this.currentTls === null))
      throw refuse(`tls: turning TLS ${tls ? "on" : "off"} needs a restart of the node`);
    // A lone node without a configured secret makes one at each load: it keeps its own. Without TLS
    // the secret is also the bus routes' password, which a running nats-server cannot change.
    const secret = cluster.secret_generated ? undefined : cluster.secret;
    if (secret !== undefined && !this.o.secret.presents(secret) && !tls)
      throw refuse(
        "cluster.secret: without TLS the cluster secret is also the bus routes' password, which a " +
          "running node cannot change; restart every node with the new secret (or set up TLS first)",
      );
    const diff = tokenChanges(this.current, tokens);
    const tlsState = !tls ? "off" : tlsChanged(this.currentTls!, tls) ? "reloaded" : "unchanged";
    const secretState = this.o.secret.set(secret, cluster.rotation_secret);
    this.o.set.set(withNodeToken(tokens, this.o.secret.acceptedTokens()));
    this.current = tokens;
    if (tls && tlsState === "reloaded") {
      this.o.tls.apply(tls);
      this.currentTls = tls;
    }
    // Names only: a token or secret is never logged.
    this.o.log.info(
      {
        file: this.o.file,
        ...diff,
        tls: tlsState,
        cluster_secret: secretState.secret,
        rotation_window: secretState.window,
      },
      "config reloaded",
    );
    return {
      ok: true,
      node: this.o.name,
      tokens: tokens.map((t) => t.name),
      ...diff,
      tls: tlsState,
      cluster_secret: secretState.secret,
      rotation_window: secretState.window,
    };
  }
}

/** POST /admin/reload (admin scope): the reload as SIGHUP does it, with what changed. */
export function reloadRoutes(app: Hono, reloader: ConfigReloader): void {
  app.post("/admin/reload", async (c) => c.json(await reloader.reload()));
}
