// The compose cluster for real: `node scripts/compose.mjs up` builds the image (podman here: on a
// local base image, the engine layer cached between runs) and starts deploy/docker-compose.yml's
// three nodes as shipped; each turns healthy, they form a cluster over TLS on the compose network,
// a model copied into the models volume is placed, and a chat completion answers through the
// published port with deploy/secrets' CA, as does the dashboard. Then `down` and `up` serve again
// with the deployment kept; a node that crashes is restarted by its restart policy and rejoins
// while the others serve; `stop` of a node drains it: a client that retries refused connections
// loses no request. Its own compose project and ports, so an operator's compose cluster is untouched.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePorts, seedStore, waitFor } from "@ic/testkit";
import { trustClusterCa } from "@ic/tls";

const ROOT = resolve(import.meta.dirname, "../..");
const PROJECT = "ic-compose-test";
const MODEL = "test/compose-tiny";
const SECRETS = join(ROOT, "deploy", "secrets");
let ports: number[] = [];
let madeSecrets = false;
const env = () => ({
  ...process.env,
  IC_COMPOSE_PROJECT: PROJECT,
  IC_PORT_1: String(ports[0]),
  IC_PORT_2: String(ports[1]),
  IC_PORT_3: String(ports[2]),
});

/**
 * Runs a command without blocking this process (the test's clients and vitest's worker go on while
 * a build, an `up` or a drain takes minutes); resolves with its exit status and output.
 */
function run(
  cmd: string,
  args: readonly string[],
  timeoutMs = 3_000_000,
): Promise<{ status: number | null; out: string }> {
  return new Promise((settle) => {
    const p = spawn(cmd, args, { cwd: ROOT, env: env(), stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (d: Buffer) => (out += d.toString()));
    p.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
    p.on("close", (status) => {
      clearTimeout(timer);
      settle({ status, out });
    });
  });
}

async function compose(...args: string[]): Promise<{ status: number | null; out: string }> {
  const r = await run(process.execPath, [join(ROOT, "scripts", "compose.mjs"), ...args]);
  const said = r.out.split("\n").filter((l) => l.startsWith("[compose]"));
  process.stderr.write(`${said.join("\n")}\n`);
  return r;
}

async function podman(...args: string[]): Promise<string> {
  const r = await run("podman", args, 300_000);
  if (r.status !== 0) throw new Error(`podman ${args.join(" ")}: ${r.out}`);
  return r.out.trim();
}

const container = (n: number) => `${PROJECT}_node-${n}_1`;
const token = (name: string) => readFileSync(join(SECRETS, `${name}.token`), "utf8").trim();

/** A request to node `n` through its published port, over HTTPS with the cluster CA. */
async function api(n: number, path: string, init: RequestInit & { token?: string } = {}) {
  const { token: t, ...rest } = init;
  return fetch(`https://127.0.0.1:${ports[n - 1]}${path}`, {
    ...rest,
    headers: {
      ...(t ? { authorization: `Bearer ${token(t)}` } : {}),
      ...(rest.body ? { "content-type": "application/json" } : {}),
    },
    signal: AbortSignal.timeout(60_000),
  });
}

interface StateDoc {
  node_identities: { name: string; node_id: string }[];
  models: { model_id: string }[];
  deployments: { model_id: string }[];
  instances: {
    model_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { state: string }[];
  }[];
}

async function state(n: number): Promise<StateDoc> {
  return (await (await api(n, "/state", { token: "read" })).json()) as StateDoc;
}

async function chat(n: number): Promise<number> {
  const r = await api(n, "/v1/chat/completions", {
    method: "POST",
    token: "inference",
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
    }),
  });
  await r.text();
  return r.status;
}

async function servesEverywhere(timeoutMs: number): Promise<void> {
  await waitFor(
    async () => {
      for (const n of [1, 2, 3]) if ((await chat(n).catch(() => 0)) !== 200) return undefined;
      return true;
    },
    { timeoutMs, intervalMs: 1000, what: "a chat completion answered through every node" },
  );
}

beforeAll(async () => {
  ports = await freePorts(3);
  madeSecrets = !existsSync(join(SECRETS, "ca.crt"));
  await compose("down", "--volumes");
  const up = await compose("up", "--timeout-s", "300");
  expect(up.status, up.out.slice(-3000)).toBe(0);
  trustClusterCa(readFileSync(join(SECRETS, "ca.crt"), "utf8"));
}, 3_000_000);

afterAll(async () => {
  await compose("down", "--volumes");
  if (madeSecrets) rmSync(SECRETS, { recursive: true, force: true });
}, 300_000);

describe("the compose cluster (podman)", () => {
  it("three healthy nodes form one cluster over TLS; a model copied in is placed and answers through the published port; the dashboard loads", async () => {
    await waitFor(async () => ((await state(1)).node_identities.length === 3 ? true : undefined), {
      timeoutMs: 60_000,
      what: "3 nodes in the cluster",
    });
    // A model into the store host's volume, as docs/operations.md says: copy, then own it.
    const dir = mkdtempSync(join(tmpdir(), "ic-compose-model-"));
    await seedStore(dir, { modelId: MODEL });
    const src = join(dir, MODEL.replace("/", "--"));
    await podman("cp", src, `${container(1)}:/srv/models/${MODEL.replace("/", "--")}`);
    await podman("exec", "-u", "0", container(1), "chown", "-R", "10001:10001", "/srv/models");
    rmSync(dir, { recursive: true, force: true });
    await waitFor(
      async () => ((await state(2)).models.some((m) => m.model_id === MODEL) ? true : undefined),
      { timeoutMs: 60_000, intervalMs: 1000, what: "the model registered" },
    );
    const placed = await api(2, "/place_instance", {
      method: "POST",
      token: "admin",
      body: JSON.stringify({ model_id: MODEL }),
    });
    expect(placed.status, await placed.text()).toBe(200);
    await servesEverywhere(120_000);
    const page = await api(1, "/", { token: "read" });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("<html");
  });

  it("down then up: the deployment comes back from the volumes and serves, with no operator action", async () => {
    expect((await compose("down")).status).toBe(0);
    expect((await compose("up", "--timeout-s", "300")).status).toBe(0);
    // Healthy is joined to a session; the new master then restores the intent from the bus's
    // replicated store once its stream has a leader again (about 6 s here).
    await waitFor(
      async () =>
        (await state(1)).deployments.some((d) => d.model_id === MODEL) ? true : undefined,
      { timeoutMs: 60_000, intervalMs: 500, what: "the deployment restored" },
    );
    await servesEverywhere(180_000);
  });

  it("a node that crashes (kill -9 of its process) is restarted by its policy and rejoins; the others serve meanwhile", async () => {
    // A node the model's one instance does not run on (after down and up the master placed it
    // again, on any node): "the others serve meanwhile" needs the instance on one of them.
    const s = await state(1);
    const holder = s.instances.find((i) => i.model_id === MODEL)?.assignments[0]?.node_id;
    const holderName = s.node_identities.find((m) => m.node_id === holder)?.name;
    const victim = holderName === "node-3" ? 2 : 3;
    const pid = await podman("inspect", "--format", "{{.State.Pid}}", container(victim));
    process.kill(Number(pid), "SIGKILL");
    expect(await chat(1)).toBe(200);
    await waitFor(
      async () => {
        const restarts = Number(
          await podman("inspect", "--format", "{{.RestartCount}}", container(victim)),
        );
        return restarts >= 1 ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500, what: `node-${victim} restarted` },
    );
    await waitFor(
      async () =>
        (await state(victim).catch(() => undefined))?.node_identities.length === 3
          ? true
          : undefined,
      {
        timeoutMs: 120_000,
        intervalMs: 1000,
        what: `node-${victim} back in the cluster`,
      },
    );
    await servesEverywhere(120_000);
  });

  it("stop of a node drains it: a client that retries refused connections loses no request", async () => {
    let stop = false;
    const outcomes: (number | "refused" | string)[] = [];
    // Round robin over the three published ports. A connection that is never made (refused, or,
    // while podman tears the stopped container's port forwarding down, no route to its address or
    // no answer to the connect) is the one thing such a client retries elsewhere: no request
    // reached a server. Anything after the
    // connection (a reset, a timeout, an error status) is a failure.
    const client = (async () => {
      for (let i = 0; !stop; i++) {
        outcomes.push(
          await chat(1 + (i % 3)).catch((e: unknown) => {
            const code = (e as { cause?: { code?: string } }).cause?.code;
            return code === "ECONNREFUSED" ||
              code === "EHOSTUNREACH" ||
              code === "UND_ERR_CONNECT_TIMEOUT"
              ? "refused"
              : `${String(e)} ${code ?? ""}`;
          }),
        );
      }
    })();
    await new Promise((r) => setTimeout(r, 2000));
    const r = await run("podman", ["stop", "-t", "90", container(2)]);
    expect(r.status, r.out).toBe(0);
    await new Promise((r) => setTimeout(r, 3000));
    stop = true;
    await client;
    const answered = outcomes.filter((s) => s !== "refused");
    process.stderr.write(
      `compose stop: ${answered.length} answered, ${outcomes.length - answered.length} not connected (retried elsewhere)\n`,
    );
    expect(answered.length).toBeGreaterThan(5);
    expect(answered.filter((s) => s !== 200)).toEqual([]);
    const log = await podman("logs", "--tail", "200", container(2));
    expect(log).toContain('"msg":"drained"');
    expect(await podman("inspect", "--format", "{{.State.ExitCode}}", container(2))).toBe("0");
  });
});
