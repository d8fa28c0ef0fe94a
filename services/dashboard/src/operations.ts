// The dashboard's operations in the OpenAPI document: its static files and the settings editor.
import { jsonAnswer } from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";
import { SettingsEditSchema, SettingsViewSchema } from "./settings.ts";
import { DASHBOARD_ASSETS } from "./routes.ts";

export const DASHBOARD_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/admin/settings",
    summary: "this node's staging settings: its config file's sections and what it applies now",
    scope: "read",
    responses: { "200": jsonAnswer("the settings", SettingsViewSchema) },
  },
  {
    method: "put",
    path: "/admin/settings",
    summary:
      "edit the staging settings: validated, written to the YAML file (comments kept), applied",
    scope: "admin",
    body: SettingsEditSchema,
    responses: { "200": jsonAnswer("the settings after the edit", SettingsViewSchema) },
  },
  ...Object.entries(DASHBOARD_ASSETS).map(([path, a]): ApiOperation => ({
    method: "get",
    path,
    summary: path === "/" ? "the dashboard page" : `the dashboard's ${a.file}`,
    scope: "public",
    responses: { "200": { description: a.file, contentType: a.type.split(";")[0]! } },
  })),
];
