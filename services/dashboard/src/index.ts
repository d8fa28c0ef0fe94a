// Front door of the dashboard: its routes (page, settings editor) and the settings file editor.
export { DASHBOARD_ASSETS, DASHBOARD_CSP, dashboardRoutes } from "./routes.ts";
export type { DashboardOptions } from "./routes.ts";
export {
  SettingsEditSchema,
  SettingsFile,
  SettingsViewSchema,
  editStagingYaml,
} from "./settings.ts";
export type { SettingsEdit, SettingsView, StagingValues } from "./settings.ts";
export { DASHBOARD_OPERATIONS } from "./operations.ts";
export { dashboardComponent } from "./component.ts";
