// The shipped deploy files agree with each other and with the config schema: compose's health check
// asks the node's public GET /health on its API port, every path a node writes is on a named volume
// of its own (compose) or writable in the systemd unit's sandbox, and the unit keeps what engines need.
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { ConfigSchema, expandHome, loadConfig } from "@ic/config";
import type { Config } from "@ic/config";
import { scopeFor } from "@ic/http";
import { makeClusterCerts } from "@ic/testkit";
import { HEALTH_PATH } from "./health-route.ts";

const ROOT = resolve(import.meta.dirname, "../../..");
const deploy = (f: string) => readFileSync(join(ROOT, "deploy", f), "utf8");
const SECRETS_IN_CONFIG = "/etc/inference-cluster/secrets";

/** Every config key the node writes under (the others name files it only reads: secrets, binaries). */
const WRITES = [
  "node_cache_path",
  "store_path",
  "model_store.hub_cache_path",
  "tracing.dir",
  "event_log.dir",
  "engine.runner_log_dir",
  "bus.store_dir",
] as const;
type WriteKey = (typeof WRITES)[number];

function valueAt(cfg: unknown, key: string): unknown {
  return key.split(".").reduce<unknown>((o, k) => (o as Record<string, unknown>)?.[k], cfg);
}

/** The paths a node with this config writes to (store_path on the store host, the hub cache with a hub). */
function writtenPaths(cfg: Config): Map<WriteKey, string> {
  const out = new Map<WriteKey, string>();
  for (const key of WRITES) {
    const v = valueAt(cfg, key);
    if (key === "model_store.hub_cache_path" && !cfg.model_store.hub_fallback) continue;
    if (typeof v === "string") out.set(key, v);
  }
  return out;
}

const inside = (path: string, root: string) => {
  const r = relative(root, path);
  return r === "" || (!r.startsWith("..") && !r.startsWith("/"));
};

// The secrets, tokens, cluster CA and node certificates, as the deploy files' comments make them.
const secrets = makeClusterCerts(
  ["1", "2", "3"].map((i) => ({ name: `node-${i}`, hosts: [`node-${i}`] })),
  { trust: false },
).dir;
afterAll(() => rmSync(secrets, { recursive: true, force: true }));

/** A shipped config as a node loads it (the secret files made elsewhere). */
function loadShipped(file: string): Config {
  const text = deploy(file).replaceAll(SECRETS_IN_CONFIG, secrets);
  const path = join(secrets, `${file.replaceAll("/", "_")}`);
  writeFileSync(path, text);
  return loadConfig({ file: path, env: {} });
}

describe("the config schema's paths", () => {
  it("every path key of the schema is classified here (a new one must be put on a volume)", () => {
    const js = z.toJSONSchema(ConfigSchema, { io: "input", unrepresentable: "any" });
    const keys: string[] = [];
    const walk = (s: unknown, at: string) => {
      const props = (s as { properties?: Record<string, unknown> }).properties;
      if (props) for (const [k, v] of Object.entries(props)) walk(v, at ? `${at}.${k}` : k);
      else keys.push(at);
    };
    walk(js, "");
    expect(keys.filter((k) => /(_path|(^|[._])dir)$/.test(k)).sort()).toEqual([...WRITES].sort());
  });
});

// ---- compose ----

interface ComposeService {
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  healthcheck?: { test: string[] };
}
const compose = parseYaml(deploy("docker-compose.yml"), { merge: true }) as {
  services: Record<string, ComposeService>;
  volumes: Record<string, unknown>;
};
const NODES = ["node-1", "node-2", "node-3"] as const;

/** A service's mounts: named volumes and bind mounts, by target. */
function mounts(s: ComposeService): { source: string; target: string; named: boolean }[] {
  return (s.volumes ?? []).map((v) => {
    const [source, target] = v.split(":") as [string, string];
    return { source, target, named: !source.startsWith(".") && !source.startsWith("/") };
  });
}

/** The config file a service runs (bind-mounted at its SERVICE_CONFIG). */
function composeConfig(name: string): { file: string; cfg: Config } {
  const s = compose.services[name]!;
  const at = s.environment?.SERVICE_CONFIG;
  const m = mounts(s).find((x) => x.target === at);
  expect(m, `${name}: a file mounted at SERVICE_CONFIG ${at}`).toBeDefined();
  const file = relative(join(ROOT, "deploy"), join(ROOT, "deploy", m!.source));
  return { file, cfg: loadShipped(file) };
}

describe("deploy/docker-compose.yml", () => {
  it("runs the three shipped node configs", () => {
    expect(Object.keys(compose.services).sort()).toEqual([...NODES]);
    for (const n of NODES) expect(composeConfig(n).file).toBe(`compose/${n}.yaml`);
  });

  it.each(NODES)("%s: the health check asks the public GET /health on the node's API port", (n) => {
    const { cfg } = composeConfig(n);
    const test = compose.services[n]!.healthcheck?.test ?? [];
    expect(test[0]).toBe("CMD");
    // The API answers HTTPS with the node's certificate (valid for 127.0.0.1): curl trusts the CA.
    expect(cfg.tls).not.toBeNull();
    const url = new URL(test.find((a) => a.startsWith("https://"))!);
    expect(test[test.indexOf("--cacert") + 1]).toBe(
      cfg.tls!.ca_file.replace(secrets, SECRETS_IN_CONFIG),
    );
    expect(url.pathname).toBe(HEALTH_PATH);
    expect(scopeFor("GET", url.pathname)).toBeNull();
    expect(["127.0.0.1", "localhost"]).toContain(url.hostname);
    expect(Number(url.port)).toBe(cfg.node.api_port);
    // The check runs inside the container: the API must listen on its loopback.
    expect(["0.0.0.0", "127.0.0.1"]).toContain(cfg.node.bind);
    // The checker (curl -f: a 503 fails the check) is in the image.
    expect(test[1]).toBe("curl");
    expect(test).toContain("-fsS");
    expect(deploy("Dockerfile")).toMatch(/apt-get install[^\n]* curl\b/);
  });

  it.each(NODES)("%s: every path it writes is on one of its named volumes", (n) => {
    const { cfg } = composeConfig(n);
    const named = mounts(compose.services[n]!).filter((m) => m.named);
    for (const [key, path] of writtenPaths(cfg)) {
      expect(path, `${n} ${key}`).toMatch(/^\//);
      expect(
        named.some((m) => inside(path, m.target)),
        `${n}: ${key} (${path}) is on no named volume`,
      ).toBe(true);
    }
    // Staging has a volume of its own, and so have the store host's models.
    expect(named.some((m) => m.target === cfg.node_cache_path)).toBe(true);
    if (cfg.store_path)
      expect(named.find((m) => m.target === cfg.store_path)?.source).toBe("models");
    // No volume holds nothing the node writes.
    const paths = [...writtenPaths(cfg).values()];
    for (const m of named)
      expect(
        paths.some((p) => inside(p, m.target)),
        `${n}: volume ${m.source} at ${m.target} holds no configured path`,
      ).toBe(true);
  });

  it("named volumes are declared and each belongs to one node", () => {
    const owners = new Map<string, string[]>();
    for (const n of NODES)
      for (const m of mounts(compose.services[n]!).filter((x) => x.named))
        owners.set(m.source, [...(owners.get(m.source) ?? []), n]);
    expect([...owners.keys()].sort()).toEqual(Object.keys(compose.volumes).sort());
    for (const [v, by] of owners) expect(by, `volume ${v}`).toHaveLength(1);
  });

  it("publishes each node's API port and nothing else", () => {
    for (const n of NODES) {
      const { cfg } = composeConfig(n);
      const ports = compose.services[n]!.ports ?? [];
      expect(ports).toHaveLength(1);
      expect(ports[0]!.split(":").at(-1)).toBe(String(cfg.node.api_port));
    }
  });

  it("the image builds a portable engine in a build stage and never takes the host's node_modules", () => {
    const dockerfile = deploy("Dockerfile");
    expect(dockerfile).toMatch(/^ARG BASE_IMAGE=node:20-bookworm$/m);
    const stages = dockerfile.split(/^FROM /m).slice(1);
    expect(stages.map((st) => st.split("\n")[0])).toEqual([
      "${BASE_IMAGE} AS build",
      "${BASE_IMAGE}",
    ]);
    expect(stages[0]).toMatch(/ENGINE_PORTABLE=1/);
    expect(stages[0]).toMatch(/node scripts\/setup\.mjs --for=publisher/);
    // The final stage: no compiler, cmake or llama.cpp sources; the engine and the workspace copied.
    expect(stages[1]).not.toMatch(/\b(cmake|g\+\+|libssl-dev)\b/);
    expect(stages[1]).toMatch(/COPY --from=build \/usr\/local\/lib\/inference-cluster\/engine/);
    const ignored = readFileSync(join(ROOT, ".dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim());
    expect(ignored).toContain("**/node_modules");
    expect(ignored).toContain(".git");
    expect(ignored).toContain("/deploy/secrets");
  });

  it("the containers run as the image's own user, which owns the volumes' directories", () => {
    const dockerfile = deploy("Dockerfile");
    const users = [...dockerfile.matchAll(/^USER\s+(\S+)/gm)].map((m) => m[1]);
    expect(users).toEqual(["inference-cluster"]);
    // The last USER comes after every RUN that needs root.
    expect(dockerfile.lastIndexOf("\nRUN ")).toBeLessThan(dockerfile.indexOf("\nUSER "));
    const chown = dockerfile.slice(dockerfile.indexOf("chown inference-cluster:inference-cluster"));
    const chowned = chown.slice(0, chown.search(/\n(?!\s)/));
    for (const dir of [
      "/var/lib/inference-cluster",
      "/var/cache/inference-cluster/staging",
      "/var/log/inference-cluster",
      "/srv/models",
    ])
      expect(chowned).toContain(dir);
    const compose = deploy("docker-compose.yml");
    expect(compose).not.toMatch(/^\s+user:\s*(root|0)\b/m);
  });
});

// ---- systemd ----

/** `Key=value` lines of one unit section, values in order (empty assignments kept). */
function unitSection(text: string, section: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let current = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const head = /^\[(.+)\]$/.exec(line);
    if (head) {
      current = head[1]!;
      continue;
    }
    if (current !== section) continue;
    const eq = line.indexOf("=");
    const key = line.slice(0, eq);
    out.set(key, [...(out.get(key) ?? []), line.slice(eq + 1)]);
  }
  return out;
}

const unit = unitSection(deploy("inference-cluster.service"), "Service");
const one = (key: string) => unit.get(key)?.at(-1);
const sysusers = deploy("inference-cluster.sysusers.conf")
  .split("\n")
  .filter((l) => l.startsWith("u "));
const tmpfiles = deploy("inference-cluster.tmpfiles.conf")
  .split("\n")
  .filter((l) => /^[a-zA-Z]\s/.test(l))
  .map((l) => l.split(/\s+/));

describe("deploy/inference-cluster.service", () => {
  it("passes systemd-analyze verify (Debian's systemd package; setup --for=test installs it)", () => {
    const r = spawnSync(
      "systemd-analyze",
      ["verify", join(ROOT, "deploy", "inference-cluster.service")],
      {
        encoding: "utf8",
      },
    );
    expect(
      r.error,
      "systemd-analyze is missing: node scripts/setup.mjs --for=test installs it",
    ).toBeUndefined();
    expect(`${r.stdout}${r.stderr}`.trim()).toBe("");
    expect(r.status).toBe(0);
  });

  it("runs as the dedicated user the sysusers snippet creates, whose home is its state directory", () => {
    expect(one("User")).toBe("inference-cluster");
    expect(one("Group")).toBe("inference-cluster");
    expect(sysusers).toHaveLength(1);
    const m = /^u\s+(\S+)\s+\S+\s+"[^"]*"\s+(\S+)/.exec(sysusers[0]!);
    expect(m?.[1]).toBe(one("User"));
    expect(m?.[2]).toBe(`/var/lib/${one("StateDirectory")}`);
  });

  it("every path the example config (its config) writes is writable in the sandbox", () => {
    expect(unit.get("Environment")).toContain("SERVICE_CONFIG=/etc/inference-cluster/config.yaml");
    const writable = [
      `/var/lib/${one("StateDirectory")}`,
      `/var/cache/${one("CacheDirectory")}`,
      `/var/log/${one("LogsDirectory")}`,
      ...(unit.get("ReadWritePaths") ?? [])
        .flatMap((v) => v.split(/\s+/))
        .map((p) => p.replace(/^-/, "")),
    ];
    const home = /\s(\/\S+)\s+\S+$/.exec(sysusers[0]!)![1]!;
    // The schema's defaults, `~` as the service user's home: what the node does with this file.
    const cfg = ConfigSchema.parse(parseYaml(deploy("config.example.yaml")));
    const paths = new Map(
      [...WRITES].flatMap((k) => {
        const v = valueAt(cfg, k);
        return typeof v === "string" ? [[k, expandHome(v, home)] as const] : [];
      }),
    );
    expect([...paths.keys()].sort()).toEqual([...WRITES].sort());
    for (const [key, path] of paths)
      expect(
        writable.some((w) => inside(path, w)),
        `${key} (${path}) is read-only under ProtectSystem=strict`,
      ).toBe(true);
  });

  it("the secret files the example config names are in a directory the user owns (tmpfiles)", () => {
    const cfg = ConfigSchema.parse(parseYaml(deploy("config.example.yaml")));
    const files = [cfg.cluster.secret_file!, ...cfg.auth.tokens.map((t) => t.token_file!)];
    for (const f of files) {
      const dir = tmpfiles.find((l) => l[0] === "d" && l[1] === f.slice(0, f.lastIndexOf("/")));
      expect(dir, f).toBeDefined();
      expect(dir![2]).toBe("0700");
      expect(dir![3]).toBe(one("User"));
    }
    if (cfg.store_path)
      expect(tmpfiles.find((l) => l[0] === "d" && l[1] === cfg.store_path)?.[3]).toBe(one("User"));
  });

  it.each([
    ["NoNewPrivileges", "yes"],
    ["ProtectSystem", "strict"],
    ["ProtectHome", "yes"],
    ["PrivateTmp", "yes"],
    ["ProtectKernelTunables", "yes"],
    ["ProtectKernelModules", "yes"],
    ["ProtectControlGroups", "yes"],
    ["RestrictNamespaces", "yes"],
    ["RestrictSUIDSGID", "yes"],
    ["LockPersonality", "yes"],
    ["CapabilityBoundingSet", ""],
    // SIGTERM to the node only (it stops its children in order); what is left is killed after it.
    ["KillMode", "mixed"],
  ])("hardening: %s=%s", (key, value) => {
    expect(one(key)).toBe(value);
  });

  it("keeps what engines need: GPU devices, the JIT, sockets, setpriv --pdeathsig and nice", () => {
    // A device allow-list (PrivateDevices, DevicePolicy, DeviceAllow, and ProtectClock, which adds a
    // DeviceAllow rule) hides /dev/nvidia*.
    for (const key of ["PrivateDevices", "ProtectClock", "MemoryDenyWriteExecute"])
      expect(one(key) ?? "no", key).toBe("no");
    expect(unit.has("DevicePolicy")).toBe(false);
    expect(unit.has("DeviceAllow")).toBe(false);
    // prctl(PR_SET_PDEATHSIG) and setpriority are not filtered.
    expect(unit.has("SystemCallFilter")).toBe(false);
    const families = (one("RestrictAddressFamilies") ?? "").split(/\s+/);
    for (const f of ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]) expect(families).toContain(f);
    expect(one("User")).not.toBe("root");
  });
});
