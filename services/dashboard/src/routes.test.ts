// The dashboard routes behind the gateway's auth: the page and its files are public with a strict
// CSP, nothing else under /dashboard/ is served, and the settings editor needs read / admin scopes.
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { DASHBOARD_ASSETS, DASHBOARD_CSP } from "./routes.ts";
import { dashboardApp, settingsFixture } from "./testing.ts";
import { GiB } from "@ic/protocol";

function setup() {
  const fx = settingsFixture("# mine\nnode:\n  name: n1\n");
  const app = dashboardApp(fx, [
    { name: "viewer", token: "r".repeat(20), scopes: ["read"] },
    { name: "op", token: "a".repeat(20), scopes: ["admin", "read"] },
  ]);
  return { app, file: fx.file, live: fx.live };
}

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

const PUBLIC = new URL("../public/", import.meta.url);
/** The page's ES modules: every .js file in public/. */
const MODULES = readdirSync(PUBLIC)
  .filter((f) => f.endsWith(".js"))
  .sort();
const source = (f: string) => readFileSync(new URL(f, PUBLIC), "utf8");
/** The modules a module imports, as written (import ... from "x" and import "x"). */
const importsOf = (js: string) =>
  [...js.matchAll(/^(?:import|export)\s[^;"]*\sfrom\s*"([^"]+)"|^import\s*"([^"]+)"/gm)].map(
    (m) => (m[1] ?? m[2])!,
  );

describe("dashboard routes", () => {
  it.each(Object.entries(DASHBOARD_ASSETS))(
    "%s is public, with its type and the CSP",
    async (path, a) => {
      const r = await setup().app.request(path);
      expect(r.status).toBe(200);
      expect(r.headers.get("content-type")).toBe(a.type);
      expect(r.headers.get("content-security-policy")).toBe(DASHBOARD_CSP);
      expect(r.headers.get("x-frame-options")).toBe("DENY");
      expect(r.headers.get("x-content-type-options")).toBe("nosniff");
      expect((await r.text()).length).toBeGreaterThan(100);
    },
  );

  it("the page loads its script and style from this origin only, with no inline code", async () => {
    const html = await (await setup().app.request("/")).text();
    expect(html).toContain('<script type="module" src="/dashboard/app.js"></script>');
    expect(html).toContain('href="/dashboard/style.css"');
    expect(html).not.toMatch(/<script>(?!\s*<\/script>)|<style>| on[a-z]+="/i);
    expect(DASHBOARD_CSP).not.toContain("unsafe");
  });

  it("the script never writes markup from data", () => {
    expect(MODULES).toContain("app.js");
    expect(MODULES.length).toBeGreaterThan(1);
    for (const f of MODULES)
      expect(source(f), f).not.toMatch(
        /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/,
      );
  });

  it("each module is served as written, as JavaScript, and app.js imports all of them", async () => {
    const { app } = setup();
    for (const f of MODULES) {
      expect(DASHBOARD_ASSETS[`/dashboard/${f}`], f).toEqual({
        file: f,
        type: "text/javascript; charset=utf-8",
      });
      const r = await app.request(`/dashboard/${f}`);
      expect(r.status, f).toBe(200);
      expect(await r.text(), f).toBe(source(f));
    }
    // Imports are relative to a served module (the browser resolves them against
    // /dashboard/app.js); app.js reaches every module, so none is served unused.
    const reached = new Set(["app.js"]);
    for (const f of reached)
      for (const spec of importsOf(source(f))) {
        expect(spec, `${f} imports ${spec}`).toMatch(/^\.\/[a-z][a-z-]*\.js$/);
        const target = spec.slice(2);
        expect(MODULES, `${f} imports ${spec}`).toContain(target);
        reached.add(target);
      }
    expect([...reached].sort()).toEqual(MODULES);
  });

  it("serves nothing else under /dashboard/", async () => {
    const { app } = setup();
    expect(Object.keys(DASHBOARD_ASSETS).sort()).toEqual(
      [
        "/",
        "/dashboard/style.css",
        "/favicon.ico",
        ...MODULES.map((f) => `/dashboard/${f}`),
      ].sort(),
    );
    for (const p of [
      "/dashboard/index.html",
      "/dashboard/x.js",
      "/dashboard/favicon.svg",
      "/dashboard/",
      "/dashboard/src/routes.ts",
      "/dashboard/app.js.map",
    ])
      expect((await app.request(p)).status).toBe(404);
    // A dot segment is resolved before routing: /package.json is an API path (token needed).
    expect((await app.request("/dashboard/../package.json")).status).toBe(401);
  });

  it("settings: read scope to look, admin to change; a change lands in the file", async () => {
    const { app, file, live } = setup();
    expect((await app.request("/admin/settings")).status).toBe(401);
    const view = await app.request("/admin/settings", { headers: bearer("r".repeat(20)) });
    expect(view.status).toBe(200);
    expect(await view.json()).toMatchObject({ node: "n1", file, writable: true });
    const put = (token: string, body: unknown) =>
      app.request("/admin/settings", {
        method: "PUT",
        headers: { ...bearer(token), "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    expect((await put("r".repeat(20), { staging: { headroom_gb: 1 } })).status).toBe(403);
    const bad = await put("a".repeat(20), { staging: { headroom_gb: -1 } });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({
      error: { code: "invalid_request", message: expect.stringContaining("headroom_gb") },
    });
    const unknown = await put("a".repeat(20), { staging: { nope: 1 } });
    expect(unknown.status).toBe(400);
    const good = await put("a".repeat(20), { staging: { headroom_gb: 1 } });
    expect(good.status).toBe(200);
    expect(await good.json()).toMatchObject({ applied: { headroom_gb: 1 } });
    expect(readFileSync(file, "utf8")).toMatch(/^# mine\n[\s\S]*headroom_gb: 1\n/);
    expect(live.headroomBytes).toBe(GiB);
  });
});
