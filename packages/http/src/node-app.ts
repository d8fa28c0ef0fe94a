// The node's one HTTP app, neutral: every route's errors leave in one envelope (toResponse), an
// unknown route is a typed 404, and the API's tokens and scopes stand in front of every route. It
// serves no route of its own: each component brings its own hono app (Component.routes), mounted
// here in the order given, which is the order routes are matched in.
import { Hono } from "hono";
import { ServiceError } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { authMiddleware } from "./auth.ts";
import type { AuthOptions } from "./auth.ts";
import type { Component } from "./component.ts";
import { toResponse } from "./errors.ts";

export interface NodeAppOptions {
  /** Bearer tokens; absent or empty: anonymous (a loopback node, or auth.allow_anonymous). */
  readonly auth?: AuthOptions | undefined;
  /** Where an unexpected error is logged. */
  readonly log: Logger;
}

/** The app with each component's routes mounted (absent ones, and those without routes, skipped). */
export function createNodeApp(
  opts: NodeAppOptions,
  components: readonly (Pick<Component, "routes"> | undefined)[],
): Hono {
  const { auth = { tokens: [] }, log } = opts;
  const app = new Hono();
  app.onError((err, c) => toResponse(c, err, log));
  app.notFound((c) =>
    toResponse(c, new ServiceError("not_found", `no route ${c.req.method} ${c.req.path}`), log),
  );
  app.use("*", authMiddleware(auth));
  for (const c of components) {
    const routes = c?.routes?.();
    if (routes) app.route("/", routes);
  }
  return app;
}

/** A component's routes as an app of their own, registered by `register`. */
export function routesOf(register: (app: Hono) => void): Hono {
  const app = new Hono();
  register(app);
  return app;
}
