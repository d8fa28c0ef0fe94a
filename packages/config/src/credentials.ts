// Every credential a node uses inside the cluster, derived from the one cluster secret by HMAC-SHA256
// with a purpose label, so a leaked derived key (a route URL in a log, an engine key) never reveals the secret.
import { createHmac } from "node:crypto";

export interface ClusterCredentials {
  /** User and password of this node's services on its own nats-server (client port). */
  readonly busClient: { readonly user: string; readonly password: string };
  /** User and password nats-servers present to each other on the route port. */
  readonly busRoute: { readonly user: string; readonly password: string };
  /** Bearer token nodes present to each other's HTTP API (store downloads, link probes). */
  readonly nodeToken: string;
  /** API key of the llama-server of one instance: every node's gateway can compute it. */
  engineKey(instanceId: string): string;
}

export function deriveKey(secret: string, purpose: string): string {
  return createHmac("sha256", secret).update(`inference-cluster/${purpose}`).digest("hex");
}

export function clusterCredentials(secret: string): ClusterCredentials {
  return {
    busClient: { user: "ic-node", password: deriveKey(secret, "bus-client") },
    busRoute: { user: "ic-route", password: deriveKey(secret, "bus-route") },
    nodeToken: `icn_${deriveKey(secret, "http-node")}`,
    engineKey: (instanceId) => `ice_${deriveKey(secret, `engine/${instanceId}`)}`,
  };
}
