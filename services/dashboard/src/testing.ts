// Test helpers of the dashboard's unit tests: a config file in a temp directory with its editor, and
// the dashboard routes behind the gateway's edge (error envelope and auth) as node.ts wires them.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { authMiddleware, toResponse } from "@ic/http";
import type { ApiToken } from "@ic/http";
import { silentLogger } from "@ic/log";
import { LiveStagingSettings } from "@ic/staging";
import { dashboardRoutes } from "./routes.ts";
import { SettingsFile } from "./settings.ts";
import { GiB } from "@ic/protocol";

/** `text` as node n1's config file, live settings at the defaults, and its editor. */
export function settingsFixture(text: string, nodeName = "n1") {
  const dir = mkdtempSync(join(tmpdir(), "ic-settings-"));
  const file = join(dir, "config.yaml");
  writeFileSync(file, text, { mode: 0o600 });
  const live = new LiveStagingSettings({
    cleanupOnDeactivate: true,
    keepRecentBytes: 40 * GiB,
    headroomBytes: 10 * GiB,
  });
  const settings = new SettingsFile({ file, nodeName, live, env: {} });
  return { dir, file, live, settings };
}

/** The dashboard routes over `fixture`'s editor, behind the auth edge with `tokens` (none: anonymous). */
export function dashboardApp(
  fixture: { settings: SettingsFile },
  tokens: readonly ApiToken[] = [],
): Hono {
  const log = silentLogger();
  const app = new Hono();
  app.onError((err, c) => toResponse(c, err, log));
  app.use("*", authMiddleware({ tokens }));
  dashboardRoutes(app, { log, settings: fixture.settings });
  app.notFound((c) => c.json({ error: { code: "not_found" } }, 404));
  return app;
}
