// The dashboard routes behind the gateway's auth: the page and its files are public with a strict
// CSP, nothing else under /dashboard/ is served, and the settings editor needs read / admin scopes.
import { readFileSync } from "node:fs";
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
    expect(html).toContain('src="/dashboard/app.js"');
    expect(html).toContain('href="/dashboard/style.css"');
    expect(html).not.toMatch(/<script>(?!\s*<\/script>)|<style>| on[a-z]+="/i);
    expect(DASHBOARD_CSP).not.toContain("unsafe");
  });

  it("the script never writes markup from data", () => {
    const js = readFileSync(new URL("../public/app.js", import.meta.url), "utf8");
    expect(js).not.toMatch(
      /innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/,
    );
  });

  it("serves nothing else under /dashboard/", async () => {
    const { app } = setup();
    for (const p of ["/dashboard/index.html", "/dashboard/x.js", "/dashboard/"])
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
