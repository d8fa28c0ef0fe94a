// DNS-rebinding and cross-site protection: only loopback Host names, only loopback Origins.
// A page on another site (or a rebound DNS name pointing at 127.0.0.1) gets 403 for every route.
import type { MiddlewareHandler } from "hono";
import { PublisherError } from "./errors.ts";

const LOOPBACK_NAMES = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** `localhost`, `127.0.0.1` or `[::1]`, with or without a port. */
export function isLocalHost(host: string | undefined): boolean {
  if (!host) return false;
  const m = /^(\[[0-9a-f:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/i.exec(host.trim());
  return m !== null && LOOPBACK_NAMES.has((m[1] ?? "").toLowerCase());
}

/** An http(s) origin on a loopback name; `null` and every other site are not local. */
export function isLocalOrigin(origin: string): boolean {
  try {
    const u = new URL(origin);
    return (
      (u.protocol === "http:" || u.protocol === "https:") &&
      LOOPBACK_NAMES.has(u.hostname.toLowerCase())
    );
  } catch {
    return false;
  }
}

export function localOnly(): MiddlewareHandler {
  return async (c, next) => {
    const host = c.req.header("host") ?? new URL(c.req.url).host;
    if (!isLocalHost(host)) {
      throw new PublisherError(
        "forbidden",
        "requests must address the publisher as localhost, 127.0.0.1 or [::1]",
      );
    }
    const origin = c.req.header("origin");
    if (origin !== undefined && !isLocalOrigin(origin)) {
      throw new PublisherError("forbidden", "cross-site requests are refused");
    }
    if (c.req.header("sec-fetch-site") === "cross-site") {
      throw new PublisherError("forbidden", "cross-site requests are refused");
    }
    await next();
  };
}
