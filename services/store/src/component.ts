// The store's part of every node as a component: the storage report and the purge broadcast over
// this node's staged copies, and the pull routes every node serves (the store host does the work).
import type { Bus } from "@ic/bus";
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import { servePurge, storeRoutes } from "./staging/routes.ts";
import type { StoreRouteOptions } from "./staging/routes.ts";
import { pullRoutes } from "./store-host/routes.ts";

export function storeComponent(
  o: StoreRouteOptions & { readonly bus: Pick<Bus, "respond" | "requestMany" | "request"> },
): Component {
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
  };
}
