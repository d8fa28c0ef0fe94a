// The credentials a node derives from the cluster secret by HMAC-SHA256 with a purpose label, so a
// leaked derived key (a route URL in a log, a node token) never reveals the secret. Engine keys are
// not among them: each node makes its own at start and tells the others in its heartbeats, so a
// rotation of the cluster secret leaves running engines reachable (docs/decisions.md).
import { createHmac, timingSafeEqual } from "node:crypto";

export interface ClusterCredentials {
  /** User and password of this node's services on its own nats-server (client port). */
  readonly busClient: { readonly user: string; readonly password: string };
  /** User and password nats-servers present to each other on the route port. */
  readonly busRoute: { readonly user: string; readonly password: string };
  /** Bearer token nodes present to each other's HTTP API (store downloads, link probes). */
  readonly nodeToken: string;
}

export function deriveKey(secret: string, purpose: string): string {
  return createHmac("sha256", secret).update(`inference-cluster/${purpose}`).digest("hex");
}

export function clusterCredentials(secret: string): ClusterCredentials {
  return {
    busClient: { user: "ic-node", password: deriveKey(secret, "bus-client") },
    busRoute: { user: "ic-route", password: deriveKey(secret, "bus-route") },
    nodeToken: `icn_${deriveKey(secret, "http-node")}`,
  };
}

/** What a reload changed: the secret presented, and whether a rotation window is open now. */
export interface SecretChange {
  readonly secret: "unchanged" | "rotated";
  readonly window: "open" | "closed";
}

interface Held {
  readonly secret: string;
  readonly token: string;
  readonly proofKey: string;
}

function hold(secret: string): Held {
  return {
    secret,
    token: clusterCredentials(secret).nodeToken,
    proofKey: deriveKey(secret, "membership"),
  };
}

/**
 * The cluster secret a running node presents, and the other secret of an open rotation window
 * (`cluster.rotation_secret`), which it accepts but never presents. Both change together on a
 * reload. What depends on it reads it at each use: the node token this node sends, the node tokens
 * its API accepts, and the proof in its heartbeats that peers check (so a node left behind by a
 * rotation is reported, not just refused). The bus client password stays the one the node started
 * with: only the node's own services on loopback use it, and its nats-server cannot change it.
 */
export class ClusterSecret {
  private held: Held;
  private other: Held | undefined;

  constructor(secret: string, rotation?: string) {
    this.held = hold(secret);
    this.other = rotation === undefined ? undefined : hold(rotation);
  }

  /** The node token this node presents to its peers' APIs. */
  token(): string {
    return this.held.token;
  }

  /** The node tokens this node's API accepts: its own, and the other one while a window is open. */
  acceptedTokens(): string[] {
    return this.other ? [this.held.token, this.other.token] : [this.held.token];
  }

  get windowOpen(): boolean {
    return this.other !== undefined;
  }

  /** What a heartbeat of `peerKey` carries to show which secret its sender presents. */
  proof(peerKey: string): string {
    return proofOf(this.held.proofKey, peerKey);
  }

  /** Whether `proof` (from the heartbeat of `peerKey`) comes from a secret this node accepts. */
  accepts(peerKey: string, proof: string): boolean {
    return [this.held, this.other].some(
      (h) => h !== undefined && safeEqual(proofOf(h.proofKey, peerKey), proof),
    );
  }

  /** Whether `secret` is the one this node presents now. */
  presents(secret: string): boolean {
    return secret === this.held.secret;
  }

  /** Puts a reloaded pair in force at once (`secret` undefined: the one presented stays). */
  set(secret: string | undefined, rotation: string | undefined): SecretChange {
    const rotated = secret !== undefined && secret !== this.held.secret;
    if (rotated) this.held = hold(secret);
    if (rotation !== this.other?.secret)
      this.other = rotation === undefined ? undefined : hold(rotation);
    return { secret: rotated ? "rotated" : "unchanged", window: this.other ? "open" : "closed" };
  }
}

function proofOf(proofKey: string, peerKey: string): string {
  return createHmac("sha256", proofKey).update(peerKey).digest("base64url").slice(0, 32);
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
