// Tracing as a node component: built from the `tracing` section; it observes each chat request of this
// node's gateway and serves /v1/tracing and /v1/traces (the cluster views fan out to the peers).
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import type { PeerApis } from "@ic/protocol";
import { tracingRoutes } from "./routes.ts";
import { Tracing } from "./tracing.ts";
import type { TracingConfig } from "./tracing.ts";

export interface TracingComponent extends Component {
  readonly tracing: Tracing;
}

export function tracingComponent(
  section: TracingConfig,
  o: { readonly log: Logger; readonly node: string; readonly peers: PeerApis },
): TracingComponent {
  const tracing = new Tracing({
    config: section,
    log: o.log.child({ component: "tracing" }),
    node: o.node,
  });
  const { list, ...ask } = o.peers;
  return {
    name: "tracing",
    tracing,
    start: () => tracing.start(),
    stop: () => tracing.stop(),
    routes: () =>
      routesOf((app) =>
        tracingRoutes(app, { tracing, node: o.node, fanOut: { ...ask, peers: () => list() } }),
      ),
  };
}
