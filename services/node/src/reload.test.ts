import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ClusterSecret, clusterCredentials, loadConfig } from "@ic/config";
import type { ResolvedTls, ResolvedToken } from "@ic/config";
import { TokenSet } from "@ic/http";
import { silentLogger } from "@ic/log";
import { makeClusterCerts } from "@ic/testkit";
import { ConfigReloader, tlsChanged, tokenChanges, withNodeToken } from "./reload.ts";

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

describe("ConfigReloader and the cluster secret", () => {
  const OLD = "old-secret-0123456789abcdef";
  const NEW = "new-secret-fedcba9876543210";
  const certs = makeClusterCerts([{ name: "n1", hosts: ["10.0.0.5"] }], { trust: false });
  const dir = mkdtempSync(join(tmpdir(), "ic-reload-"));
  const app = { name: "app", token: "app-token-0123456789abcdef", scopes: ["inference"] };

  function reloaderFor(cluster: Record<string, unknown>, tls: boolean) {
    const file = join(dir, `${tls ? "tls" : "plain"}.yaml`);
    const write = (c: Record<string, unknown>) =>
      writeFileSync(
        file,
        JSON.stringify({
          node: { host: tls ? "10.0.0.5" : "127.0.0.1" },
          cluster: c,
          auth: { tokens: [app] },
          ...(tls ? { tls: certs.tlsConfig("n1") } : {}),
        }),
      );
    write(cluster);
    const start = loadConfig({ file, env: {} });
    const secret = new ClusterSecret(start.cluster.secret, start.cluster.rotation_secret);
    const set = new TokenSet(withNodeToken(start.auth.tokens, secret.acceptedTokens()));
    const reloader = new ConfigReloader({
      file,
      set,
      initial: start.auth.tokens,
      secret,
      tls: { initial: start.tls, apply: () => {} },
      name: "n1",
      log: silentLogger(),
    });
    return { write, reloader, secret, set };
  }
  const nodeToken = (s: string) => clusterCredentials(s).nodeToken;
  const holder = (set: TokenSet, token: string) => set.holder(token)?.name;

  it("with TLS: three reloads rotate it, and the API accepts the node tokens of the window", async () => {
    const { write, reloader, secret, set } = reloaderFor({ secret: OLD }, true);
    write({ secret: OLD, rotation_secret: NEW });
    expect(await reloader.reload()).toMatchObject({
      cluster_secret: "unchanged",
      rotation_window: "open",
      added: [],
      removed: [],
    });
    expect([holder(set, nodeToken(OLD)), holder(set, nodeToken(NEW))]).toEqual([
      "cluster-node",
      "cluster-node",
    ]);
    expect(holder(set, app.token)).toBe("app");
    expect(secret.token()).toBe(nodeToken(OLD));

    write({ secret: NEW, rotation_secret: OLD });
    expect(await reloader.reload()).toMatchObject({
      cluster_secret: "rotated",
      rotation_window: "open",
    });
    expect(secret.token()).toBe(nodeToken(NEW));

    write({ secret: NEW });
    expect(await reloader.reload()).toMatchObject({
      cluster_secret: "unchanged",
      rotation_window: "closed",
    });
    expect(holder(set, nodeToken(OLD))).toBeUndefined();
    expect(holder(set, nodeToken(NEW))).toBe("cluster-node");
  });

  it("without TLS: a new secret, or a window, is refused and nothing changes", async () => {
    const { write, reloader, secret, set } = reloaderFor({ secret: OLD }, false);
    write({ secret: NEW });
    await expect(reloader.reload()).rejects.toThrowError(
      /^reload refused, nothing changed: cluster\.secret: without TLS the cluster secret is also the bus routes' password/,
    );
    write({ secret: OLD, rotation_secret: NEW });
    await expect(reloader.reload()).rejects.toThrowError(
      /^reload refused, nothing changed: cluster\.rotation_secret: rotating the cluster secret without a restart needs TLS/,
    );
    expect(secret.token()).toBe(nodeToken(OLD));
    expect(holder(set, nodeToken(NEW))).toBeUndefined();
    // The same secret reloads fine.
    write({ secret: OLD });
    expect(await reloader.reload()).toMatchObject({ cluster_secret: "unchanged", tls: "off" });
  });

  it("a lone node without a configured secret keeps the one it made at start", async () => {
    const { reloader, secret } = reloaderFor({}, false);
    const before = secret.token();
    expect(await reloader.reload()).toMatchObject({ cluster_secret: "unchanged" });
    expect(secret.token()).toBe(before);
  });
});
