// Every path the gateway's endpoint table serves has its OpenAPI operation (which openapi.test in
// services/node holds to docs/api.md): a new kind's endpoint without its documentation fails here.
import { describe, expect, it } from "vitest";
import { ENDPOINTS } from "./chat/request.ts";
import { GATEWAY_OPERATIONS } from "./operations.ts";

describe("the gateway's OpenAPI operations", () => {
  const documented = new Set(
    GATEWAY_OPERATIONS.filter((op) => op.method === "post").map((op) => op.path),
  );
  it.each(ENDPOINTS.map((e) => e.path))("document POST %s", (path) => {
    expect(documented.has(path)).toBe(true);
  });
});
