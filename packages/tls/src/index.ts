// The cluster CA as this process trusts it. Nodes talk to each other (peer fan-outs, store downloads,
// the cluster watch, link pings) and to engines over HTTPS, with certificates the cluster CA signed;
// `trustClusterCa` adds that CA to what this process's fetch and https requests accept, beside the
// public roots, so the model hub stays reachable. A process trusts one cluster CA at a time.
import { Agent as HttpsAgent } from "node:https";
import { createSecureContext, rootCertificates } from "node:tls";
import type { SecureContext } from "node:tls";
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from "undici";

// One TLS context holds what this process trusts, built once per trust change and shared by every
// client connection. Giving each request the CA list instead (`ca: [...]`, about 150 PEM strings)
// cost a busy gateway a fifth to a quarter of its CPU: node:https folds the whole list into each
// request's agent key, and every new connection parsed it into a fresh context (bench/cluster-chat).
let context: SecureContext | undefined;
let agent: HttpsAgent | undefined;

/** Makes fetch (undici's global dispatcher) and `clusterHttpsAgent` accept the cluster CA's certificates. */
export function trustClusterCa(caPem: string): void {
  context = createSecureContext({ ca: [...rootCertificates, caPem] });
  setGlobalDispatcher(clientPool());
  agent?.destroy();
  agent = undefined;
}

/**
 * Hangs up this process's idle fetch connections: a fresh pool (trusting what this process trusts)
 * takes the next requests, and the old one closes once its requests in flight have ended. A process
 * about to stop a node calls it first, so the node's drain does not wait on this process's idle
 * keep-alive connections (http-quiesce.ts waits up to the keep-alive timeout for each).
 */
export function renewClientPool(): void {
  const old = getGlobalDispatcher();
  setGlobalDispatcher(clientPool());
  old.close().catch(() => undefined);
}

/** A fetch connection pool (undici) that trusts what this process trusts: fetch's own, or a client's. */
export function clientPool(): Agent {
  return new Agent({ connect: trustedTls() });
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
    ...trustedTls(),
  });
  return agent;
}

/** What a node:https request without an agent must be given to trust the cluster CA (nothing
 * before `trustClusterCa`: Node's defaults). */
export function trustedTls(): { secureContext?: SecureContext } {
  return context ? { secureContext: context } : {};
}

/** Options of a node:https server with this node's certificate (TLS 1.2 and newer). */
export function serverTlsOptions(t: { readonly cert: string; readonly key: string }): {
  cert: string;
  key: string;
  minVersion: "TLSv1.2";
} {
  return { cert: t.cert, key: t.key, minVersion: "TLSv1.2" };
}
