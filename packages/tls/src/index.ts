// The cluster CA as this process trusts it. Nodes talk to each other (peer fan-outs, store downloads,
// the cluster watch, link pings) and to engines over HTTPS, with certificates the cluster CA signed;
// `trustClusterCa` adds that CA to what this process's fetch and https requests accept, beside the
// public roots, so the model hub stays reachable. A process trusts one cluster CA at a time.
import { Agent as HttpsAgent } from "node:https";
import { rootCertificates } from "node:tls";
import { Agent, setGlobalDispatcher } from "undici";

let trusted: readonly string[] | undefined;
let agent: HttpsAgent | undefined;

/** Makes fetch (undici's global dispatcher) and `clusterHttpsAgent` accept the cluster CA's certificates. */
export function trustClusterCa(caPem: string): void {
  trusted = [...rootCertificates, caPem];
  setGlobalDispatcher(new Agent({ connect: { ca: [...trusted] } }));
  agent?.destroy();
  agent = undefined;
}

/**
 * The keep-alive agent for node:https requests (the gateway's relay to engines): Node's defaults plus
 * the cluster CA once `trustClusterCa` ran. Created on first use, again after the trust changed.
 */
export function clusterHttpsAgent(): HttpsAgent {
  agent ??= new HttpsAgent({
    keepAlive: true,
    maxSockets: 256,
    keepAliveMsecs: 10_000,
    ...(trusted ? { ca: [...trusted] } : {}),
  });
  return agent;
}

/** The CAs a node:https request without an agent must be given (undefined: Node's defaults). */
export function trustedCas(): string[] | undefined {
  return trusted ? [...trusted] : undefined;
}

/** Options of a node:https server with this node's certificate (TLS 1.2 and newer). */
export function serverTlsOptions(t: { readonly cert: string; readonly key: string }): {
  cert: string;
  key: string;
  minVersion: "TLSv1.2";
} {
  return { cert: t.cert, key: t.key, minVersion: "TLSv1.2" };
}
