// nodeHealth entries for the node's security posture: bus authentication failures reported by the
// embedded nats-server (ours refused, strangers refused, TLS handshakes failed), peers that present
// another cluster secret, an API that runs without tokens, and a node that listens beyond loopback
// without TLS.
import type { AuthFailure } from "@ic/bus";
import type { Logger } from "@ic/log";
import type { HealthEntry } from "@ic/protocol";

export interface SecurityHealthOptions {
  readonly log: Logger;
  readonly now: () => number;
  /** A failure kind stays reported this long after it was last seen. */
  readonly windowMs?: number;
  /** The API listens beyond loopback without tokens (auth.allow_anonymous). */
  readonly anonymousApi?: { readonly bind: string } | undefined;
  /** The node listens beyond loopback without TLS (tls.allow_plaintext). */
  readonly plaintext?: { readonly bind: string } | undefined;
}

/** Collects failures; logs the first of each kind and remote once per window (retries are every second). */
export class SecurityHealth {
  private readonly seen = new Map<string, SeenFailure>();
  private engineWithoutTls: string | undefined;

  constructor(private readonly o: SecurityHealthOptions) {}

  /**
   * What the engine's TLS probe found on a node with certificates: when llama-server cannot serve
   * HTTPS, its traffic (prompts, answers, the engine key) crosses the network in clear text.
   */
  engineTls(result: { readonly supported: boolean; readonly evidence: string }): void {
    this.engineWithoutTls = result.supported ? undefined : result.evidence;
    if (!result.supported)
      this.o.log.error(
        { evidence: result.evidence },
        "the node has TLS certificates but llama-server cannot serve HTTPS: engine traffic is in clear text",
      );
  }

  record(f: AuthFailure): void {
    const key = `${f.direction} ${f.remote}`;
    const prev = this.seen.get(key);
    const window = this.o.windowMs ?? 60_000;
    if (prev && f.at - prev.at <= window) {
      this.seen.set(key, { ...f, count: prev.count + 1 });
      return;
    }
    // A new window for this kind and remote. Refusals by peers are one condition (a wrong secret):
    // logged once per window, whatever the peer.
    const quiet =
      f.direction === "route-refused-by-peer" &&
      [...this.seen.values()].some(
        (x) => x.direction === "route-refused-by-peer" && f.at - x.at <= window,
      );
    this.seen.set(key, { ...f, count: 1 });
    if (quiet) return;
    if (f.direction === "route-tls-failed")
      this.o.log.warn(
        { remote: f.remote, kind: f.direction },
        `a bus route with ${f.remote} failed its TLS handshake: one side's certificate is not signed by the other's cluster CA`,
      );
    else if (f.direction === "route-refused-by-peer")
      this.o.log.error(
        { remote: f.remote },
        `the peer at ${f.remote} refused this node's cluster secret; this node cannot join it ` +
          "(set the same cluster.secret_file on every node)",
      );
    else
      this.o.log.warn(
        { remote: f.remote, kind: f.direction },
        `refused ${f.direction === "route-rejected" ? "a route" : "a bus client"} from ${f.remote}: wrong or missing cluster secret`,
      );
  }

  /**
   * `joinedPeers`: how many other nodes this node is in a session with. A refusal is symmetric (both
   * sides of a route with different secrets see it), so it means this node has the wrong secret
   * only when nobody accepts it; a node in a cluster that one peer refuses is reporting that peer.
   * `otherSecret`: names of live peers whose heartbeats prove a secret this node does not accept
   * (with TLS, routes authenticate by certificate, so such a peer is on the bus).
   */
  entries(joinedPeers = 0, otherSecret: readonly string[] = []): HealthEntry[] {
    const now = this.o.now();
    const window = this.o.windowMs ?? 60_000;
    const live = [...this.seen.values()].filter((f) => now - f.at <= window);
    return [
      ...secretEntries(joinedPeers, otherSecret),
      ...busEntries(live, joinedPeers),
      ...this.exposureEntries(),
    ];
  }

  /** What this node exposes: an anonymous API, engines or a network without TLS. */
  private exposureEntries(): HealthEntry[] {
    const out: HealthEntry[] = [];
    if (this.o.anonymousApi)
      out.push({
        code: "anonymous_api",
        severity: "warn",
        message: `declared: auth.allow_anonymous; observed: the API listens on ${this.o.anonymousApi.bind} and anyone who reaches it can place, delete and restart`,
        remediation:
          "add auth.tokens with admin, read and inference scopes and remove auth.allow_anonymous (docs/operations.md)",
      });
    if (this.engineWithoutTls !== undefined)
      out.push({
        code: "engine_plaintext",
        severity: "error",
        message: `declared: TLS between nodes (tls.cert_file); observed: llama-server cannot serve HTTPS (${this.engineWithoutTls}), so gateways reach this node's engines in clear text`,
        remediation:
          "rebuild the engine with OpenSSL (apt-get install libssl-dev, then node scripts/build-engine.mjs), or set engine.server_bin to a llama-server built with it",
      });
    if (this.o.plaintext)
      out.push({
        code: "plaintext_network",
        severity: "warn",
        message: `declared: tls.allow_plaintext; observed: the API and the bus routes listen on ${this.o.plaintext.bind} without TLS, so tokens, prompts and answers cross the network in clear text`,
        remediation:
          "make a cluster CA and node certificates (node scripts/make-secrets.mjs <dir> --node <name>=<host>), set tls.ca_file, tls.cert_file and tls.key_file, and remove tls.allow_plaintext",
      });
    return out;
  }
}

/** A kind of failure from one address, how often, and when last. */
type SeenFailure = AuthFailure & { count: number };

/** Peers presenting a cluster secret this node does not accept. */
function secretEntries(joinedPeers: number, otherSecret: readonly string[]): HealthEntry[] {
  const out: HealthEntry[] = [];
  // The odd one out (no peer shares its secret) is in error and stops being a placement
  // candidate; the others only name it, so one stray node does not stop placement everywhere.
  const alone = otherSecret.length >= joinedPeers;
  if (otherSecret.length > 0)
    out.push({
      code: "cluster_secret_mismatch",
      severity: alone ? "error" : "warn",
      message:
        "declared: every node presents the cluster secret (or the other one of an open rotation window); " +
        `observed: ${otherSecret.join(", ")} present(s) a secret this node does not accept, so each side ` +
        "refuses the other's node token (store downloads and cluster-wide views between them fail)" +
        (alone ? "; no peer shares this node's secret" : ""),
      remediation:
        "give every node the same cluster.secret_file and cluster.rotation_secret_file and reload each " +
        "(POST /admin/reload or SIGHUP); during a rotation, close the window only once every node presents the new secret",
    });
  return out;
}

/** The bus's failed logins and handshakes, as seen by this node's nats-server. */
function busEntries(live: readonly SeenFailure[], joinedPeers: number): HealthEntry[] {
  const out: HealthEntry[] = [];
  const refused = live.filter((f) => f.direction === "route-refused-by-peer");
  if (refused.length > 0 && joinedPeers > 0)
    out.push({
      code: "bus_auth_failures",
      severity: "warn",
      message:
        `declared: every peer holds the cluster secret; observed: ${refused.map((f) => f.remote).join(", ")} ` +
        `refuse(s) this node's routes while ${joinedPeers} other node(s) accept them: that peer holds another secret`,
      remediation:
        "give the refusing node the cluster's secret file and restart it (it reports cluster_secret_rejected)",
    });
  else if (refused.length > 0)
    out.push({
      code: "cluster_secret_rejected",
      severity: "error",
      message:
        `declared: member of the cluster at ${refused.map((f) => f.remote).join(", ")}; ` +
        "observed: those peers refuse this node's cluster secret, so it runs alone",
      remediation:
        "give this node the cluster's secret (cluster.secret_file, mode 0600, same content on every node) and restart it",
    });
  const tls = live.filter((f) => f.direction === "route-tls-failed");
  if (tls.length > 0)
    out.push({
      code: joinedPeers > 0 ? "bus_tls_failures" : "cluster_tls_rejected",
      severity: joinedPeers > 0 ? "warn" : "error",
      message:
        `declared: bus routes only between certificates of the cluster CA; observed: ${tls.reduce((s, f) => s + f.count, 0)} ` +
        `failed TLS handshake(s) with ${addresses(tls)}` +
        (joinedPeers > 0 ? "" : ", and this node runs alone"),
      remediation:
        joinedPeers > 0
          ? "if that address is one of your nodes, give it a certificate from the cluster CA (scripts/make-secrets.mjs --node); otherwise find out who it is"
          : "give this node the cluster's ca.crt and a certificate that CA signed for node.host (tls.ca_file, tls.cert_file, tls.key_file) and restart it",
    });
  const rejected = live.filter(
    (f) => f.direction !== "route-refused-by-peer" && f.direction !== "route-tls-failed",
  );
  if (rejected.length > 0)
    out.push({
      code: "bus_auth_failures",
      severity: "warn",
      message:
        `declared: only holders of the cluster secret use the bus; observed: ${rejected.reduce((s, f) => s + f.count, 0)} ` +
        `refused login(s) from ${addresses(rejected)}`,
      remediation:
        "if that address is one of your nodes, give it the cluster secret; otherwise find out who it is and keep the cluster network private",
    });
  return out;
}

/** The distinct addresses (ports dropped) failures came from, comma-separated. */
function addresses(failures: readonly AuthFailure[]): string {
  return [...new Set(failures.map((f) => f.remote.replace(/:\d+$/, "")))].join(", ");
}
