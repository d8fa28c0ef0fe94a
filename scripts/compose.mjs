#!/usr/bin/env node
// The compose cluster of deploy/docker-compose.yml in one command, with Docker where a Docker engine
// runs and podman (+ podman-compose) elsewhere: builds the image (on a local base image when no
// registry answers), makes deploy/secrets when missing, starts the three nodes and waits until each
// is healthy. Dependency-free; `node scripts/compose.mjs --help` lists the verbs.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chownSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const COMPOSE_FILE = join(ROOT, "deploy", "docker-compose.yml");
const SECRETS = join(ROOT, "deploy", "secrets");
/** The compose project (IC_COMPOSE_PROJECT): it prefixes the containers' and volumes' names. */
const PROJECT = process.env.IC_COMPOSE_PROJECT || "inference-cluster";
export const IMAGE = "inference-cluster:local";
export const NODES = ["node-1", "node-2", "node-3"];
/** The image's node user (deploy/Dockerfile): the secrets must be readable by it. */
const NODE_UID = 10001;
/** SIGTERM drains first (node.drain_timeout_ms 60 s, then 15 s to stop): compose's stop_grace_period. */
const STOP_GRACE_S = 90;

const USAGE = `usage: node scripts/compose.mjs <verb> [--engine docker|podman] [--timeout-s N]

  up      install podman and what it needs when missing (setup --for=compose; not with Docker),
          build the image when its inputs changed, make deploy/secrets when missing (make-secrets,
          then chown to uid ${NODE_UID}), start the three nodes, and wait until each is healthy
  build   build the image (${IMAGE}) only; with no registry reachable, first a local base image
          (scripts/container-base.mjs: Debian bookworm + Node from the npm registry)
  health  run each node's health check now and print the result
  stop    stop the nodes, all at once (SIGTERM: each drains, up to ${STOP_GRACE_S} s)
  down    stop and remove the containers and network; the named volumes (state, models) stay,
          unless --volumes (then every node's state and the models volume go too)
  ps      the containers and their state

Environment: IC_COMPOSE_PROJECT names the compose project (default ${PROJECT}: containers
${PROJECT}_node-1_1 with podman-compose, ${PROJECT}-node-1-1 with Docker); IC_BASE_IMAGE names the base image (default node:20-bookworm when it can be pulled,
else the local one); IC_PORT_1..3 the published API ports (default 8080-8082);
NODE_EXTRA_CA_CERTS (or npm's cafile) a CA bundle the build needs to reach the npm registry.`;

function log(msg) {
  process.stderr.write(`[compose] ${msg}\n`);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd: ROOT, ...opts });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (exit ${r.status ?? r.signal})`);
  return r;
}

function quiet(cmd, args) {
  return spawnSync(cmd, args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** Docker when its engine answers, else podman. */
function pickEngine(asked) {
  if (asked) return asked;
  return quiet("docker", ["info"]).status === 0 ? "docker" : "podman";
}

function composeCmd(engine) {
  return engine === "docker"
    ? ["docker", ["compose", "-p", PROJECT, "-f", COMPOSE_FILE]]
    : ["podman-compose", ["-p", PROJECT, "-f", COMPOSE_FILE]];
}

/** The CA bundle an intercepting proxy needs, from the environment or npm's own setting. */
function extraCa() {
  if (process.env.NODE_EXTRA_CA_CERTS) return process.env.NODE_EXTRA_CA_CERTS;
  const r = quiet("npm", ["config", "get", "cafile"]);
  const f = r.status === 0 ? r.stdout.trim() : "";
  return f && f !== "null" && f !== "undefined" && existsSync(f) ? f : undefined;
}

/** The base image: IC_BASE_IMAGE, else node:20-bookworm when it can be had, else a local one. */
function baseImage(engine) {
  if (process.env.IC_BASE_IMAGE) return process.env.IC_BASE_IMAGE;
  const official = "docker.io/library/node:20-bookworm";
  if (quiet(engine, ["image", "inspect", official]).status === 0) return official;
  const pulled = spawnSync(engine, ["pull", official], { stdio: "ignore", timeout: 120_000 });
  if (pulled.status === 0) return official;
  log(`${official} cannot be pulled here: using a local base image`);
  const r = spawnSync(
    process.execPath,
    [join(ROOT, "scripts", "container-base.mjs"), "--engine", engine],
    {
      cwd: ROOT,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  if (r.status !== 0) throw new Error("building the local base image failed");
  return r.stdout.trim().split("\n").pop();
}

/** What the last build was made from, and the image it made (.state is outside the build context). */
const BUILT = join(ROOT, ".state", "compose-image.json");

/**
 * A digest of what a build reads: every file git does not ignore (its mode and content, as in the
 * working tree), the base image and the CA bundle. Undefined outside a git checkout: then it builds.
 */
function buildInputs(engine, base, ca) {
  const listed = quiet("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]);
  if (listed.status !== 0) return undefined;
  const files = listed.stdout
    .split("\0")
    .filter((f) => f && existsSync(join(ROOT, f)))
    .sort();
  const blobs = spawnSync("git", ["hash-object", "--stdin-paths"], {
    cwd: ROOT,
    input: files.join("\n"),
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  if (blobs.status !== 0) return undefined;
  const ids = blobs.stdout.trim().split("\n");
  const h = createHash("sha256").update(`${imageId(engine, base)} ${ca ?? ""}\n`);
  files.forEach((f, i) => h.update(`${statSync(join(ROOT, f)).mode} ${ids[i]} ${f}\n`));
  return h.digest("hex");
}

/** The id of an image (the node image unless named); empty when there is none. */
function imageId(engine, ref = IMAGE) {
  return quiet(engine, ["image", "inspect", "--format", "{{.Id}}", ref]).stdout.trim();
}

/** The image, built unless the last build had the same inputs and its image is still there. */
function build(engine) {
  const started = Date.now();
  const base = baseImage(engine);
  const ca = extraCa();
  const inputs = buildInputs(engine, base, ca);
  let last;
  try {
    last = JSON.parse(readFileSync(BUILT, "utf8"));
  } catch {
    last = undefined;
  }
  // Even when every layer is cached, a build copies the context and the 220 MB app layer again to
  // digest them (15-20 s with podman).
  if (inputs && last?.inputs === inputs && last.image && last.image === imageId(engine)) {
    log(`${IMAGE} is up to date: nothing it is built from changed`);
    return;
  }
  const args = [
    "build",
    "-f",
    "deploy/Dockerfile",
    "-t",
    IMAGE,
    "--build-arg",
    `BASE_IMAGE=${base}`,
    // The build's downloads (Debian packages, the npm registry) go out as the host's do: on a
    // bridge the build may not reach the host's resolver (podman's netavark here: EAI_AGAIN).
    "--network",
    "host",
  ];
  if (ca) {
    if (engine !== "podman") throw new Error("a build CA bundle is passed with podman only");
    args.push(
      "-v",
      `${ca}:/run/host-ca.crt:ro`,
      "--build-arg",
      "NODE_EXTRA_CA_CERTS=/run/host-ca.crt",
    );
  }
  log(
    `building ${IMAGE} on ${base} (the engine step takes long the first time; then it is cached)`,
  );
  run(engine, [...args, "."]);
  if (inputs) {
    mkdirSync(dirname(BUILT), { recursive: true });
    writeFileSync(BUILT, `${JSON.stringify({ inputs, image: imageId(engine) })}\n`);
  }
  const size = quiet(engine, ["image", "inspect", IMAGE, "--format", "{{.Size}}"]).stdout.trim();
  log(
    `built ${IMAGE} in ${((Date.now() - started) / 1000).toFixed(0)} s, ${(Number(size) / 1e6).toFixed(0)} MB`,
  );
}

/** deploy/secrets as the README says: make-secrets for the three nodes, owned by the node user. */
function secrets() {
  if (!existsSync(join(SECRETS, "ca.crt"))) {
    log("making deploy/secrets (cluster secret, tokens, CA and node certificates)");
    const nodes = NODES.flatMap((n) => ["--node", `${n}=${n}`]);
    run(process.execPath, [join(ROOT, "scripts", "make-secrets.mjs"), SECRETS, ...nodes]);
  }
  if (process.getuid?.() === 0 && statSync(SECRETS).uid !== NODE_UID) {
    chownSync(SECRETS, NODE_UID, NODE_UID);
    for (const f of readdirSync(SECRETS)) chownSync(join(SECRETS, f), NODE_UID, NODE_UID);
    log(`deploy/secrets now belongs to uid ${NODE_UID} (the image's node user)`);
  }
}

/** A service's container, as each compose names it. */
export function containerName(engine, service, project = PROJECT) {
  return engine === "docker" ? `${project}-${service}-1` : `${project}_${service}_1`;
}

/** Runs each node's health check now: podman runs them only from systemd timers. */
function health(engine) {
  const out = {};
  for (const n of NODES) {
    const container = containerName(engine, n);
    const r =
      engine === "podman"
        ? quiet("podman", ["healthcheck", "run", container])
        : quiet("docker", ["inspect", "--format", "{{.State.Health.Status}}", container]);
    out[n] = engine === "podman" ? (r.status === 0 ? "healthy" : "unhealthy") : r.stdout.trim();
  }
  return out;
}

async function waitHealthy(engine, timeoutS) {
  const started = Date.now();
  for (;;) {
    const h = health(engine);
    if (Object.values(h).every((s) => s === "healthy")) {
      log(`every node healthy after ${((Date.now() - started) / 1000).toFixed(0)} s`);
      return;
    }
    if (Date.now() - started > timeoutS * 1000)
      throw new Error(`not healthy after ${timeoutS} s: ${JSON.stringify(h)}`);
    await new Promise((r) => setTimeout(r, 2000));
  }
}

/**
 * Every node's container stopped at once (SIGTERM: each drains), as `docker compose stop` does.
 * podman-compose 1.0 stops them one after another: each draining node would hand its deployments to
 * a node about to stop too, a cascade of placements, stagings and loads that serve nobody.
 */
function stopNodes(engine, cmd, base) {
  if (engine !== "podman") {
    run(cmd, [...base, "stop", "-t", String(STOP_GRACE_S)]);
    return;
  }
  const containers = NODES.map((n) => containerName(engine, n));
  run("podman", ["stop", "--ignore", "-t", String(STOP_GRACE_S), ...containers]);
}

async function main() {
  const argv = process.argv.slice(2);
  const verb = argv[0];
  if (!verb || verb === "--help" || verb === "-h") {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const flag = (name) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  // On a fresh host: podman and what builds the base image, installed when missing.
  if (
    !flag("--engine") &&
    (verb === "up" || verb === "build") &&
    quiet("docker", ["info"]).status !== 0
  )
    run(process.execPath, [join(ROOT, "scripts", "setup.mjs"), "--for=compose"]);
  const engine = pickEngine(flag("--engine"));
  const timeoutS = Number(flag("--timeout-s") ?? 300);
  const [cmd, base] = composeCmd(engine);
  switch (verb) {
    case "build":
      build(engine);
      return 0;
    case "up": {
      build(engine);
      secrets();
      run(cmd, [...base, "up", "-d"]);
      await waitHealthy(engine, timeoutS);
      const port = process.env.IC_PORT_1 ?? "8080";
      log(
        `ready: curl --cacert deploy/secrets/ca.crt -H "Authorization: Bearer $(cat deploy/secrets/inference.token)" https://127.0.0.1:${port}/v1/models`,
      );
      return 0;
    }
    case "health":
      process.stdout.write(`${JSON.stringify(health(engine))}\n`);
      return 0;
    case "stop":
      stopNodes(engine, cmd, base);
      return 0;
    case "down": {
      stopNodes(engine, cmd, base);
      const volumes = argv.includes("--volumes");
      // podman-compose 1.0 removes volumes one at a time with a 1 s pause after each: they go in
      // one podman call below instead.
      const drop = volumes && engine !== "podman" ? ["-v"] : [];
      run(cmd, [...base, "down", ...drop, "-t", String(STOP_GRACE_S)]);
      if (engine === "podman") {
        // podman-compose 1.0 leaves the project's network behind.
        quiet("podman", ["network", "rm", `${PROJECT}_default`]);
        const label = `label=io.podman.compose.project=${PROJECT}`;
        const names = volumes
          ? quiet("podman", ["volume", "ls", "-q", "--filter", label]).stdout.split("\n")
          : [];
        if (names.some(Boolean)) run("podman", ["volume", "rm", "-f", ...names.filter(Boolean)]);
      }
      return 0;
    }
    case "ps":
      run(cmd, [...base, "ps"]);
      return 0;
    default:
      process.stderr.write(`[compose] unknown verb "${verb}" (see --help)\n`);
      return 2;
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    log(e instanceof Error ? e.message : String(e));
    process.exit(1);
  },
);
