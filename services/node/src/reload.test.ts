import { describe, expect, it } from "vitest";
import type { ResolvedTls, ResolvedToken } from "@ic/config";
import { tlsChanged, tokenChanges } from "./reload.ts";

const t = (name: string, token: string, extra: Partial<ResolvedToken> = {}): ResolvedToken => ({
  name,
  token,
  scopes: ["inference"],
  ...extra,
});

describe("tokenChanges", () => {
  it.each([
    ["nothing", [t("a", "1")], [t("a", "1")], { added: [], removed: [], changed: [] }],
    [
      "a rotation's first step",
      [t("a", "1")],
      [t("a", "1"), t("b", "2")],
      { added: ["b"], removed: [], changed: [] },
    ],
    [
      "its last step",
      [t("a", "1"), t("b", "2")],
      [t("b", "2")],
      { added: [], removed: ["a"], changed: [] },
    ],
    [
      "a new secret under the same name",
      [t("a", "1")],
      [t("a", "9")],
      { added: [], removed: [], changed: ["a"] },
    ],
    [
      "new scopes, models or limits",
      [t("a", "1"), t("b", "2"), t("c", "3")],
      [
        t("a", "1", { scopes: ["admin"] }),
        t("b", "2", { models: ["org/*"] }),
        t("c", "3", { limits: { requests_per_minute: 5 } }),
      ],
      { added: [], removed: [], changed: ["a", "b", "c"] },
    ],
  ])("%s", (_what, before, after, want) => {
    expect(tokenChanges(before, after)).toEqual(want);
  });
});

describe("tlsChanged", () => {
  const a: ResolvedTls = {
    ca_file: "/s/ca.crt",
    cert_file: "/s/n1.crt",
    key_file: "/s/n1.key",
    ca: "CA",
    cert: "CERT",
    key: "KEY",
  };
  it.each([
    [{}, false],
    [{ cert: "CERT2" }, true],
    [{ key: "KEY2" }, true],
    [{ ca: "CA+CA2" }, true],
    [{ cert_file: "/s/n1-2026.crt" }, true],
  ] as const)("%j -> %s", (change, want) => {
    expect(tlsChanged(a, { ...a, ...change })).toBe(want);
  });
});
