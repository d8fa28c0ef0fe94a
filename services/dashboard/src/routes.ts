// The dashboard's HTTP side: the static page at / (HTML, ES modules and style from public/, no
// build step, served with a strict Content-Security-Policy) and GET/PUT /admin/settings (the staging
// settings editor). The page holds no data: everything it shows comes from the API with a token.
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Hono } from "hono";
import { parseJson } from "@ic/http";
import type { Logger } from "@ic/log";
import { SettingsEditSchema } from "./settings.ts";
import type { SettingsFile } from "./settings.ts";

const PUBLIC_DIR = fileURLToPath(new URL("../public/", import.meta.url));

/**
 * Path -> file under public/ and its media type; nothing else is served. The page's script is
 * native ES modules (app.js the entry, importing the others): every .js file directly in public/,
 * listed once at startup (the files ship with the code).
 */
export const DASHBOARD_ASSETS: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  ...Object.fromEntries(
    readdirSync(PUBLIC_DIR, { withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith(".js"))
      .map((e) => e.name)
      .sort()
      .map((f) => [`/dashboard/${f}`, { file: f, type: "text/javascript; charset=utf-8" }]),
  ),
  "/dashboard/style.css": { file: "style.css", type: "text/css; charset=utf-8" },
  "/favicon.ico": { file: "favicon.svg", type: "image/svg+xml" },
};

/** Scripts, styles and requests from this origin only; no inline code, no framing, no forms. */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

export interface DashboardOptions {
  readonly settings: SettingsFile;
  readonly log: Logger;
}

export function dashboardRoutes(app: Hono, o: DashboardOptions): void {
  // Read once when the routes are registered (a few tens of KiB); the files ship with the code.
  const assets = new Map(
    Object.entries(DASHBOARD_ASSETS).map(([path, a]) => [
      path,
      { body: readFileSync(`${PUBLIC_DIR}${a.file}`), type: a.type },
    ]),
  );
  for (const [path, a] of assets) {
    app.get(path, (c) =>
      c.body(new Uint8Array(a.body), 200, {
        "content-type": a.type,
        "content-security-policy": DASHBOARD_CSP,
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
        "referrer-policy": "no-referrer",
        "cache-control": "no-cache",
      }),
    );
  }
  const log = o.log.child({ component: "settings" });
  app.get("/admin/settings", async (c) => c.json(await o.settings.view()));
  app.put("/admin/settings", async (c) => {
    const edit = await parseJson(c, SettingsEditSchema);
    const view = await o.settings.update(edit);
    log.info({ edit, applied: view.applied }, "staging settings written and applied");
    return c.json(view);
  });
}
