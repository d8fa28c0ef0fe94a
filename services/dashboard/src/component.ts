// The dashboard as a node component: its static page and the staging settings editor, which writes
// the node's config file and replaces the settings in force.
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import { dashboardRoutes } from "./routes.ts";
import { SettingsFile } from "./settings.ts";
import type { SettingsFileOptions } from "./settings.ts";

export function dashboardComponent(o: SettingsFileOptions & { readonly log: Logger }): Component {
  const { log, ...file } = o;
  const settings = new SettingsFile(file);
  return {
    name: "dashboard",
    routes: () => routesOf((app) => dashboardRoutes(app, { log, settings })),
  };
}
