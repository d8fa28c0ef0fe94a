// nodeHealth entries for the node's security posture: bus authentication failures reported by the
// embedded nats-server (ours refused, or strangers refused) and an API that runs without tokens.
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
}

/** Collects failures; logs the first of each kind and remote once per window (retries are every second). */
export class SecurityHealth {
  private readonly seen = new Map<string, AuthFailure & { count: number }>();

  constructor(private readonly o: SecurityHealthOptions) {}

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
    if (f.direction === "route-refused-by-peer")
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
   */
  entries(joinedPeers = 0): HealthEntry[] {
    const now = this.o.now();
    const window = this.o.windowMs ?? 60_000;
    const live = [...this.seen.values()].filter((f) => now - f.at <= window);
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
    const rejected = live.filter((f) => f.direction !== "route-refused-by-peer");
    if (rejected.length > 0)
      out.push({
        code: "bus_auth_failures",
        severity: "warn",
        message:
          `declared: only holders of the cluster secret use the bus; observed: ${rejected.reduce((s, f) => s + f.count, 0)} ` +
          `refused login(s) from ${[...new Set(rejected.map((f) => f.remote.replace(/:\d+$/, "")))].join(", ")}`,
        remediation:
          "if that address is one of your nodes, give it the cluster secret; otherwise find out who it is and keep the cluster network private",
      });
    if (this.o.anonymousApi)
      out.push({
        code: "anonymous_api",
        severity: "warn",
        message: `declared: auth.allow_anonymous; observed: the API listens on ${this.o.anonymousApi.bind} and anyone who reaches it can place, delete and restart`,
        remediation:
          "add auth.tokens with admin, read and inference scopes and remove auth.allow_anonymous (docs/operations.md)",
      });
    return out;
  }
}
