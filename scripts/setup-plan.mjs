// What scripts/setup.mjs installs for each use: `start` (run a cluster), `test` (start's plus the
// browser the GUI tests drive, the container tools the compose test uses and systemd-analyze),
// `publisher` (the weights publisher: no bus, no engine) and `compose` (the containerised cluster of
// scripts/compose.mjs: podman and what builds its base image). Pure, so tested.
import { parseArgs } from "node:util";
import { isPortable } from "./build-engine.mjs";

export const MODES = ["start", "test", "publisher", "compose"];

export const USAGE = `usage: node scripts/setup.mjs [--for=start|test|publisher|compose] [--no-engine] [--no-browser]

Installs, only when missing, what the chosen use needs (default: start):
  start      nats-server and openssl; cmake, g++, git and libssl-dev for the engine build; pnpm and the workspace
             dependencies; the llama.cpp engine build (cached per bundle commit)
  test       start's, plus chromium for the GUI tests (skipped when CHROMIUM_PATH is set), podman, runc,
             podman-compose and debootstrap for the compose test, and systemd-analyze (package systemd)
  publisher  pnpm and the workspace dependencies only
  compose    openssl, podman, runc, podman-compose and debootstrap (scripts/compose.mjs); no engine,
             pnpm or workspace dependencies here (the image has its own). Writes
             /etc/containers/containers.conf when it is missing (runc, cgroupfs, no default ulimits)
  --no-engine   skip the engine build (and cmake, g++, git)
  --no-browser  skip chromium
It also links the ic command onto PATH (start and test): into $IC_BIN_DIR, else /usr/local/bin as
root, else ~/.local/bin; an ic there that is not this checkout's is left alone.
Environment: ENGINE_PORTABLE=1 builds an engine that runs on any CPU of this architecture (images);
ENGINE_BACKEND=cpu|cuda forces the backend; ENGINE_CACHE_DIR moves the engine cache;
NATS_SERVER_BIN / CHROMIUM_PATH name binaries to use instead of the Debian packages.
`;

/**
 * [command looked up on PATH (or an absolute file that must exist), Debian package, environment
 * variable that names it instead].
 */
const NATS = ["nats-server", "nats-server", "NATS_SERVER_BIN"];
/** make-secrets.mjs makes the cluster CA and node certificates with it; the TLS tests too. */
const OPENSSL = ["openssl", "openssl"];
const BUILD_TOOLS = [
  ["cmake", "cmake"],
  ["g++", "g++"],
  ["git", "git"],
  // llama-server serves HTTPS (engine traffic between nodes) only when built against OpenSSL.
  ["/usr/include/openssl/ssl.h", "libssl-dev"],
];
const BROWSER = ["chromium", "chromium", "CHROMIUM_PATH"];
/** scripts/compose.mjs: podman builds and runs the images; debootstrap makes a local base image. */
const CONTAINER_TOOLS = [
  ["podman", "podman"],
  ["runc", "runc"],
  ["podman-compose", "podman-compose"],
  ["debootstrap", "debootstrap"],
  // The network backend whose DNS lets the nodes find each other by service name (node-2:6222).
  // Without them podman falls back to CNI, which has none: every node stays a cluster of one.
  ["/usr/lib/podman/netavark", "netavark"],
  ["/usr/lib/podman/aardvark-dns", "aardvark-dns"],
];
/** The test of deploy/inference-cluster.service (`systemd-analyze verify`). */
const SYSTEMD_ANALYZE = ["systemd-analyze", "systemd"];

/**
 * The plan for a command line: `{ help: true }`, or the mode, whether the engine is built (and
 * portable), and the Debian packages wanted as [command, package] pairs. Throws on a bad argument.
 */
export function setupPlan(argv, env = process.env) {
  const { values } = parseArgs({
    args: argv,
    options: {
      for: { type: "string" },
      "no-engine": { type: "boolean" },
      "no-browser": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return { help: true };
  const mode = values.for ?? "start";
  if (!MODES.includes(mode))
    throw new Error(`--for: expected one of ${MODES.join(", ")}, got "${mode}"`);
  const engine = (mode === "start" || mode === "test") && !values["no-engine"];
  const browser = mode === "test" && !values["no-browser"];
  const containers = mode === "test" || mode === "compose";
  const wanted = [
    ...(mode === "start" || mode === "test" ? [NATS, OPENSSL] : []),
    ...(mode === "compose" ? [OPENSSL] : []),
    ...(engine ? BUILD_TOOLS : []),
    ...(browser ? [BROWSER] : []),
    ...(containers ? CONTAINER_TOOLS : []),
    ...(mode === "test" ? [SYSTEMD_ANALYZE] : []),
  ];
  const debian = wanted
    .filter(([, , override]) => !(override && env[override]))
    .map(([cmd, pkg]) => [cmd, pkg]);
  return {
    help: false,
    mode,
    engine,
    portable: engine && isPortable(env),
    debian,
    containersConf: containers,
    // The compose cluster installs its workspace inside the image, not here.
    workspace: mode !== "compose",
  };
}

/**
 * Where the `ic` link goes, or null for none (the publisher and compose need no ic): IC_BIN_DIR when set,
 * /usr/local/bin as root, else ~/.local/bin.
 */
export function icLinkDir(mode, env, isRoot, home) {
  if (mode === "publisher" || mode === "compose") return null;
  if (env.IC_BIN_DIR) return env.IC_BIN_DIR;
  return isRoot ? "/usr/local/bin" : `${home}/.local/bin`;
}

/**
 * /etc/containers/containers.conf for podman where it has none: runc (crun fails on kernels with
 * hybrid cgroups), cgroupfs (no systemd as the cgroup manager needed), no default ulimits (a
 * container host may refuse podman's default RLIMIT_NOFILE) and netavark as the network backend
 * (its DNS resolves the compose services' names; podman picks CNI, without DNS, once a CNI network
 * exists). Harmless where crun would have worked. Setup rewrites a file that starts with
 * CONTAINERS_CONF_MARK and differs (an older setup's), and leaves any other alone.
 */
export const CONTAINERS_CONF_MARK = "# Written by inference-cluster's scripts/setup.mjs";
export const CONTAINERS_CONF = `${CONTAINERS_CONF_MARK} because there was none (docs/operations.md,
# "Docker Compose"): runc and cgroupfs work on hosts with hybrid cgroups or without systemd, and
# netavark's DNS lets containers find each other by name.
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
[network]
network_backend = "netavark"
`;
