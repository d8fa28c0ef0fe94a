// The store's part of every node as a component: the storage report and the purge broadcast over
// this node's staged copies, its copies served to peers, the pull routes every node serves (the
// store host does the work), and the staging metrics (staging/metrics.ts).
import type { Bus } from "@ic/bus";
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import { stagingMetrics } from "./staging/metrics.ts";
import { servePurge, storeRoutes } from "./staging/routes.ts";
import type { PeerServeStats, StoreRouteOptions } from "./staging/routes.ts";
import { pullRoutes } from "./store-host/routes.ts";

export function storeComponent(
  opts: Omit<StoreRouteOptions, "peerServe"> & {
    readonly bus: Pick<Bus, "respond" | "requestMany" | "request">;
  },
): Component {
  // What this node serves of its staged copies to peers: the peer routes count, the metrics read.
  const peerServe: PeerServeStats = { bytes_served: 0, range_requests: 0 };
  const o = { ...opts, peerServe };
  let unserve: (() => void) | undefined;
  return {
    name: "store",
    start: () => void (unserve = servePurge(o)),
    stop: () => unserve?.(),
    routes: () =>
      routesOf((app) => {
        storeRoutes(app, o);
        pullRoutes(app, o);
      }),
    metrics: (registry) => stagingMetrics(registry, { staging: () => o.stager.staging, peerServe }),
  };
}
