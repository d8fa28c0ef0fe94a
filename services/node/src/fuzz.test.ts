// Fuzz of every endpoint of a node's HTTP API, wired as node.ts wires it (gateway, /events, /store and
// the store host) over a scripted cluster, a real StoreHost and StagingClient on temp directories.
// Generated bodies, queries, ids, paths and headers go through app.request() and through the node
// server; the properties: no 5xx for a client mistake, statuses as docs/api.md documents them, one
// error envelope, no unhandled rejection, and nothing on disk changes except what a purge (or a model
// removal) deletes.
// Also wired as node.ts wires them: the observability routes (/metrics, /v1/diagnostics/telemetry,
// /logs, runner logs over the in-process bus) and the tracing routes (trace dir inside the snapshot,
// one unreachable peer for the cluster view); no answer ever carries a file from outside a root.
// Also: the cluster storage view (the same unreachable peer), the dashboard's files and its settings
// editor (GET/PUT /admin/settings on a config file outside the snapshotted tree, applied to the live
// staging settings the storage report shows), model pulls and removals through a real PullManager
// over the store host (no hub: a pull fails at once; a removal's deletion is checked, then undone),
// and refused GET /state/stream queries (the streams themselves have their own tests at the end).
// Deterministic: a fixed seed (FUZZ_SEED overrides it; a failure prints seed and path), FUZZ_RUNS sets
// the size, FUZZ_TRACE=1 writes each request to stderr before it is sent.
import { createHash } from "node:crypto";
import { writeSync } from "node:fs";
import {
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rm,
  symlink,
  writeFile,
} from "node:fs/promises";
import { Agent, createServer, request as httpRequest } from "node:http";
import type { IncomingHttpHeaders, Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import type { Hono } from "hono";
import { getPath, getQueryParam, tryDecodeURIComponent } from "hono/utils/url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import type { Bus } from "@ic/bus";
import { loadConfig, StagingSchema } from "@ic/config";
import {
  DASHBOARD_ASSETS,
  DASHBOARD_CSP,
  dashboardComponent,
  SettingsEditSchema,
  SettingsViewSchema,
} from "@ic/dashboard";
import type { SettingsEdit, SettingsView } from "@ic/dashboard";
import { eventLogComponent, FakeDisk } from "@ic/eventlog";
import type { EventLog, EventLogComponent } from "@ic/eventlog";
import { createNodeApp, routesOf } from "@ic/http";
import type { ClusterView, PeerView } from "@ic/protocol";
import type { ApiToken, Component } from "@ic/http";
import { createLogger, LogTail } from "@ic/log";
import {
  CATALOG,
  ChatRequestSchema,
  ClusterStorageSchema,
  emptyState,
  ErrorBodySchema,
  GiB,
  httpStatusFor,
  IndexedEventSchema,
  ModelIdSchema,
  PullBodySchema,
  PullSchema,
  PurgeStagingBodySchema,
  ServiceError,
  StateDocumentSchema,
  StateQuerySchema,
  StorageReportSchema,
  StoreManifestSchema,
  TelemetryDiagnosticsSchema,
  TracingBodySchema,
} from "@ic/protocol";
import type {
  Command,
  ControlState,
  Heartbeat,
  InstanceId,
  ModelId,
  ModelRecord,
  NodeId,
  SessionId,
  TaskId,
  Telemetry,
} from "@ic/protocol";
import { LiveStagingSettings } from "@ic/staging";
import { ChromeTraceSchema, TraceStatsSchema, Tracing, tracingComponent } from "@ic/tracing";
import { TelemetryCollector, telemetryRoutes } from "@ic/worker";
import { observabilityComponent } from "./observability/component.ts";
import { nodeApi } from "./node-api.ts";
import { watchRoutes } from "./peer-watch.ts";
import { healthRoutes } from "./health-route.ts";
import { serveRunnerLogs } from "./observability/runner-logs.ts";
import {
  PullManager,
  pullRoutes,
  servePulls,
  StagingClient,
  storeComponent,
  StoreHost,
} from "@ic/store";
import { apiListener } from "./api-listener.ts";
import type { StoreRouteOptions } from "@ic/store";

const SEED = Number(process.env.FUZZ_SEED || 20_251_122);
const RUNS = Number(process.env.FUZZ_RUNS || 150);
/** Replays one case: FUZZ_SEED and FUZZ_PATH as a failure prints them; FUZZ_SHRINK=1 shrinks it. */
const fuzz = {
  seed: SEED,
  numRuns: RUNS,
  endOnFailure: !process.env.FUZZ_SHRINK,
  ...(process.env.FUZZ_PATH ? { path: process.env.FUZZ_PATH } : {}),
};

// ---- the fixture: store, staging and event-log roots inside one snapshotted tree ----

const S = "s-fuzz" as SessionId;
const SELF = "n-self" as NodeId;
const PEER = "n-peer" as NodeId;
const TINY = "acme/tiny" as ModelId;
const READY = "acme/ready" as ModelId;
const WARM = "acme/warm" as ModelId;
const LIVE = "acme/live" as ModelId;
const REMOTE = "acme/remote" as ModelId;
/** The task whose trace the fixture holds. */
const TRACE_ID = "t-fuzz-1";
const TOKENS = { admin: "t-admin", read: "t-read", inference: "t-inf" } as const;
type Scope = keyof typeof TOKENS;
const API_TOKENS: ApiToken[] = [
  { name: "ops", token: TOKENS.admin, scopes: ["admin"] },
  { name: "viewer", token: TOKENS.read, scopes: ["read"] },
  { name: "client", token: TOKENS.inference, scopes: ["inference"] },
];

/** Deterministic bytes (no randomness outside fast-check's seed). */
function bytesOf(n: number, salt: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + salt * 7) & 0xff;
  return b;
}
const sha = (b: Buffer | string) => createHash("sha256").update(b).digest("hex");

const STORE_FILES: Record<string, Buffer> = {
  "model.gguf": bytesOf(4096, 1),
  "sub/mmproj.gguf": Buffer.from("mmproj"),
  "empty.bin": Buffer.alloc(0),
};

interface Dirs {
  readonly root: string;
  /** Six levels below root, so any `../` chain up to six levels stays in the snapshot. */
  readonly base: string;
  readonly store: string;
  readonly staging: string;
  readonly events: string;
  readonly outside: string;
  readonly traces: string;
  /** This node's runner log dir, and the peer's (answering over the bus). */
  readonly runners: string;
  readonly peerRunners: string;
}

/** The secret files' contents: no answer may ever carry them. */
const SECRETS = ["outside the store", "at the top"];

/** Runner log lines: many, some long, multi-byte characters where a byte window may cut them. */
const RUNNER_LINES = Array.from({ length: 3000 }, (_, i) =>
  i % 97 === 0
    ? `line ${i} ${"é€😀".repeat(40)}`
    : `line ${i} slot print_timing ${"x".repeat(i % 50)}`,
);
const RUNNER_LOG = `${RUNNER_LINES.join("\n")}\n`;
const PEER_LINES = ["peer line 1", "peer line 2 ü"];

async function makeDirs(): Promise<Dirs> {
  const root = await mkdtemp(join(tmpdir(), "ic-fuzz-"));
  const base = join(root, "d1", "d2", "d3", "d4", "d5", "d6");
  const d = {
    root,
    base,
    store: join(base, "store"),
    staging: join(base, "staging"),
    events: join(base, "events"),
    outside: join(base, "outside"),
    traces: join(base, "traces"),
    runners: join(base, "runners"),
    peerRunners: join(base, "peer-runners"),
  };
  for (const p of [d.store, d.staging, d.events, d.outside, d.traces, d.runners, d.peerRunners])
    await mkdir(p, { recursive: true });
  await writeFile(join(d.runners, "i-ready-rank0.log"), RUNNER_LOG);
  // A planted symlink out of the log dir is never followed (404), nor a directory read (404).
  await symlink(join(d.outside, "secret.txt"), join(d.runners, "i-warm-rank0.log"));
  await writeFile(join(d.peerRunners, "i-remote-rank0.log"), `${PEER_LINES.join("\n")}\n`);
  await writeFile(join(d.outside, "secret.txt"), "outside the store\n");
  await writeFile(join(root, "top-secret.txt"), "at the top\n");
  await storeFixture(d);
  await stagingFixture(d);
  return d;
}

/** The store's model directories (again, after a DELETE /store/models removed one of them). */
async function storeFixture(d: Dirs, only?: readonly string[]): Promise<void> {
  if (!only || only.includes("acme--tiny")) {
    const model = join(d.store, "acme--tiny");
    for (const [path, data] of Object.entries(STORE_FILES)) {
      await mkdir(join(model, path, ".."), { recursive: true });
      await writeFile(join(model, path), data);
    }
    await writeFile(join(model, ".hidden"), "a dotfile is never an artifact\n");
    await symlink(join(d.outside, "secret.txt"), join(model, "link.gguf"));
  }
  if (!only || only.includes("acme--unregistered")) {
    // A directory without a manifest is not registered (nothing registers it in this test).
    await mkdir(join(d.store, "acme--unregistered"), { recursive: true });
    await writeFile(join(d.store, "acme--unregistered", "w.gguf"), "unregistered");
  }
}

/** Staged copies: one idle and complete, one in use, one incomplete with a symlink leading outside. */
async function stagingFixture(d: Dirs): Promise<void> {
  const record = (model_id: ModelId, files: Record<string, Buffer>) => ({
    version: 1,
    model_id,
    source: "store",
    files: Object.entries(files).map(([path, b]) => ({ path, bytes: b.length, sha256: sha(b) })),
    total_bytes: Object.values(files).reduce((s, b) => s + b.length, 0),
    complete: true,
    last_used_ms: 1_700_000_000_000,
  });
  const copy = async (dir: string, id: ModelId, files: Record<string, Buffer>) => {
    await mkdir(join(d.staging, dir), { recursive: true });
    for (const [p, b] of Object.entries(files)) await writeFile(join(d.staging, dir, p), b);
    await writeFile(join(d.staging, dir, ".staging.json"), JSON.stringify(record(id, files)));
  };
  await copy("acme--tiny", TINY, { "model.gguf": STORE_FILES["model.gguf"]! });
  await copy("acme--live", LIVE, { "live.gguf": bytesOf(100, 2) });
  await mkdir(join(d.staging, "acme--old"), { recursive: true });
  await writeFile(join(d.staging, "acme--old", "partial.bin"), bytesOf(50, 3));
  await symlink(d.outside, join(d.staging, "acme--old", "escape"));
  await mkdir(join(d.staging, "not-a-model"), { recursive: true });
}

/** Every entry under `dir` (symlinks not followed): type, mode, size, mtime and content hash. */
async function snapshot(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  async function walk(d: string, rel: string): Promise<void> {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const r = rel ? `${rel}/${e.name}` : e.name;
      try {
        const s = await lstat(p);
        if (e.isDirectory()) {
          out.set(`${r}/`, `dir ${s.mode} ${s.mtimeMs}`);
          await walk(p, r);
        } else if (e.isSymbolicLink()) out.set(r, `link ${await readlink(p)}`);
        else out.set(r, `file ${s.mode} ${s.size} ${s.mtimeMs} ${sha(await readFile(p))}`);
      } catch (err) {
        // A file renamed away while the snapshot read it (tracing writes a trace to a temporary
        // name, then renames it into place) is not in this snapshot.
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    }
  }
  await walk(dir, "");
  return out;
}

/**
 * Changes other than the traces tracing writes: once a PUT /v1/tracing switched it on, each chat
 * request's trace is written to the traces dir (a moment after its answer, so during a later request).
 */
function withoutTraces(changed: readonly string[]): string[] {
  const traces = "d1/d2/d3/d4/d5/d6/traces/";
  return changed.filter(
    // A trace, or its temporary file caught before its rename.
    (c) =>
      c !== `changed ${traces}` &&
      !new RegExp(`^created ${traces}\\.?\\d+_[^/]+\\.json(\\.tmp)?$`).test(c),
  );
}

function changes(a: Map<string, string>, b: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [k, v] of a) if (b.get(k) !== v) out.push(b.has(k) ? `changed ${k}` : `deleted ${k}`);
  for (const k of b.keys()) if (!a.has(k)) out.push(`created ${k}`);
  return out;
}

// ---- the scripted cluster: a replica with three models, answering commands as the master does ----

function heartbeat(peer: string, name: string): Heartbeat {
  return {
    peer_key: peer,
    name,
    host: "127.0.0.1",
    api_url: "",
    started_at: 0,
    session_id: S,
    master_peer_key: "p-self",
    is_master: peer === "p-self",
    last_index: 3,
    telemetry: {
      memory_total_bytes: 64e9,
      memory_free_bytes: 60e9,
      gpus: [],
      disk_free_bytes: 100e9,
      engine: { server_bin: "/e", rpc_bin: "/r", backend: "cpu", usable: true, overridden: false },
      declared_backend: "auto",
    },
    links: [{ peer_key: peer === "p-self" ? "p-peer" : "p-self", rtt_ms: 0.4 }],
    runners: [],
    health: [],
    sent_at: 0,
  };
}

function scriptedCluster(readyEndpoint: string): ClusterView & { commands: Command[] } {
  const state: ControlState = emptyState();
  state.session = {
    session_id: S,
    master_node_id: SELF,
    master_peer_key: "p-self",
    master_started_at: 0,
    started_at: 0,
  };
  state.index = 3;
  for (const [id, peer, name] of [
    [SELF, "p-self", "self"],
    [PEER, "p-peer", "peer"],
  ] as const) {
    state.members[id] = {
      node_id: id,
      peer_key: peer,
      name,
      api_url: "",
      host: "127.0.0.1",
      started_at: 0,
      joined_at: 0,
    };
  }
  const record = (model_id: ModelId): ModelRecord => ({
    model_id,
    file: "model.gguf",
    bytes: 4102,
    architecture: "llama",
    layers: 4,
    context_length: 2048,
    embedding_length: 64,
    head_count: 4,
    head_count_kv: 2,
    supports_tensor: true,
  });
  for (const id of [TINY, READY, WARM, REMOTE]) state.models[id] = record(id);
  const instance = (instance_id: string, model_id: ModelId) => {
    state.instances[instance_id] = {
      instance_id: instance_id as InstanceId,
      model_id,
      sharding: "Pipeline",
      created_at: 1,
      assignments: [
        {
          node_id: SELF,
          peer_key: "p-self",
          rank: 0,
          layers: 4,
          weight_bytes: 1,
          required_bytes: 1,
        },
      ],
    };
  };
  instance("i-ready", READY);
  instance("i-warm", WARM);
  // Runner logs of a rank the peer holds (it answers on the bus) and of one nobody answers for.
  state.instances["i-remote"] = {
    instance_id: "i-remote" as InstanceId,
    model_id: REMOTE,
    sharding: "Pipeline",
    created_at: 1,
    assignments: [
      { node_id: PEER, peer_key: "p-peer", rank: 0, layers: 2, weight_bytes: 1, required_bytes: 1 },
      { node_id: PEER, peer_key: "p-gone", rank: 1, layers: 2, weight_bytes: 1, required_bytes: 1 },
    ],
  };
  state.runners["i-ready/0"] = {
    instance_id: "i-ready" as InstanceId,
    node_id: SELF,
    rank: 0,
    state: "RunnerReady",
    endpoint: readyEndpoint,
    restarts: 0,
    since: 0,
  };
  state.runners["i-warm/0"] = {
    instance_id: "i-warm" as InstanceId,
    node_id: SELF,
    rank: 0,
    state: "RunnerWarmingUp",
    restarts: 0,
    since: Date.now(),
    warmup_started_at: Date.now(),
  };
  const peers: PeerView[] = [
    { heartbeat: heartbeat("p-self", "self"), lastHeard: Date.now() },
    { heartbeat: heartbeat("p-peer", "peer"), lastHeard: Date.now() },
  ];
  const commands: Command[] = [];
  return {
    commands,
    peerKey: "p-self",
    synced: true,
    isMaster: true,
    sessionId: S,
    nodeId: SELF,
    snapshot: () => state,
    livePeers: () => peers,
    // The master's documented answers, without changing the replica (runs stay independent).
    command: async (cmd) => {
      commands.push(cmd);
      if (cmd.type === "DeleteInstance" && !Object.hasOwn(state.instances, cmd.instance_id))
        throw new ServiceError("not_found", `no instance ${cmd.instance_id}`);
      // As decide.ts: a model an instance serves stays registered (conflict); others leave.
      if (cmd.type === "DeregisterModel") {
        const user = Object.values(state.instances).find((i) => i.model_id === cmd.model_id);
        if (user)
          throw new ServiceError(
            "conflict",
            `${cmd.model_id} is in use: instance ${user.instance_id} serves it`,
          );
      }
      const task = cmd.type === "CreateTask" ? { task_id: `t-${commands.length}` } : {};
      return { ok: true, index: state.index + commands.length, ...task } as never;
    },
    on: () => () => {},
  };
}

type LoopbackBus = StoreRouteOptions["bus"] & Pick<Bus, "request" | "respond">;

/**
 * The purge broadcast and the runner-log requests over an in-process bus; messages and replies go
 * through the catalog's schemas.
 */
function loopbackBus(): LoopbackBus {
  type Handler = (msg: unknown, meta: { origin: string | undefined }) => unknown;
  const key = (name: string, suffix?: string) => (suffix ? `${name}.${suffix}` : name);
  const handlers = new Map<string, Handler[]>();
  const schemas = (name: string) =>
    CATALOG[name as keyof typeof CATALOG] as unknown as {
      message: { safeParse(v: unknown): { success: boolean; data?: unknown } };
      reply?: { safeParse(v: unknown): { success: boolean; data?: unknown } };
    };
  const wire = (v: unknown): unknown => JSON.parse(JSON.stringify(v));
  const bus = {
    respond(subject: string, handler: Handler, opts?: { suffix?: string }) {
      const name = key(subject, opts?.suffix);
      const list = handlers.get(name) ?? [];
      list.push(handler);
      handlers.set(name, list);
      return () =>
        handlers.set(
          name,
          (handlers.get(name) ?? []).filter((h) => h !== handler),
        );
    },
    /** One responder's reply; no responder is an error, as nats answers it. */
    async request(name: string, msg: unknown, opts?: { suffix?: string }) {
      const { message, reply } = schemas(name);
      const parsed = message.safeParse(wire(msg));
      if (!parsed.success) throw new Error(`${name}: message does not match its schema`);
      const h = handlers.get(key(name, opts?.suffix))?.[0];
      if (!h) throw new Error("503 no responders");
      const r = reply!.safeParse(wire(await h(parsed.data, { origin: undefined })));
      if (!r.success) throw new Error(`${name}: reply does not match its schema`);
      return r.data;
    },
    async requestMany(name: string, msg: unknown) {
      const { message, reply } = schemas(name);
      const parsed = message.safeParse(wire(msg));
      if (!parsed.success) return [];
      const out: unknown[] = [];
      for (const h of handlers.get(name) ?? []) {
        const r = reply!.safeParse(wire(await h(parsed.data, { origin: undefined })));
        if (r.success) out.push(r.data);
      }
      return out;
    },
  };
  return bus as unknown as LoopbackBus;
}

// ---- requests and answers ----

interface Req {
  readonly app: "anonymous" | "tokens";
  readonly method: string;
  /** The request target as sent on the wire (path and query). */
  readonly target: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: Buffer | undefined;
  /** Send the body with Transfer-Encoding: chunked instead of Content-Length. */
  readonly chunked?: boolean;
  /** The endpoint the request was generated for; "other" when its path was mangled. */
  readonly endpoint: Endpoint;
  /** Scope tag of the Authorization header: the scope it grants, null for none, "either" if unclear. */
  readonly holder: Scope | null | "either";
  /** Origin tag: own, foreign, or "either" (an own origin written unusually). */
  readonly origin: "none" | "own" | "foreign" | "either";
  /** Content-type tag: JSON, not JSON, absent, or "either". */
  readonly contentType: "json" | "other" | "absent" | "either";
  /** Statuses the endpoint may answer past the gates, where the generator knows them. */
  readonly want?: readonly number[] | undefined;
}

type Endpoint =
  | "state"
  | "ping"
  | "models"
  | "chat"
  | "place"
  | "previews"
  | "delete"
  | "instances"
  | "restart"
  | "events"
  | "storage"
  | "purge"
  | "store-list"
  | "manifest"
  | "file"
  | "tracing"
  | "tracing-put"
  | "traces"
  | "trace"
  | "trace-stats"
  | "cluster-traces"
  | "cluster-stats"
  | "metrics"
  | "telemetry"
  | "logs"
  | "health"
  | "runner-logs"
  | "storage-cluster"
  | "state-stream"
  | "settings"
  | "settings-put"
  | "dashboard"
  | "pull-start"
  | "pulls"
  | "pull-cancel"
  | "model-delete"
  | "other";

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | undefined>;
  readonly body: Buffer;
}

const agent = new Agent({ keepAlive: true, maxSockets: 4 });

/** The framing headers a client sends (app.request() sends them too, so both transports agree). */
function framed(r: Req): Record<string, string> {
  const headers: Record<string, string> = { ...r.headers };
  if (r.chunked) headers["transfer-encoding"] = "chunked";
  else headers["content-length"] = String(r.body?.length ?? 0);
  return headers;
}

function sendWire(port: number, r: Req): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers = framed(r);
    const req = httpRequest(
      { host: "127.0.0.1", port, method: r.method, path: r.target, headers, agent },
      (res) => {
        const parts: Buffer[] = [];
        res.on("data", (b: Buffer) => parts.push(b));
        res.on("end", () =>
          resolve({
            status: res.statusCode!,
            headers: flat(res.headers),
            body: Buffer.concat(parts),
          }),
        );
        res.on("error", reject);
      },
    );
    req.setTimeout(15_000, () => req.destroy(new Error(`no answer to ${r.method} ${r.target}`)));
    req.on("error", reject);
    req.end(r.body);
  });
}

function flat(h: IncomingHttpHeaders): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(h)) out[k] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}

async function sendInProcess(app: Hono, r: Req): Promise<Answer | undefined> {
  let request: Request;
  try {
    const bodyless = r.method === "GET" || r.method === "HEAD";
    request = new Request(`http://localhost${r.target}`, {
      method: r.method,
      headers: { ...framed(r), host: "localhost" },
      ...(bodyless || r.body === undefined ? {} : { body: r.body }),
    });
  } catch {
    return undefined; // not expressible as a web Request (fetch refuses it before it is sent)
  }
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer to ${r.method} ${r.target}`)), 15_000);
  });
  try {
    const res = await Promise.race([app.request(request), deadline]);
    const headers: Record<string, string | undefined> = {};
    res.headers.forEach((v, k) => (headers[k] = v));
    return {
      status: res.status,
      headers,
      body: Buffer.from(await Promise.race([res.arrayBuffer(), deadline])),
    };
  } finally {
    clearTimeout(timer);
  }
}

// ---- generators ----

/** Characters that make ids, paths and strings interesting. */
const NASTY = [
  "..",
  "%2e%2e",
  "%2E%2E%2F",
  "%2f",
  "%00",
  "\\",
  "%5c",
  "/",
  "%",
  "%zz",
  "%c0%ae",
  "%ff",
  "%e2%80%ae",
  "%ed%a0%80",
  "ü",
  "%C3%BC",
  "~",
  "'",
  '"',
  "<",
  "+",
  " ",
  "?",
  "#",
  ";",
  "__proto__",
  "constructor",
  "toString",
];

const nastyPiece = fc.oneof(
  fc.constantFrom(...NASTY),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "binary", maxLength: 6 }),
);
const nastyString = fc.array(nastyPiece, { maxLength: 6 }).map((a) => a.join(""));

/** Makes a string safe for a request line: percent-encodes what no client could send raw. */
function wireSafe(s: string): string {
  let out = "";
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    out += c <= 0x20 || c >= 0x7f || ch === "#" ? encodeURIComponent(ch).replace(/%25/g, "%") : ch;
  }
  return out;
}
// encodeURIComponent fails on lone surrogates: encode those by hand (as the invalid UTF-8 they are).
function encodeLoose(s: string): string {
  let out = "";
  for (const ch of s) {
    try {
      out += encodeURIComponent(ch);
    } catch {
      out += "%ED%A0%80";
    }
  }
  return out;
}
function wireSafeLoose(s: string): string {
  try {
    return wireSafe(s);
  } catch {
    return wireSafe(encodeLoose(s));
  }
}

/** A path segment: valid, a known id, or nasty; sent raw (wire-safe), encoded, or double-encoded. */
function segment(valid: readonly string[]) {
  return fc
    .tuple(
      fc.oneof(
        { weight: 3, arbitrary: fc.constantFrom(...valid) },
        { weight: 2, arbitrary: nastyString },
      ),
      fc.constantFrom("raw", "encoded", "double") as fc.Arbitrary<"raw" | "encoded" | "double">,
    )
    .map(([s, how]) =>
      how === "raw"
        ? wireSafeLoose(s)
        : how === "encoded"
          ? encodeLoose(s)
          : encodeLoose(encodeLoose(s)),
    );
}

const query = (keys: readonly string[], values: fc.Arbitrary<string>) =>
  fc
    .array(
      fc.oneof(
        fc.tuple(fc.constantFrom(...keys), values).map(([k, v]) => `${k}=${v}`),
        fc.constantFrom(...keys), // a key without a value
        fc.tuple(nastyString, nastyString).map(([k, v]) => `${encodeLoose(k)}=${encodeLoose(v)}`),
        fc.constantFrom("", "=", "&", "=x", "%", "a=%zz", "a=%00"),
      ),
      { maxLength: 5 },
    )
    .map((pairs) => (pairs.length ? `?${pairs.join("&")}` : ""));

const numberish = fc.oneof(
  fc.constantFrom("0", "1", "-1", "5000", "5001", "1e3", "0x10", "1.5", "NaN", "Infinity", "-0"),
  fc.constantFrom("9007199254740993", "1e400", "", " 1", "1 ", "01", "+1", "１"),
  fc.integer().map(String),
);

/** Any JSON value, including unusual strings (lone surrogates, control characters). */
const anyJson = fc.jsonValue({ maxDepth: 4, stringUnit: "binary" });

/** A JSON text: serialized values plus hand-written oddities a serializer never produces. */
function jsonText(value: fc.Arbitrary<unknown>): fc.Arbitrary<Buffer> {
  return fc.oneof(
    { weight: 6, arbitrary: value.map((v) => Buffer.from(JSON.stringify(v) ?? "null")) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(value, fc.nat({ max: 100 }), fc.constantFrom(...ODD_BYTES))
        .map(([v, at, bytes]) => {
          const t = Buffer.from(JSON.stringify(v) ?? "null");
          const i = Math.min(t.length, Math.floor((at / 100) * t.length));
          return Buffer.concat([t.subarray(0, i), bytes, t.subarray(i)]);
        }),
    },
    { weight: 1, arbitrary: fc.constantFrom(...ODD_TEXTS).map((t) => Buffer.from(t)) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom(1, 63, 64, 65, 1_000, 100_000),
          fc.constantFrom("[" as const, '{"a":' as const),
        )
        .map(([n, open]) => Buffer.from(deep(n, open))),
    },
  );
}

const ODD_BYTES = [
  Buffer.from([0xff]),
  Buffer.from([0xc0, 0xae]),
  Buffer.from([0xed, 0xa0, 0x80]),
  Buffer.from([0xe2, 0x82]),
  Buffer.from([0x00]),
  Buffer.from("\\ud800"),
  Buffer.from('"\\udfff"'),
  Buffer.from("\ufeff"),
];

const ODD_TEXTS = [
  "",
  " ",
  "null",
  "[]",
  '"str"',
  "0",
  "1e999",
  "-",
  "{",
  "}",
  '{"a":1,}',
  "\ufeff{}",
  "{}garbage",
  '{"__proto__":{"model":"acme/ready"}}',
  '{"constructor":{"prototype":{"polluted":1}}}',
  `"${"x".repeat(1 << 20)}"`,
  `[${"1,".repeat(100_000)}1]`,
];

/** A JSON text fragment, spliced as is: nesting and numbers no JS value could be serialized to. */
type Raw = string;
const raw = (a: fc.Arbitrary<unknown>): fc.Arbitrary<Raw> =>
  a.map((v) => JSON.stringify(v) ?? "null");
const deep = (n: number, open: "[" | '{"a":') =>
  `${open.repeat(n)}0${(open === "[" ? "]" : "}").repeat(n)}`;

/** Values that break code past the edge: wrong types, huge numbers, deep nesting, odd strings. */
const nastyRaw: fc.Arbitrary<Raw> = fc.oneof(
  { weight: 3, arbitrary: raw(anyJson) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "1e999",
      "-1e999",
      "1e-999",
      "123456789012345678901234567890",
      "-0",
      "0.5",
      "1.0",
      '"NaN"',
      '"Infinity"',
      '"1"',
      '"0x10"',
      "true",
      "null",
      "[]",
      "{}",
    ),
  },
  {
    weight: 3,
    arbitrary: fc
      .tuple(
        fc.constantFrom(2, 62, 63, 64, 65, 1_000, 100_000),
        fc.constantFrom("[" as const, '{"a":' as const),
      )
      .map(([n, open]) => deep(n, open)),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom('"\\ud800"', '"\\udfff\\ud800x"', '"a\\u0000b"', '"\\u202e"'),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(1 << 12, 1 << 20).map((n) => JSON.stringify("x".repeat(n))),
  },
);

/** An object text from base fields, with some replaced, removed or added. */
function mutatedObject(
  base: Record<string, fc.Arbitrary<Raw>>,
  extraKeys: readonly string[],
): fc.Arbitrary<Raw> {
  const keys = Object.keys(base);
  const mutation = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.tuple(fc.constantFrom(...extraKeys), nastyRaw).map(([k, v]) => ({ k, v })),
    },
    {
      weight: 2,
      arbitrary: fc.tuple(fc.constantFrom(...keys), nastyRaw).map(([k, v]) => ({ k, v })),
    },
    { weight: 1, arbitrary: fc.constantFrom(...keys).map((k) => ({ k, v: undefined })) },
  );
  const mutations = fc.oneof(
    { weight: 2, arbitrary: fc.constant([]) },
    { weight: 3, arbitrary: fc.array(mutation, { minLength: 1, maxLength: 2 }) },
  );
  return fc.tuple(fc.record(base), mutations).map(([fields, muts]) => {
    const entries = Object.entries(fields) as [string, Raw | undefined][];
    for (const { k, v } of muts) {
      const at = entries.findIndex(([key]) => key === k);
      if (at >= 0) entries[at] = [k, v];
      else entries.push([k, v]);
    }
    const kept = entries.filter((e): e is [string, Raw] => e[1] !== undefined);
    return `{${kept.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`;
  });
}

const messageRaw = mutatedObject(
  {
    role: fc.constantFrom('"user"', '"system"', '"assistant"'),
    content: fc.constantFrom('"hi"', "null", '[{"type":"text","text":"hi"}]', '"h\\u00e9"'),
  },
  ["name", "tool_calls", "extra"],
);

const chatRaw = mutatedObject(
  {
    model: fc
      .constantFrom(READY, READY, WARM, TINY, "acme/none", "constructor", "__proto__")
      .map((m) => JSON.stringify(m)),
    messages: fc.oneof(
      { weight: 3, arbitrary: fc.constant('[{"role":"user","content":"hi"}]') },
      {
        weight: 2,
        arbitrary: fc
          .array(messageRaw, { minLength: 1, maxLength: 2 })
          .map((m) => `[${m.join(",")}]`),
      },
    ),
    max_tokens: fc.constantFrom("2", "1"),
    stream: fc.constantFrom("false", "true"),
  },
  [
    "temperature",
    "top_p",
    "n",
    "max_completion_tokens",
    "tools",
    "response_format",
    "extra",
    "__proto__",
    "constructor",
  ],
);

const placeRaw = mutatedObject(
  {
    model_id: fc.constantFrom(TINY, TINY, READY, "acme/none").map((m) => JSON.stringify(m)),
    min_nodes: fc.constantFrom("1", "2"),
    excluded_nodes: fc.constantFrom("[]", JSON.stringify([PEER]), '["n-stale"]'),
    sharding: fc.constantFrom('"Pipeline"', '"Tensor"'),
  },
  ["instance_type", "surprise", "__proto__"],
);

const purgeRaw = fc.oneof(
  fc.constant("{}"),
  mutatedObject(
    { modelId: fc.constantFrom(TINY, LIVE, "acme/old", "acme/none").map((m) => JSON.stringify(m)) },
    ["other", "__proto__"],
  ),
);

/** A body: the text as is, or with bytes no JSON text may hold (invalid UTF-8, NUL, a BOM). */
function bodyBytes(text: fc.Arbitrary<Raw>): fc.Arbitrary<Buffer> {
  return fc.oneof(
    { weight: 5, arbitrary: text.map((t) => Buffer.from(t)) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(text, fc.nat({ max: 100 }), fc.constantFrom(...ODD_BYTES))
        .map(([t, at, bytes]) => {
          const b = Buffer.from(t);
          const i = Math.min(b.length, Math.floor((at / 100) * b.length));
          return Buffer.concat([b.subarray(0, i), bytes, b.subarray(i)]);
        }),
    },
    { weight: 1, arbitrary: jsonText(anyJson) },
  );
}

interface Shape {
  readonly endpoint: Endpoint;
  readonly method: string;
  readonly target: string;
  readonly body?: Buffer | undefined;
  readonly mangled?: boolean;
  readonly want?: readonly number[];
}

const PLAIN_PATHS: Partial<Record<Endpoint, string>> = {
  state: "/state",
  models: "/v1/models",
  instances: "/instances",
  storage: "/store/storage",
  "store-list": "/store/models",
};

/** Percent-encodes every character of a segment, or some of them (equivalent URLs). */
const spelled = (seg: string) =>
  fc.constantFrom(
    seg,
    [...seg].map((ch) => `%${ch.charCodeAt(0).toString(16).padStart(2, "0")}`).join(""),
    seg.replace(/[a-z]/, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`),
  );

const knownFile = fc
  .constantFrom(...Object.keys(STORE_FILES))
  .chain((path) => fc.tuple(...path.split("/").map(spelled)).map((segs) => segs.join("/")));

const fileTarget = fc.oneof(
  {
    weight: 2,
    arbitrary: fc
      .tuple(spelled("acme"), spelled("tiny"), knownFile)
      .map(([org, name, path]) => `/store/models/${org}/${name}/files/${path}`),
  },
  fc
    .tuple(
      segment(["acme", "ACME", "acme--tiny"]),
      segment(["tiny", "unregistered", "tiny.."]),
      fc.oneof(
        fc.constantFrom(
          "model.gguf",
          "sub/mmproj.gguf",
          "sub%2Fmmproj.gguf",
          "empty.bin",
          ".hidden",
          "link.gguf",
          ".ic-manifest.json",
          "../../outside/secret.txt",
          "..%2f..%2f..%2foutside%2fsecret.txt",
          "%2e%2e/%2e%2e/outside/secret.txt",
          "sub/../model.gguf",
          "sub\\..\\model.gguf",
          "%2Fetc%2Fpasswd",
          "/etc/passwd",
          "model.gguf%00.txt",
          "",
        ),
        fc
          .array(segment(["model.gguf", "sub", "mmproj.gguf"]), { minLength: 1, maxLength: 4 })
          .map((a) => a.join("/")),
      ),
    )
    .map(([org, name, path]) => `/store/models/${org}/${name}/files/${path}`),
);

/** A well-formed query, or a mangled one. */
const queryOf = (
  good: fc.Arbitrary<string>,
  keys: readonly string[],
  values: fc.Arbitrary<string>,
) => fc.oneof(good, query(keys, values));

// ---- the observability and tracing endpoints ----

/** A query the route accepts (`good`: 200) or a mangled one (`bad`: 200, or the listed errors). */
function wanted(
  good: fc.Arbitrary<string>,
  keys: readonly string[],
  values: fc.Arbitrary<string>,
  bad: readonly number[],
): fc.Arbitrary<{ q: string; want: readonly number[] }> {
  return fc.oneof(
    good.map((q) => ({ q, want: [200] })),
    query(keys, values).map((q) => ({ q, want: [200, ...bad] })),
  );
}

const optionalQuery = (parts: fc.Arbitrary<string | null>[]) =>
  fc.tuple(...parts).map((ps) => {
    const q = ps.filter((x): x is string => x !== null);
    return q.length ? `?${q.join("&")}` : "";
  });
const opt = (key: string, values: readonly string[]) =>
  fc.option(fc.constantFrom(...values).map((v) => `${key}=${v}`));

const limitQuery = wanted(
  optionalQuery([opt("limit", ["1", "2", "100", "1000"])]),
  ["limit"],
  fc.oneof(numberish.map(encodeLoose), nastyString.map(encodeLoose)),
  [400],
);

const traceId = segment([
  TRACE_ID,
  TRACE_ID,
  "t-none",
  "a".repeat(128),
  "x".repeat(129),
  "-t",
  "t_1",
]);
const anyQuery = fc.oneof(
  { weight: 3, arbitrary: fc.constant("") },
  query(["a", "limit"], nastyString.map(encodeLoose)),
);

/** Runner-log targets: a known id with a good query has one documented answer. */
const RUNNER_IDS = [
  "i-ready",
  "i-remote",
  "i-warm",
  "i-unknown",
  "i-ready-rank0",
  "constructor",
  "toString",
  "x".repeat(129),
];
function runnerLogWant(id: string, rank: number): number {
  if (id.length > 128) return 400;
  if (id === "i-ready") return rank === 0 ? 200 : 404;
  if (id === "i-remote") return rank === 0 ? 200 : rank === 1 ? 503 : 404;
  return 404; // i-warm's log is a symlink out of the dir; the others are no instance
}
const runnerLogTarget: fc.Arbitrary<Shape> = fc
  .tuple(
    fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom("i-ready", "i-remote") },
      { weight: 2, arbitrary: segment(RUNNER_IDS) },
    ),
    fc.oneof(
      {
        weight: 3,
        arbitrary: fc
          .tuple(
            fc.option(fc.constantFrom(0, 0, 1, 1, 2, 31)),
            opt("tail", ["1", "2", "200", "5000"]),
            opt("max_bytes", ["1", "100", "4096", "131072", "262144"]),
            opt("format", ["json", "text"]),
          )
          .map(([rank, ...rest]) => ({
            rank: rank ?? 0,
            q: [rank === null ? null : `rank=${rank}`, ...rest].filter((x) => x !== null),
          })),
      },
      {
        weight: 2,
        arbitrary: query(
          ["rank", "tail", "max_bytes", "format"],
          fc.oneof(numberish.map(encodeLoose), fc.constantFrom("json", "text", "TEXT", "html")),
        ).map((q) => ({ rank: undefined, q: q ? [q.slice(1)] : [] })),
      },
    ),
  )
  .map(([id, { rank, q }]) => {
    const target = `/instances/${id}/logs${q.length ? `?${q.join("&")}` : ""}`;
    const want =
      RUNNER_IDS.includes(id) && rank !== undefined
        ? [runnerLogWant(id, rank)]
        : [200, 400, 404, 503];
    return routed({ endpoint: "runner-logs" as const, method: "GET", target, want });
  });

const LEVELS = ["trace", "debug", "info", "warn", "error", "fatal"];
const logsQuery = wanted(
  optionalQuery([
    opt("tail", ["0", "1", "3", "200", "5000"]),
    opt("level", LEVELS),
    opt("follow", ["0", "false"]),
  ]),
  ["tail", "level"],
  fc.oneof(
    numberish.map(encodeLoose),
    fc.constantFrom(...LEVELS, "INFO", "warning", "", "__proto__"),
  ),
  [400],
).filter(({ q }) => !/follow=(1|true)/i.test(q));

const tracingRaw = fc.oneof(
  mutatedObject({ enabled: fc.constantFrom("true", "false") }, ["extra", "__proto__", "Enabled"]),
  raw(anyJson),
);

/** The new endpoints' shapes (one weighted group, so the older endpoints keep their share). */
const observabilityShapes: fc.Arbitrary<Shape> = fc.oneof(
  anyQuery.map((q) => ({
    endpoint: "tracing" as const,
    method: "GET",
    target: `/v1/tracing${q}`,
    want: [200],
  })),
  bodyBytes(tracingRaw).map((body) => ({
    endpoint: "tracing-put" as const,
    method: "PUT",
    target: "/v1/tracing",
    body,
  })),
  limitQuery.map(({ q, want }) => ({
    endpoint: "traces" as const,
    method: "GET",
    target: `/v1/traces${q}`,
    want,
  })),
  limitQuery.map(({ q, want }) => ({
    endpoint: "cluster-traces" as const,
    method: "GET",
    target: `/v1/traces/cluster${q}`,
    want,
  })),
  fc
    .tuple(traceId, anyQuery)
    .map(([id, q]) =>
      routed({ endpoint: "trace" as const, method: "GET", target: `/v1/traces/${id}${q}` }),
    ),
  fc.tuple(traceId, anyQuery).map(([id, q]) =>
    routed({
      endpoint: "trace-stats" as const,
      method: "GET",
      target: `/v1/traces/${id}/stats${q}`,
    }),
  ),
  fc.tuple(traceId, anyQuery).map(([id, q]) =>
    routed({
      endpoint: "cluster-stats" as const,
      method: "GET",
      target: `/v1/traces/cluster/${id}/stats${q}`,
    }),
  ),
  anyQuery.map((q) => ({
    endpoint: "metrics" as const,
    method: "GET",
    target: `/metrics${q}`,
    want: [200],
  })),
  anyQuery.map((q) => ({
    endpoint: "telemetry" as const,
    method: "GET",
    target: `/v1/diagnostics/telemetry${q}`,
    want: [200],
  })),
  logsQuery.map(({ q, want }) => ({
    endpoint: "logs" as const,
    method: "GET",
    target: `/logs${q}`,
    want,
  })),
  { weight: 2, arbitrary: runnerLogTarget },
);

/** The routes of id-bearing targets: an id that resolves the path elsewhere ("..") is mangled. */
const ROUTE: Partial<Record<Endpoint, RegExp>> = {
  trace: /^\/v1\/traces\/[^/]+$/,
  "trace-stats": /^\/v1\/traces\/[^/]+\/stats$/,
  "cluster-stats": /^\/v1\/traces\/cluster\/[^/]+\/stats$/,
  "runner-logs": /^\/instances\/[^/]+\/logs$/,
};
const routed = <T extends Shape>(shape: T): T => {
  const re = ROUTE[shape.endpoint];
  return re && !re.test(routedPath(shape.target)) ? { ...shape, mangled: true } : shape;
};

/** The tracing answers that are 200 by path (any id spelling the router resolves to one). */
const TRACE_OK: Partial<Record<Endpoint, string>> = {
  trace: `/v1/traces/${TRACE_ID}`,
  "trace-stats": `/v1/traces/${TRACE_ID}/stats`,
  "cluster-stats": `/v1/traces/cluster/${TRACE_ID}/stats`,
};
const TRACE_ANY_OK = new Set([...Object.values(TRACE_OK), "/v1/traces/cluster", "/v1/traces"]);

// ---- the node's other extensions: cluster storage, the state stream, settings, dashboard, pulls ----

/** The path Hono routes on (its own decoding: `%2F` and `%25` stay encoded); undefined if none. */
function routerPath(target: string): string | undefined {
  try {
    return getPath(new Request(`http://localhost${target}`));
  } catch {
    return undefined;
  }
}

/**
 * The model id a `{org}/{name}` target under `prefix` names as the pull routes read it (params decoded
 * once more), "bad" for a malformed one (`..`, not two segments), undefined when it is not under
 * `prefix` at all (the path was resolved elsewhere).
 */
function pathModelId(target: string, prefix: string): ModelId | "bad" | undefined {
  const p = routerPath(target);
  if (p === undefined || !p.startsWith(prefix)) return undefined;
  const segs = p.slice(prefix.length).split("/");
  if (segs.length !== 2 || segs.includes("")) return "bad";
  const id = ModelIdSchema.safeParse(segs.map(tryDecodeURIComponent).join("/"));
  return id.success ? id.data : "bad";
}

/** Models the generated pulls name (the store host has no hub: each pull fails at once). */
const PULL_IDS: readonly string[] = ["acme/pulled", "acme/other", READY];
/** Directories on the store volume (the second one not registered): a removal deletes them. */
const STORED: readonly string[] = [TINY, "acme/unregistered"];
/** Models an instance serves: the master refuses their removal. */
const SERVED: readonly string[] = [READY, WARM, REMOTE];

/** docs/api.md, DELETE /store/models/{org}/{name}: what each id may answer. */
function modelDeleteWant(id: ModelId | "bad"): number[] {
  if (id === "bad") return [400];
  // The same request goes out twice: the second finds the model gone.
  const want = STORED.includes(id) ? [200, 404] : SERVED.includes(id) ? [409] : [404];
  // A pull of it queued or running refuses first (the generated pulls fail within a few ticks).
  return PULL_IDS.includes(id) && !want.includes(409) ? [...want, 409] : want;
}

/** docs/api.md, DELETE /store/pulls/{org}/{name}: cancelled or dismissed (200), never asked or already dismissed (404). */
const pullCancelWant = (id: ModelId | "bad"): number[] =>
  id === "bad" ? [400] : PULL_IDS.includes(id) ? [200, 404] : [404];

/** `{org}/{name}` tails: known ids spelled in equivalent ways, nasty segments, malformed ids. */
function modelPathTail(ids: readonly string[]) {
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc
        .constantFrom(...ids)
        .chain((id) => fc.tuple(...id.split("/").map(spelled)).map((s) => s.join("/"))),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(segment(["acme", "ACME", "a--b"]), segment(["tiny", "none", "pulled", ".."]))
        .map(([org, name]) => `${org}/${name}`),
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        "a/b/c",
        "..%2Fx",
        "a%2Fb/c",
        "acme%2Ftiny",
        "acme/..",
        "acme/.x",
        "acme/a--b",
        "acme/",
        "",
        "acme",
        `acme/${"x".repeat(97)}`,
        "acme/tiny/",
        "acme/tiny/files/model.gguf",
        "acme//tiny",
        "%2e%2e/tiny",
        "acme/%2e%2e",
        "acme/ti%00ny",
        "acme/tiny%2F..",
      ),
    },
  );
}

/** A DELETE of a model id under `prefix`, with its documented statuses (mangled off the route). */
function modelIdShape(
  endpoint: "pull-cancel" | "model-delete",
  prefix: string,
  ids: readonly string[],
  want: (id: ModelId | "bad") => number[],
): fc.Arbitrary<Shape> {
  return modelPathTail(ids).map((tail) => {
    const target = `${prefix}${tail}`;
    const id = pathModelId(target, prefix);
    return id === undefined
      ? { endpoint, method: "DELETE", target, mangled: true }
      : { endpoint, method: "DELETE", target, want: want(id) };
  });
}

const pullRaw = fc.oneof(
  mutatedObject(
    {
      model_id: fc
        .constantFrom(...PULL_IDS, ...PULL_IDS, "acme/..", "../x", "a/b/c", "acme", "")
        .map((m) => JSON.stringify(m)),
    },
    ["revision", "extra", "modelId", "__proto__"],
  ),
  mutatedObject(
    {
      model_id: fc.constantFrom(...PULL_IDS).map((m) => JSON.stringify(m)),
      revision: fc
        .constantFrom("main", "main", "v1.0", "refs/pr/1", "../main", "", "-x", "a".repeat(201))
        .map((m) => JSON.stringify(m)),
    },
    ["extra"],
  ),
);

/** docs/api.md, POST /store/pulls: a new pull (202), the live one (200), another revision (409). */
function pullStartWant(body: Buffer): number[] {
  const valid = validBody(body, PullBodySchema) as { revision?: string } | undefined;
  if (!valid) return [400];
  return valid.revision === undefined ? [200, 202] : [200, 202, 409];
}

const SETTING_KEYS = ["cleanup_on_deactivate", "staging_keep_recent_gb", "headroom_gb"] as const;
/** The defaults `staging` shows for a key the file no longer names (config schema). */
const SETTING_DEFAULTS = {
  cleanup_on_deactivate: true,
  staging_keep_recent_gb: 40,
  headroom_gb: 10,
};

/** A value for a staging key: mostly one the config schema takes, else a wrong type or sign. */
const settingValue = (key: (typeof SETTING_KEYS)[number]): fc.Arbitrary<Raw> =>
  fc.oneof(
    {
      weight: 4,
      arbitrary:
        key === "cleanup_on_deactivate"
          ? fc.constantFrom("true", "false", "null")
          : fc.oneof(
              {
                weight: 3,
                // Huge values too: the config schema refuses sizes past 1048576 GiB, so the answers'
                // byte counts stay safe integers (2^53 bytes is 8388608 GiB) and JSON numbers.
                arbitrary: fc.constantFrom(
                  ...["0", "5", "40", "0.5", "1e3", "-0", "null", "1048576", "1048577", "8388608"],
                  ...["1e15", "1e300", "1.7976931348623157e308"],
                ),
              },
              {
                weight: 1,
                arbitrary: fc
                  .double({ min: 0, max: 1e6, noNaN: true })
                  .map((v) => JSON.stringify(v)),
              },
            ),
    },
    {
      weight: 1,
      arbitrary: fc.oneof(
        nastyRaw,
        fc.constantFrom("-1", "-0.001", '"5"', '"true"', "1e999", "-1e999", "0", "1", "[]", "{}"),
      ),
    },
  );

/** One section of an edit: some of the keys, now and then an unknown one. */
const settingSection: fc.Arbitrary<Raw> = fc
  .tuple(
    fc
      .subarray([...SETTING_KEYS])
      .chain((keys) =>
        fc.tuple(...keys.map((k) => settingValue(k).map((v): [string, Raw] => [k, v]))),
      ),
    fc.oneof(
      { weight: 6, arbitrary: fc.constant(null) },
      {
        weight: 1,
        arbitrary: fc.tuple(
          fc.constantFrom("nope", "__proto__", "Headroom_gb", "headroom", "", "model_store"),
          nastyRaw,
        ),
      },
    ),
  )
  .map(
    ([kvs, extra]) =>
      `{${[...kvs, ...(extra ? [extra] : [])].map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",")}}`,
  );

const settingsRaw: fc.Arbitrary<Raw> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .record({ staging: settingSection, node_override: settingSection }, { requiredKeys: [] })
      .map(
        (r) =>
          `{${Object.entries(r)
            .map(([k, v]) => `${JSON.stringify(k)}:${v}`)
            .join(",")}}`,
      ),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      "{}",
      '{"staging":null}',
      '{"staging":[]}',
      '{"staging":{},"extra":1}',
      '{"node_overrides":{"self":{}}}',
      '{"model_store":{"staging":{"headroom_gb":1}}}',
      '{"__proto__":{"staging":{}}}',
      "[]",
      '"staging"',
      "null",
      "5",
    ),
  },
  { weight: 1, arbitrary: nastyRaw },
);

/** docs/api.md, PUT /admin/settings: the edit the node takes (200), or undefined (400). */
function settingsEdit(body: Buffer | undefined): SettingsEdit | undefined {
  const edit = validBody(body, SettingsEditSchema) as SettingsEdit | undefined;
  if (!edit) return undefined;
  for (const section of [edit.staging, edit.node_override]) {
    for (const [k, v] of Object.entries(section ?? {})) {
      if (v === null || v === undefined) continue;
      // The config schema decides (a boolean, numbers >= 0), as the candidate file's load does.
      if (!StagingSchema.shape[k as keyof typeof StagingSchema.shape].safeParse(v).success)
        return undefined;
    }
  }
  return edit;
}

/** The dashboard's static files as the package ships them. */
const DASHBOARD_PUBLIC = fileURLToPath(new URL("../../dashboard/public/", import.meta.url));

const dashboardTarget = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .constantFrom(...Object.keys(DASHBOARD_ASSETS))
      .chain((p) =>
        p === "/"
          ? fc.constant("/")
          : fc.tuple(...p.slice(1).split("/").map(spelled)).map((s) => `/${s.join("/")}`),
      ),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "/dashboard/",
      "/dashboard/index.html",
      "/dashboard/app.js/",
      "/dashboard/APP.JS",
      "/dashboard/app.js%00",
      "/dashboard/app.js.map",
      "/dashboard/../dashboard/style.css",
      "/dashboard//app.js",
      "/dashboard/%2e%2e/public/app.js",
      "/dashboard/public/app.js",
      "/dashboard/%2Fapp.js",
      "/dashboard/..%2Fpublic%2Fapp.js",
      "/dashboard/..%2F..%2F..%2Fpackage.json",
      "/index.html",
    ),
  },
  {
    weight: 2,
    arbitrary: fc
      .array(segment(["app.js", "style.css", "..", "dashboard", "public"]), {
        minLength: 1,
        maxLength: 3,
      })
      .map((a) => `/dashboard/${a.join("/")}`),
  },
);

/** docs/api.md: the three files are 200; any other path under /dashboard/ is 404. */
function dashboardShape(target: string, method: string): Shape {
  const p = routerPath(target);
  if (p !== undefined && Object.hasOwn(DASHBOARD_ASSETS, p))
    return { endpoint: "dashboard", method, target, want: [200] };
  if (p?.startsWith("/dashboard/")) return { endpoint: "dashboard", method, target, want: [404] };
  return { endpoint: "dashboard", method, target, mangled: true };
}

/** A `links` the stream refuses (as the route parses its query): never a stream that stays open. */
const badStateQuery = fc
  .oneof(
    fc
      .tuple(
        fc.oneof(
          fc.constantFrom("2", "", "true", "01", "%31%31", "1+", "-1", "%00", "%zz", "%EF%BC%91"),
          nastyString.map(encodeLoose),
        ),
        fc.array(
          fc.tuple(fc.constantFrom("a", "link", "LINKS", "links_"), nastyString.map(encodeLoose)),
          { maxLength: 2 },
        ),
      )
      .map(([v, rest]) => `?${[`links=${v}`, ...rest.map(([k, x]) => `${k}=${x}`)].join("&")}`),
    fc.constantFrom("?links", "?links=&links=1", "?a=1&links=x"),
    query(["links"], nastyString.map(encodeLoose)),
  )
  .filter(
    (q) =>
      !StateQuerySchema.safeParse(getQueryParam(new URL(`http://localhost/state/stream${q}`).href))
        .success,
  );

/** A GET that answers 200 whatever its query. */
const readable = (endpoint: Endpoint, path: string): fc.Arbitrary<Shape> =>
  anyQuery.map((q) => ({ endpoint, method: "GET", target: `${path}${q}`, want: [200] }));

/** The extensions' shapes (one weighted group). */
const extensionShapes: fc.Arbitrary<Shape> = fc.oneof(
  readable("storage-cluster", "/store/storage/cluster"),
  badStateQuery.map((q) => ({
    endpoint: "state-stream" as const,
    method: "GET",
    target: `/state/stream${q}`,
    want: [400],
  })),
  readable("settings", "/admin/settings"),
  {
    weight: 3,
    arbitrary: bodyBytes(settingsRaw).map((body) => ({
      endpoint: "settings-put" as const,
      method: "PUT",
      target: "/admin/settings",
      body,
      want: settingsEdit(body) ? [200] : [400],
    })),
  },
  {
    weight: 2,
    arbitrary: fc
      .tuple(dashboardTarget, anyQuery, fc.constantFrom("GET", "GET", "HEAD"))
      .map(([t, q, method]) => dashboardShape(`${t}${q}`, method)),
  },
  {
    weight: 3,
    arbitrary: bodyBytes(pullRaw).map((body) => ({
      endpoint: "pull-start" as const,
      method: "POST",
      target: "/store/pulls",
      body,
      want: pullStartWant(body),
    })),
  },
  readable("pulls", "/store/pulls"),
  {
    weight: 2,
    arbitrary: modelIdShape(
      "pull-cancel",
      "/store/pulls/",
      [...PULL_IDS, ...PULL_IDS, TINY, "acme/none"],
      pullCancelWant,
    ),
  },
  {
    weight: 3,
    arbitrary: modelIdShape(
      "model-delete",
      "/store/models/",
      [...STORED, ...STORED, ...SERVED, "acme/none", "acme/pulled"],
      modelDeleteWant,
    ),
  },
);

const shapes: fc.Arbitrary<Shape> = fc.oneof(
  { weight: 8, arbitrary: observabilityShapes },
  { weight: 5, arbitrary: extensionShapes },
  fc.constantFrom<Shape>(
    { endpoint: "state", method: "GET", target: "/state" },
    { endpoint: "state", method: "GET", target: "/state?links=0" },
    { endpoint: "ping", method: "GET", target: "/v1/ping" },
    { endpoint: "health", method: "GET", target: "/health" },
    { endpoint: "models", method: "GET", target: "/v1/models" },
    { endpoint: "instances", method: "GET", target: "/instances" },
    { endpoint: "storage", method: "GET", target: "/store/storage" },
    { endpoint: "store-list", method: "GET", target: "/store/models" },
    { endpoint: "restart", method: "POST", target: "/admin/restart" },
    { endpoint: "settings", method: "GET", target: "/admin/settings", want: [200] },
    {
      endpoint: "settings-put",
      method: "PUT",
      target: "/admin/settings",
      body: Buffer.from('{"staging":{"headroom_gb":1e300},"node_override":{"headroom_gb":null}}'),
      want: [400],
    },
    {
      endpoint: "settings-put",
      method: "PUT",
      target: "/admin/settings",
      body: Buffer.from('{"staging":{"headroom_gb":0.5},"node_override":{"headroom_gb":null}}'),
      want: [200],
    },
  ),
  fc
    .tuple(
      fc.constantFrom<Endpoint>("state", "models", "instances", "storage", "store-list"),
      query(["a"], nastyString.map(encodeLoose)),
    )
    .map(([endpoint, q]) => ({ endpoint, method: "GET", target: `${PLAIN_PATHS[endpoint]}${q}` })),
  {
    weight: 4,
    arbitrary: bodyBytes(chatRaw).map((body) => ({
      endpoint: "chat" as const,
      method: "POST",
      target: "/v1/chat/completions",
      body,
    })),
  },
  bodyBytes(placeRaw).map((body) => ({
    endpoint: "place" as const,
    method: "POST",
    target: "/place_instance",
    body,
  })),
  bodyBytes(purgeRaw).map((body) => ({
    endpoint: "purge" as const,
    method: "POST",
    target: "/store/purge-staging",
    body,
  })),
  fc.option(jsonText(anyJson), { nil: undefined }).map((body) => ({
    endpoint: "restart" as const,
    method: "POST",
    target: "/admin/restart",
    body,
  })),
  queryOf(
    fc
      .tuple(
        fc.constantFrom(encodeURIComponent(TINY), TINY, "acme%2Fnone", encodeURIComponent(READY)),
        fc.option(
          fc.constantFrom(
            SELF,
            `${SELF},${PEER}`,
            "n-stale,,",
            "",
            `${PEER}&excluded_node_ids=${SELF}`,
          ),
        ),
      )
      .map(([m, ex]) => `?model_id=${m}${ex === null ? "" : `&excluded_node_ids=${ex}`}`),
    ["model_id", "excluded_node_ids"],
    fc.oneof(
      fc.constantFrom(encodeURIComponent(TINY), TINY, `${SELF},${PEER}`, ""),
      nastyString.map(encodeLoose),
    ),
  ).map((q) => ({
    endpoint: "previews" as const,
    method: "GET",
    target: `/instance/previews${q}`,
  })),
  queryOf(
    fc
      .tuple(
        fc.option(fc.constantFrom("1", "2", "5000")),
        fc.option(fc.constantFrom("0", "1", "2", "99")),
        fc.option(fc.constantFrom("DownloadFailed", "TaskFailed")),
      )
      .map(([limit, after, type]) => {
        const q = [
          limit && `limit=${limit}`,
          after && `after_seq=${after}`,
          type && `type=${type}`,
        ].filter(Boolean);
        return q.length ? `?${q.join("&")}` : "";
      }),
    ["limit", "after_seq", "type"],
    fc.oneof(
      numberish.map(encodeLoose),
      fc.constantFrom("TaskFailed", "TaskFinished", "Nope", "__proto__", "constructor"),
    ),
  ).map((q) => ({ endpoint: "events" as const, method: "GET", target: `/events${q}` })),
  segment(["i-ready", "i-warm", "i-unknown", "x".repeat(129)]).map((id) => ({
    endpoint: "delete" as const,
    method: "DELETE",
    target: `/instance/${id}`,
  })),
  fc
    .oneof(
      fc.tuple(spelled("acme"), spelled("tiny"), fc.constant("manifest")),
      fc.tuple(
        segment(["acme", "ACME"]),
        segment(["tiny", "unregistered", "warm"]),
        fc.constantFrom("manifest", "manifest/", "manifest%00"),
      ),
    )
    .map(([org, name, tail]) => ({
      endpoint: "manifest" as const,
      method: "GET",
      target: `/store/models/${org}/${name}/${tail}`,
    })),
  {
    weight: 3,
    arbitrary: fc
      .tuple(fileTarget, fc.constantFrom("GET", "GET", "HEAD"))
      .map(([target, method]) => ({ endpoint: "file" as const, method, target })),
  },
  // Unknown routes, known paths with other methods, and mangled known paths.
  fc
    .tuple(
      fc.constantFrom(
        "GET",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "OPTIONS",
        "HEAD",
        "TRACE",
        "PROPFIND",
      ),
      fc.oneof(
        fc.constantFrom(
          "/",
          "/nope",
          "/state/",
          "//state",
          "/v1/ping/",
          "/V1/ping",
          "/health/",
          "/HEALTH",
          "/v1/%70ing",
          "/v1//models",
          "/store/../state",
          "/store/%2e%2e/state",
          "/store/models/acme/tiny",
          "/instance/",
          "/instance/a/b",
          "/events/x",
          "/v1/tracing",
          "/v1/traces/t-1/stats",
          "/v1/diagnostics/telemetry",
          "/place_instance%00",
          "/place%5Finstance",
          "/state?",
          "/state#frag",
          "*",
        ),
        fc
          .array(segment(["state", "v1", "store", "models", "instance"]), { maxLength: 4 })
          .map((a) => `/${a.join("/")}`),
      ),
      fc.option(jsonText(anyJson), { nil: undefined }),
    )
    .map(([method, target, body]) => ({
      endpoint: "other" as const,
      method,
      target,
      body,
      mangled: true,
    })),
);

/** Header values a client can send: tab, printable ASCII and Latin-1 (no DEL, no control). */
const headerValue = fc.string({
  unit: fc
    .oneof(
      fc.integer({ min: 0x20, max: 0x7e }),
      fc.integer({ min: 0x80, max: 0xff }),
      fc.constant(9),
    )
    .map((c) => String.fromCharCode(c)),
  maxLength: 60,
});

/** An Authorization header: mostly the token the endpoint needs, else none, another, or garbage. */
function authorization(
  needed: Scope | null | undefined,
): fc.Arbitrary<{ value: string | undefined; holder: Req["holder"] }> {
  const scopes = ["admin", "read", "inference"] as const;
  const bearer = (s: Scope) => ({ value: `Bearer ${TOKENS[s]}`, holder: s });
  return fc.oneof(
    {
      weight: 6,
      arbitrary: needed ? fc.constant(bearer(needed)) : fc.constantFrom(...scopes).map(bearer),
    },
    { weight: 1, arbitrary: fc.constant({ value: undefined, holder: null }) },
    { weight: 1, arbitrary: fc.constantFrom(...scopes).map(bearer) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom(...scopes),
          fc.constantFrom("bearer ", "BEARER  ", "Bearer\t", "Bearer "),
          fc.constantFrom("", " ", "\t"),
        )
        .map(([s, pre, post]) => ({
          value: `${pre}${TOKENS[s]}${post}`,
          holder: "either" as const,
        })),
    },
    {
      weight: 1,
      arbitrary: fc
        .oneof(
          fc.constantFrom(
            "Bearer",
            "Bearer ",
            "Basic dXNlcjpwYXNz",
            "Bearer t-admin t-read",
            "Bearer t-admi",
            "Bearer T-ADMIN",
            "Bearer t-admin,Bearer t-read",
            "Token t-admin",
            "Bearer \u00e9",
            `Bearer ${"a".repeat(10_000)}`,
            "Bearer =",
          ),
          headerValue,
          headerValue.map((v) => `Bearer ${v}`),
        )
        .map((value) => ({
          value,
          holder: /^Bearer\s+t-(admin|read|inf)\s*$/i.test(value) ? ("either" as const) : null,
        })),
    },
  );
}

function origin(port: number): fc.Arbitrary<{ value: string | undefined; tag: Req["origin"] }> {
  return fc.oneof(
    { weight: 12, arbitrary: fc.constant({ value: undefined, tag: "none" as const }) },
    {
      weight: 1,
      arbitrary: fc.constant({ value: `http://127.0.0.1:${port}`, tag: "own" as const }),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(`http://127.0.0.1:${port}/`, `HTTP://127.0.0.1:${port}`)
        .map((value) => ({ value, tag: "either" as const })),
    },
    {
      weight: 2,
      arbitrary: fc
        .oneof(
          fc.constantFrom(
            "null",
            "http://evil.example",
            `https://127.0.0.1:${port}`,
            "http://127.0.0.1",
            "file://",
            "http://[::1",
            "javascript:alert(1)",
            "",
          ),
          headerValue,
        )
        .filter((v) => v.trim() !== `http://127.0.0.1:${port}`)
        .map((value) => ({ value, tag: "foreign" as const })),
    },
  );
}

const contentType: fc.Arbitrary<{ value: string | undefined; tag: Req["contentType"] }> = fc.oneof(
  { weight: 14, arbitrary: fc.constant({ value: "application/json", tag: "json" as const }) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom(
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "application/json;charset=UTF-8",
      )
      .map((value) => ({ value, tag: "json" as const })),
  },
  { weight: 2, arbitrary: fc.constant({ value: undefined, tag: "absent" as const }) },
  {
    weight: 1,
    arbitrary: fc
      .constantFrom(
        "application/json ; charset=utf-8",
        "application/json\t",
        "application/json;",
        "application/json; charset=latin1",
      )
      .map((value) => ({ value, tag: "either" as const })),
  },
  {
    weight: 2,
    arbitrary: fc
      .oneof(
        fc.constantFrom(
          "text/plain",
          "application/jsonp",
          "application/json-patch+json",
          "application/x-www-form-urlencoded",
          "multipart/form-data; boundary=x",
          "*/*",
          "json",
        ),
        headerValue.filter((v) => !/^\s*application\/json/i.test(v) && v.trim() !== ""),
      )
      .map((value) => ({ value, tag: "other" as const })),
  },
);

const range = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  fc.constantFrom(
    "bytes=0-10",
    "bytes=-5",
    "bytes=4000-",
    "bytes=5-2",
    "bytes=0-0,2-3",
    "bytes=4096-",
    "bytes=99999999999999999999-",
    "bytes=0-99999999999999999999",
    "bytes=-0",
    "bytes=--1",
    "items=0-1",
    "bytes=",
  ),
  headerValue,
  fc
    .tuple(fc.option(fc.nat({ max: 5000 })), fc.option(fc.nat({ max: 5000 })))
    .map(([a, b]) => `bytes=${a ?? ""}-${b ?? ""}`),
);

/** File reads get a satisfiable range more often, so every seed reaches a 206. */
const fileRange = fc.oneof(
  { weight: 2, arbitrary: range },
  fc.constantFrom("bytes=0-10", "bytes=-5", "bytes=3-"),
);

function requests(port: number): fc.Arbitrary<Req> {
  return shapes
    .chain((shape) =>
      fc.record({
        shape: fc.constant(shape),
        app: fc.constantFrom("anonymous", "tokens") as fc.Arbitrary<Req["app"]>,
        auth: authorization(scopeOf(shape.mangled ? "other" : shape.endpoint, shape.method)),
        origin: origin(port),
        contentType,
        range: shape.endpoint === "file" ? fileRange : range,
        ifRange: fc.option(
          fc.constantFrom(
            `"${sha(STORE_FILES["model.gguf"]!)}"`,
            '"stale"',
            "Wed, 21 Oct 2015 07:28:00 GMT",
          ),
          { nil: undefined },
        ),
        chunked: fc.boolean(),
        extra: fc.option(
          fc.tuple(
            fc.constantFrom(
              "x-forwarded-for",
              "accept",
              "accept-encoding",
              "cookie",
              "x-http-method-override",
            ),
            headerValue,
          ),
          { nil: undefined },
        ),
      }),
    )
    .map(({ shape, app, auth, origin, contentType, range, ifRange, chunked, extra }) => {
      const headers: Record<string, string> = {};
      if (auth.value !== undefined) headers.authorization = auth.value;
      if (origin.value !== undefined) headers.origin = origin.value;
      if (contentType.value !== undefined) headers["content-type"] = contentType.value;
      if (range !== undefined) headers.range = range;
      if (ifRange !== undefined) headers["if-range"] = ifRange;
      if (extra) headers[extra[0]] = extra[1];
      const hasBody = shape.body !== undefined && shape.body.length > 0;
      return {
        app,
        method: shape.method,
        target: shape.target,
        headers,
        body: shape.method === "GET" || shape.method === "HEAD" ? undefined : shape.body,
        chunked: chunked && hasBody && shape.method !== "GET" && shape.method !== "HEAD",
        endpoint: shape.mangled ? "other" : shape.endpoint,
        holder: auth.holder,
        origin: origin.tag,
        contentType: contentType.tag,
        want: shape.mangled ? undefined : shape.want,
      } satisfies Req;
    });
}

// ---- the oracle: what docs/api.md allows for a request ----

const MUTATING = (m: string) => m !== "GET" && m !== "HEAD" && m !== "OPTIONS";

/** The scope docs/api.md assigns to an endpoint (null: none). */
function scopeOf(e: Endpoint, method: string): Scope | null | undefined {
  switch (e) {
    case "ping":
    case "health":
    case "dashboard":
      return null;
    case "chat":
    case "models":
      return "inference";
    case "place":
    case "delete":
    case "restart":
    case "purge":
      return "admin";
    case "other":
      return undefined; // unknown: any of the gates may answer
    default:
      return method === "GET" || method === "HEAD" ? "read" : "admin";
  }
}

/** Statuses (and codes) the endpoint itself may answer once the access gates passed. */
function endpointAllows(r: Req, a: Answer, body: unknown): string | null {
  const code = (body as { error?: { code?: string } } | undefined)?.error?.code;
  const one = (ok: boolean, why: string) => (ok ? null : why);
  switch (r.endpoint) {
    case "state":
    case "ping":
    case "health":
    case "models":
    case "instances":
    case "storage":
    case "store-list":
      return one(a.status === 200, "expected 200");
    case "restart":
      return one(a.status === 202, "expected 202");
    case "chat": {
      // A valid body reaches routing: the ready model's engine is absent, the warm one is not ready.
      const valid = validBody(r.body, ChatRequestSchema) as { model: string } | undefined;
      if (!valid)
        return one(a.status === 400 && code === "invalid_request", "expected 400 invalid_request");
      if (valid.model === READY) {
        // docs/api.md: content llama-server would choke on is a 400 from the gateway; otherwise the
        // absent engine (connection refused) is 500 instance_lost, or a bounded wait's 504.
        if (contentMistake(valid))
          return one(a.status === 400 && code === "invalid_request", "expected 400");
        return one(
          (a.status === 500 && code === "instance_lost") ||
            (a.status === 504 && code === "upstream_timeout"),
          "expected 500 instance_lost (no engine)",
        );
      }
      if (valid.model === WARM)
        return one(a.status === 404 && code === "model_not_ready", "expected 404 model_not_ready");
      return one(a.status === 404 && code === "model_not_found", "expected 404 model_not_found");
    }
    case "place":
      if (a.status === 200) return null;
      if (a.status === 400)
        return one(
          [
            "invalid_request",
            "insufficient_memory",
            "no_cycle",
            "all_excluded",
            "tensor_unsupported",
            "node_unhealthy",
          ].includes(code ?? ""),
          "400 code",
        );
      if (a.status === 404) return one(code === "model_not_found", "404 code");
      return one(a.status === 409 && code === "conflict", `place answered ${a.status}`);
    case "previews":
      return one([200, 400, 404].includes(a.status), `previews answered ${a.status}`);
    case "delete":
      return one([200, 400, 404].includes(a.status), `delete answered ${a.status}`);
    case "events":
      return one([200, 400].includes(a.status), `events answered ${a.status}`);
    case "purge":
      return validBody(r.body, PurgeStagingBodySchema)
        ? one(a.status === 200, "expected 200 for a valid purge")
        : one(a.status === 400 && code === "invalid_request", "expected 400 invalid_request");
    case "manifest":
      return one([200, 400, 404].includes(a.status), `manifest answered ${a.status}`);
    case "file":
      // Exactly the files the manifest names are served, whatever spelling names them.
      return namedFile(r.target)
        ? one([200, 206, 416].includes(a.status), `expected the file, got ${a.status}`)
        : one([400, 404].includes(a.status), `expected 400/404, got ${a.status}`);
    case "tracing":
    case "traces":
    case "cluster-traces":
    case "metrics":
    case "telemetry":
    case "logs":
    case "runner-logs":
      return one(
        (r.want ?? [200]).includes(a.status),
        `expected ${(r.want ?? [200]).join("/")}, got ${a.status}`,
      );
    case "tracing-put": {
      // docs/api.md: `{"enabled": boolean}` and nothing else (at most 4 KiB); any other body is a 400.
      const ok =
        (r.body?.length ?? 0) <= 4096 && validBody(r.body, TracingBodySchema) !== undefined;
      return ok
        ? one(a.status === 200, "expected 200 for a valid switch")
        : one(a.status === 400 && code === "invalid_request", "expected 400 invalid_request");
    }
    case "trace":
    case "trace-stats":
    case "cluster-stats": {
      // docs/api.md: a bad task id is 400, an unknown one 404; the one trace on disk is 200.
      const path = routedPath(r.target);
      if (path === TRACE_OK[r.endpoint]) return one(a.status === 200, "expected the trace");
      if (a.status === 200) return one(TRACE_ANY_OK.has(path), `200 for ${path}`);
      return one([400, 404].includes(a.status), `expected 400/404, got ${a.status}`);
    }
    case "storage-cluster":
    case "settings":
    case "pulls":
      return one(a.status === 200, "expected 200");
    case "state-stream":
      // Only refused queries are generated (a valid one opens a stream that never ends).
      return one(a.status === 400 && code === "invalid_request", "expected 400 invalid_request");
    case "settings-put":
    case "dashboard":
    case "pull-start":
    case "pull-cancel":
    case "model-delete": {
      const want = r.want ?? [];
      if (!want.includes(a.status)) return `expected ${want.join("/")}, got ${a.status}`;
      const expected = ERROR_CODES[a.status];
      if (expected && r.method !== "HEAD" && code !== expected)
        return `${a.status} ${code}, expected ${expected}`;
      return r.endpoint === "dashboard" && a.status === 200 ? dashboardHeaders(r, a) : null;
    }
    case "other":
      // A mangled path may still name a real endpoint; it must answer as one, never with a 5xx.
      return one(a.status < 500 && a.status !== 409, `answered ${a.status}`);
  }
}

/** The one code docs/api.md gives each error status of the extensions' routes. */
const ERROR_CODES: Partial<Record<number, string>> = {
  400: "invalid_request",
  404: "not_found",
  409: "conflict",
  503: "unavailable",
};

/** docs/api.md, Dashboard: each file with its type and the security headers. */
function dashboardHeaders(r: Req, a: Answer): string | null {
  const asset = DASHBOARD_ASSETS[routerPath(r.target)!]!;
  const want: Record<string, string> = {
    "content-type": asset.type,
    "content-security-policy": DASHBOARD_CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
  };
  const off = Object.keys(want).find((k) => a.headers[k] !== want[k]);
  return off ? `${off}: ${a.headers[off]} (expected ${want[off]})` : null;
}

/** The documented edge (docs/api.md): UTF-8 JSON, nested at most 64 levels, matching the schema. */
function validBody(body: Buffer | undefined, schema: z.ZodType): unknown {
  if (!body) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch {
    return undefined;
  }
  if (depthOf(value) > 64) return undefined;
  const r = schema.safeParse(value);
  return r.success ? r.data : undefined;
}

/** What docs/api.md says the gateway refuses for a ready model: lone surrogates, media parts. */
function contentMistake(body: unknown): boolean {
  const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
  const stack: unknown[] = [body];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string" && lone.test(v)) return true;
    if (Array.isArray(v)) stack.push(...(v as unknown[]));
    else if (typeof v === "object" && v !== null)
      for (const [k, x] of Object.entries(v)) stack.push(k, x);
  }
  const messages = (body as { messages: { content: unknown }[] }).messages;
  const media = ["image_url", "input_image", "image", "input_audio", "audio"];
  return messages.some(
    (m) =>
      Array.isArray(m.content) &&
      m.content.some((p: { type?: string }) => media.includes(p.type ?? "")),
  );
}

/** Nesting depth of objects and arrays, without recursion (values may be 100k deep). */
function depthOf(value: unknown): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    max = Math.max(max, d + 1);
    for (const child of Object.values(v)) stack.push([child, d + 1]);
  }
  return max;
}

/** The path the router sees (routerPath), or the target itself when it does not parse as a URL. */
const routedPath = (target: string): string => routerPath(target) ?? target;

/** Docs: with tokens configured, every request but the public GETs (and HEADs) carries a token. */
const publicRequest = (r: Req) => {
  const p = routedPath(r.target);
  return (
    (r.method === "GET" || r.method === "HEAD") &&
    (PUBLIC_PATHS.has(p) || p.startsWith("/dashboard/"))
  );
};

/** Whether a status is one the access gates (origin, token, content type) may have answered. */
function gate(r: Req, a: Answer): "passed" | "gated" | string {
  const mutating = MUTATING(r.method);
  const scope =
    r.app === "tokens" && !publicRequest(r) ? (scopeOf(r.endpoint, r.method) ?? undefined) : null;
  const possible = new Set<number>();
  const required = new Set<number>();
  if (mutating && r.origin !== "none" && r.origin !== "own") {
    possible.add(403);
    if (r.origin === "foreign") required.add(403);
  }
  let tokenGate = false;
  if (r.app === "tokens" && scope !== null) {
    if (r.holder === null) {
      possible.add(401);
      required.add(401);
      tokenGate = true;
    } else if (r.holder === "either") {
      possible.add(401).add(403);
    } else if (scope === undefined) possible.add(403);
    else if (r.holder !== scope) {
      possible.add(403);
      required.add(403);
      tokenGate = true;
    }
  }
  // Docs: the content type is checked after the token.
  const bodied = (r.body !== undefined && r.body.length > 0) || r.chunked === true;
  if (mutating && !tokenGate) {
    if (r.contentType === "other" || (r.contentType === "absent" && bodied)) {
      possible.add(415);
      required.add(415);
    } else if (r.contentType === "either") possible.add(415);
  }
  if (required.size > 0) {
    // With a 401 and a 403 both due, either may come first.
    return possible.has(a.status) &&
      (required.has(a.status) || a.status === 401 || a.status === 403)
      ? "gated"
      : `expected one of ${[...required].join("/")} (gates), got ${a.status}`;
  }
  return possible.has(a.status) ? "gated" : "passed";
}

interface Check {
  readonly problem: string | null;
  readonly purged?: { deleted: string[]; modelId: string | null };
  /** A model a DELETE /store/models/{org}/{name} removed from the store. */
  readonly removed?: string;
}

type Transport = "node server" | "app.request";

function check(r: Req, a: Answer): Check {
  const fail = (problem: string): Check => ({ problem });
  const ct = a.headers["content-type"] ?? "";
  let body: unknown;
  const bodyless = r.method === "HEAD" || a.status === 416 || a.status === 204;
  if (!bodyless && ct.startsWith("application/json")) {
    try {
      body = JSON.parse(a.body.toString("utf8"));
    } catch {
      return fail(`a JSON answer that is not JSON: ${a.body.subarray(0, 200).toString()}`);
    }
  }
  if (a.status >= 400 && !bodyless) {
    const env = ErrorBodySchema.safeParse(body);
    if (!env.success)
      return fail(`error body is not the envelope: ${a.body.subarray(0, 300).toString()}`);
    if (httpStatusFor(env.data.error.code) !== a.status)
      return fail(`code ${env.data.error.code} with status ${a.status}`);
    if (a.status === 401 && !a.headers["www-authenticate"])
      return fail("401 without WWW-Authenticate");
  }
  if (a.status === 416 && r.endpoint !== "file" && r.endpoint !== "other")
    return fail("416 off the file route");
  if (a.status === 416 && !/^bytes \*\/\d+$/.test(a.headers["content-range"] ?? ""))
    return fail("416 without Content-Range: bytes */size");
  const leaked = SECRETS.find((x) => a.body.includes(x));
  if (leaked) return fail(`answered a file outside the roots (${leaked})`);
  // A target no URL can hold (a backslash in the path, `*`) never reaches the app, nor its gates:
  // the node server's listener answers 400 for it (api-listener.ts).
  if (
    a.status === 400 &&
    (r.target === "*" || r.target.split("?")[0]!.includes("\\")) &&
    (bodyless ||
      (body as { error?: { message?: string } } | undefined)?.error?.message?.startsWith(
        "malformed request:",
      ))
  )
    return { problem: null };
  const g = gate(r, a);
  if (g !== "passed" && g !== "gated") return fail(g);
  // A 2xx passed every gate: the token app never answers data to a caller without the scope.
  if (a.status < 300 && r.app === "tokens") {
    const scope = scopeOf(r.endpoint, r.method);
    if (scope && r.holder !== scope && r.holder !== "either")
      return fail(`2xx without scope ${scope}`);
    if (r.holder === null && !publicRequest(r)) return fail("2xx without a token");
    if (publicRequest(r) && r.method === "GET" && !PUBLIC_PATHS.get(routedPath(r.target))?.(body))
      return fail("a public endpoint answered something else");
  }
  if (g === "gated") return { problem: null };
  const allowed = endpointAllows(r, a, body);
  if (allowed) return fail(allowed);
  if (!bodyless) {
    const shape = answerShape(r, a, body);
    if (shape) return fail(shape);
  }
  if (r.endpoint === "purge" && a.status === 200) {
    const b = body as { model_id: string | null; nodes: { deleted: string[] }[] };
    return {
      problem: null,
      purged: { deleted: b.nodes.flatMap((n) => n.deleted), modelId: b.model_id },
    };
  }
  // A removal, generated as one or reached through a mangled path: the store loses that model.
  const removal = body as { ok?: unknown; model_id?: unknown } | undefined;
  if (
    r.method === "DELETE" &&
    a.status === 200 &&
    routerPath(r.target)?.startsWith("/store/models/") &&
    removal?.ok === true &&
    typeof removal.model_id === "string"
  )
    return { problem: null, removed: removal.model_id };
  return { problem: null };
}

const isPing = (b: unknown) => (b as { peer_key?: unknown } | undefined)?.peer_key === "p-self";
/** The fixture's cluster is synced in session S: the health check answers healthy. */
const isHealthy = (b: unknown) =>
  (b as { ok?: unknown; session_id?: unknown } | undefined)?.ok === true &&
  (b as { session_id?: unknown }).session_id === S;
/** Docs: the endpoints answered without a token (GET and HEAD), with what a GET answers. */
const PUBLIC_PATHS = new Map<string, (b: unknown) => boolean>([
  ["/v1/ping", isPing],
  ["/health", isHealthy],
  // The dashboard's files (not JSON: their bytes and headers are checked by the endpoint's model).
  ...Object.keys(DASHBOARD_ASSETS).map((p): [string, (b: unknown) => boolean] => [p, () => true]),
]);

/**
 * The store file a target names (store.md: `{path}` is the manifest path, each segment
 * percent-encoded), after the URL's own normalization; undefined when it names none.
 */
function namedFile(target: string): Buffer | undefined {
  let segs: string[];
  try {
    segs = new URL(`http://x${target}`).pathname.split("/");
  } catch {
    return undefined;
  }
  if (segs.length < 7 || segs[1] !== "store" || segs[2] !== "models" || segs[5] !== "files")
    return undefined;
  try {
    const [org, name, ...rest] = [segs[3]!, segs[4]!, ...segs.slice(6)].map(decodeURIComponent);
    return org === "acme" && name === "tiny" ? STORE_FILES[rest.join("/")] : undefined;
  } catch {
    return undefined;
  }
}

/** The 2xx bodies have their documented shapes; files are byte-exact slices of the store's files. */
function answerShape(r: Req, a: Answer, body: unknown): string | null {
  if (a.status >= 300) return null;
  const bad = (s: { success: boolean }, what: string) =>
    s.success ? null : `${what} has the wrong shape`;
  switch (r.endpoint) {
    case "state":
      return bad(StateDocumentSchema.safeParse(body), "/state");
    case "storage":
      return bad(StorageReportSchema.safeParse(body), "/store/storage");
    case "manifest":
      return bad(StoreManifestSchema.safeParse(body), "the manifest");
    case "file": {
      const served = namedFile(r.target);
      if (!served || sha(served) !== a.headers["x-content-sha256"]) return "served another file";
      if (a.status === 200) return a.body.equals(served) ? null : "200 body differs from the file";
      const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(a.headers["content-range"] ?? "");
      if (!m) return "206 without Content-Range";
      const slice = served.subarray(Number(m[1]), Number(m[2]) + 1);
      return a.body.equals(slice) && Number(m[3]) === served.length
        ? null
        : "206 body differs from the range";
    }
    case "tracing":
    case "tracing-put": {
      const b = body as { enabled?: unknown; dir?: unknown; written?: unknown } | undefined;
      // Written: the traces of the chat requests sent while a PUT had switched tracing on.
      return typeof b?.enabled === "boolean" &&
        typeof b.dir === "string" &&
        typeof b.written === "number" &&
        b.written >= 0
        ? null
        : "tracing status has the wrong shape";
    }
    case "traces":
    case "cluster-traces": {
      const b = body as { traces?: { taskId: string }[]; unreachable?: { node: string }[] };
      // The fixture's trace, and those of chat requests sent while tracing was on (the scripted
      // master's task ids).
      if (
        !Array.isArray(b?.traces) ||
        b.traces.some((t) => t.taskId !== TRACE_ID && !/^t-\d+$/.test(t.taskId))
      )
        return "trace list has the wrong shape";
      if (r.endpoint === "cluster-traces" && b.unreachable?.[0]?.node !== "peer")
        return "the unreachable peer is not named";
      return null;
    }
    case "trace":
      return bad(ChromeTraceSchema.safeParse(body), "the trace");
    case "trace-stats":
    case "cluster-stats":
      return bad(TraceStatsSchema.safeParse(body), "the stats");
    case "metrics": {
      const text = a.body.toString();
      if (
        !(a.headers["content-type"] ?? "").startsWith("text/plain") ||
        !text.includes('node="self"')
      )
        return "not the Prometheus text of this node";
      // Label values stay bounded: models the cluster knows, `unknown` or `none`.
      const known = new Set<string>([TINY, READY, WARM, REMOTE, "unknown", "none"]);
      const odd = [...text.matchAll(/\bmodel="((?:[^"\\]|\\.)*)"/g)].find((m) => !known.has(m[1]!));
      return odd ? `a metric labelled model="${odd[1]}"` : null;
    }
    case "telemetry":
      return bad(TelemetryDiagnosticsSchema.safeParse(body), "the telemetry diagnostics");
    case "logs": {
      const b = body as { node?: string; lines?: unknown[] } | undefined;
      const tail = Number(new URL(`http://x${r.target}`).searchParams.get("tail") ?? 200);
      return b?.node === "self" && Array.isArray(b.lines) && b.lines.length <= tail
        ? null
        : "the log tail has the wrong shape";
    }
    case "runner-logs":
      return runnerLogShape(r, a, body);
    case "storage-cluster": {
      const s = ClusterStorageSchema.safeParse(body);
      if (!s.success) return "the cluster storage has the wrong shape";
      if (s.data.nodes.map((n) => n.name).join() !== "self") return "not this node's report alone";
      return s.data.unreachable.map((u) => u.node).join() === "peer"
        ? null
        : "the unreachable peer is not named";
    }
    case "settings":
      return settingsViewShape(body, undefined);
    case "settings-put":
      return settingsViewShape(body, settingsEdit(r.body));
    case "dashboard": {
      const file = SETTINGS_FIXTURE.dashboard.get(routerPath(r.target)!);
      return file && a.body.equals(file) ? null : "not the file the dashboard ships";
    }
    case "pull-start": {
      const p = PullSchema.safeParse((body as { pull?: unknown } | undefined)?.pull);
      if (!p.success) return "the pull has the wrong shape";
      const asked = validBody(r.body, PullBodySchema) as { model_id: string; revision?: string };
      if (p.data.model_id !== asked.model_id) return "another model's pull";
      if (p.data.state !== "queued" && p.data.state !== "running")
        return `a ${p.data.state} pull answered ${a.status}`;
      return asked.revision === undefined || p.data.revision === asked.revision
        ? null
        : `a pull at ${p.data.revision}, asked ${asked.revision}`;
    }
    case "pulls": {
      const s = PullSchema.array().safeParse((body as { pulls?: unknown } | undefined)?.pulls);
      if (!s.success) return "the pull list has the wrong shape";
      return s.data.every((p) => PULL_IDS.includes(p.model_id)) ? null : "a pull nobody asked for";
    }
    case "pull-cancel": {
      const b = body as { pull?: unknown; dismissed?: unknown } | undefined;
      const p = PullSchema.safeParse(b?.pull);
      if (!p.success || p.data.model_id !== pathModelId(r.target, "/store/pulls/"))
        return "not the pull asked for";
      // A live pull is cancelled; a finished one (done, failed, cancelled) is dismissed as it was.
      if (b?.dismissed === false)
        return p.data.state === "cancelled" ? null : "a live pull not cancelled";
      return b?.dismissed === true && p.data.state !== "queued" && p.data.state !== "running"
        ? null
        : "a dismissed pull that was live";
    }
    case "model-delete": {
      const b = body as { ok?: unknown; model_id?: unknown } | undefined;
      return b?.ok === true && b.model_id === pathModelId(r.target, "/store/models/")
        ? null
        : "not the removed model";
    }
    default:
      return null;
  }
}

/** Where the settings file and the dashboard's files are (set when the suite starts). */
const SETTINGS_FIXTURE = { file: "", dashboard: new Map<string, Buffer>() };

/**
 * docs/api.md, GET/PUT /admin/settings: the view of this node's (writable) file; what the node applies
 * is what the file gives it (nothing edits the file by hand here); an accepted edit set exactly the
 * keys it named (null: the key is gone, the default shows in `staging`).
 */
function settingsViewShape(body: unknown, edit: SettingsEdit | undefined): string | null {
  const v = SettingsViewSchema.safeParse(body);
  if (!v.success)
    return `the settings view has the wrong shape (${v.error.issues.map((i) => i.path.join(".")).join(", ")})`;
  const view: SettingsView = v.data;
  if (view.node !== "self" || view.file !== SETTINGS_FIXTURE.file || !view.writable)
    return "not this node's writable settings file";
  if (JSON.stringify(view.applied) !== JSON.stringify(view.effective))
    return "the node does not apply what its file gives it";
  for (const k of SETTING_KEYS) {
    const base = edit?.staging?.[k];
    if (base !== undefined && view.staging[k] !== (base ?? SETTING_DEFAULTS[k]))
      return `staging.${k} is ${view.staging[k]}, the edit set ${JSON.stringify(base)}`;
    const over = edit?.node_override?.[k];
    if (over !== undefined && view.node_override[k] !== (over ?? undefined))
      return `node_override.${k} is ${view.node_override[k]}, the edit set ${JSON.stringify(over)}`;
  }
  return null;
}

/** A runner log answer: the last lines of the rank's file, never more than asked. */
function runnerLogShape(r: Req, a: Answer, body: unknown): string | null {
  const url = new URL(`http://x${r.target}`);
  const text = url.searchParams.get("format") === "text";
  let lines: string[];
  let truncated: boolean;
  if (text) {
    if (!(a.headers["content-type"] ?? "").startsWith("text/plain"))
      return "text without text/plain";
    const t = a.body.toString("utf8");
    lines = t === "" ? [] : t.replace(/\n$/, "").split("\n");
    truncated = a.headers["x-log-truncated"] === "true";
  } else {
    const b = body as { lines?: string[]; truncated?: boolean } | undefined;
    if (!Array.isArray(b?.lines) || typeof b.truncated !== "boolean")
      return "runner log has the wrong shape";
    lines = b.lines;
    truncated = b.truncated;
  }
  const file = r.target.includes("i-remote") ? PEER_LINES : RUNNER_LINES;
  const tail = Number(url.searchParams.get("tail") ?? 200);
  if (r.want?.length === 1 && lines.length > tail) return `${lines.length} lines for tail=${tail}`;
  const k = lines.length;
  if (k > 0 && JSON.stringify(file.slice(-k)) !== JSON.stringify(lines))
    return "lines are not the end of the file";
  if (k < file.length && !truncated) return "fewer lines than the file without truncated";
  return null;
}

// ---- the suite ----

const TELEMETRY: Telemetry = heartbeat("p-self", "self").telemetry!;

/** One trace file under `dir`, for TRACE_ID, written as the chat path has a tracing write it. */
async function traceFixture(dir: string, log: ReturnType<typeof createLogger>): Promise<void> {
  const t = new Tracing({
    config: { enabled: true, retention_days: 3650, dir },
    log,
    node: "self",
    writeDelayMs: 0,
  });
  await t.start();
  const at = Date.now() - 1000;
  const obs = t.observe({
    commandId: "chatcmpl-fuzz",
    receivedAt: at,
    path: "/v1/chat/completions",
  })!;
  obs.event({ type: "validated", at: at + 0.5, model: READY, stream: false });
  obs.event({
    type: "routed",
    at: at + 1,
    instanceId: "i-ready",
    nodeId: SELF,
    endpoint: "http://x:1",
  });
  obs.event({ type: "sent", at: at + 1.5 });
  obs.event({ type: "task", at: at + 2, taskId: TRACE_ID as TaskId });
  obs.event({ type: "headers", at: at + 5, status: 200 });
  obs.event({
    type: "engine",
    at: at + 11,
    timings: { prompt_n: 7, prompt_ms: 2.5, predicted_n: 5, predicted_ms: 4.75 },
    usage: undefined,
  });
  obs.event({
    type: "end",
    at: at + 11,
    ok: true,
    status: 200,
    code: undefined,
    message: undefined,
  });
  await t.stop();
  if ((await readdir(dir)).length !== 1) throw new Error("the trace fixture was not written");
}

/** The node's config file the settings editor edits (comments and other keys stay). */
const SETTINGS_YAML = `# the fuzz's node
node:
  name: self # this node
model_store:
  staging:
    headroom_gb: 10 # reserve
`;

/** After an accepted edit the file keeps its comments and other keys; only staging sections change. */
function settingsFileKept(text: string): void {
  expect(text, "the editor dropped a comment").toContain("# the fuzz's node");
  expect(text, "the editor dropped a comment").toContain("name: self # this node");
  const doc = parseYaml(text) as {
    node?: unknown;
    model_store?: Record<string, unknown>;
    node_overrides?: Record<string, { model_store?: Record<string, unknown> }>;
  };
  const keys = (o: object | undefined) => Object.keys(o ?? {});
  const edited = (section: unknown) =>
    keys(section as object).every((k) => (SETTING_KEYS as readonly string[]).includes(k));
  expect(keys(doc).every((k) => ["node", "model_store", "node_overrides"].includes(k))).toBe(true);
  expect(doc.node).toEqual({ name: "self" });
  expect(keys(doc.model_store)).toEqual(["staging"]);
  expect(edited(doc.model_store?.staging), "unknown keys in model_store.staging").toBe(true);
  // Removals prune what they empty: an override present holds at least one of this node's keys.
  if (doc.node_overrides !== undefined) {
    expect(keys(doc.node_overrides), "an emptied override was left behind").toEqual(["self"]);
    const override = doc.node_overrides.self;
    expect(keys(override)).toEqual(["model_store"]);
    expect(keys(override?.model_store)).toEqual(["staging"]);
    const staging = override?.model_store?.staging;
    expect(keys(staging as object).length, "an emptied override was left behind").toBeGreaterThan(
      0,
    );
    expect(edited(staging), "unknown keys in the override").toBe(true);
  }
}

/** Answers every default-sized run must include, so the generators keep reaching past the gates. */
const MUST_REACH = [
  "state 200",
  "ping 200",
  "health 200",
  "models 200",
  "instances 200",
  "storage 200",
  "store-list 200",
  "restart 202",
  "chat 400",
  "chat 404",
  "chat 500",
  "place 200",
  "previews 200",
  "delete 200",
  "delete 404",
  "events 200",
  "events 400",
  "purge 200",
  "manifest 200",
  "file 200",
  "file 206",
  "tracing 200",
  "tracing-put 200",
  "tracing-put 400",
  "traces 200",
  "traces 400",
  "cluster-traces 200",
  "trace 200",
  "trace 400",
  "trace 404",
  "trace-stats 200",
  "cluster-stats 200",
  "cluster-stats 404",
  "metrics 200",
  "telemetry 200",
  "logs 200",
  "logs 400",
  "runner-logs 200",
  "runner-logs 400",
  "runner-logs 404",
  "runner-logs 503",
  "storage-cluster 200",
  "state-stream 400",
  "settings 200",
  "settings-put 200",
  "settings-put 400",
  "dashboard 200",
  "dashboard 404",
  "pull-start 202",
  "pull-start 400",
  "pulls 200",
  "pull-cancel 400",
  "pull-cancel 404",
  "model-delete 200",
  "model-delete 400",
  "model-delete 404",
  "model-delete 409",
];

describe("fuzz: every endpoint of the node HTTP API", () => {
  let dirs: Dirs;
  let storeHost: StoreHost;
  let staging: StagingClient;
  let eventLog: EventLog;
  let events: EventLogComponent;
  /** The node's components this suite starts (stopped last first). */
  const parts: Component[] = [];
  /** The node's config: its defaults, with this node's name and no wait for telemetry. */
  const cfg = loadConfig({
    env: {},
    overrides: { node: { name: "self" }, cluster: { info_pending_wait_ms: 0 } },
  });
  let cluster: ReturnType<typeof scriptedCluster>;
  let log: ReturnType<typeof createLogger>;
  let pulls: PullManager;
  /** The settings file: outside the snapshotted tree (an accepted PUT rewrites it). */
  let settingsDir: string | undefined;
  const apps = {} as Record<Req["app"], Hono>;
  const ports = {} as Record<Req["app"], number>;
  const servers: Server[] = [];
  const errors: string[] = [];
  const unhandled: unknown[] = [];
  let restarts = 0;
  /** Peers whose watch connection closed (GET /cluster/watch asks the agent to probe them). */
  const probed: string[] = [];
  const watchAgent = {
    peerKey: "p-self",
    masterPeer: () => undefined,
    connectionLost: (peerKey: string) => {
      probed.push(peerKey);
      return Promise.resolve(false);
    },
  };
  let before: Map<string, string>;
  const onUnhandled = (e: unknown) => unhandled.push(e);
  /** `${endpoint} ${status}` of every answer checked. */
  const reached = new Set<string>();

  beforeAll(async () => {
    process.on("unhandledRejection", onUnhandled);
    process.on("uncaughtException", onUnhandled);
    dirs = await makeDirs();
    // Error-level logs are bugs here (toResponse logs every unhandled error with its stack).
    log = createLogger({
      enabled: true,
      level: "error",
      destination: new Writable({
        write(chunk: Buffer, _enc, done) {
          errors.push(chunk.toString());
          done();
        },
      }),
    });
    storeHost = new StoreHost({ storePath: dirs.store, logger: log, headroomBytes: 0 });
    await storeHost.start();
    await storeHost.register(TINY);
    staging = new StagingClient({
      root: dirs.staging,
      settings: { cleanupOnDeactivate: false, keepRecentBytes: 0, headroomBytes: 0 },
      usage: () => ({ live: new Set([LIVE]), companions: new Set() }),
      logger: log,
    });
    await staging.start();
    events = eventLogComponent(
      {
        dir: dirs.events,
        compact_above_mb: 1,
        keep_events: 100,
        archive_total_mb: 1,
        free_floor_gb: 2,
        check_every: 1024,
        write_delay_ms: 50,
      },
      { log, disk: new FakeDisk(100 * 1024 ** 3) },
    );
    await events.start!();
    eventLog = events.eventLog;
    for (let i = 1; i <= 3; i++)
      eventLog.append(
        IndexedEventSchema.parse({
          index: i,
          session_id: S,
          at: 1_700_000_000_000 + i,
          event: { type: "TaskFailed", task_id: `t${i}`, reason: "instance deleted" },
        }),
      );
    await eventLog.flush();
    // The ready instance's engine is absent: port 1 refuses (a free port in the ephemeral range can
    // be handed to the gateway's own outgoing socket, which then connects to itself).
    cluster = scriptedCluster("http://127.0.0.1:1");
    const bus = loopbackBus();
    // The staging settings in force, which the settings editor replaces (node.ts: the storage report
    // shows them; the staging client here keeps its own, so an edit starts no eviction).
    const liveSettings = new LiveStagingSettings({
      cleanupOnDeactivate: true,
      keepRecentBytes: 40 * GiB,
      headroomBytes: 10 * GiB,
    });
    const storeOpts: StoreRouteOptions & { bus: LoopbackBus } = {
      bus,
      cluster,
      stager: { staging },
      eventLog,
      nodeCachePath: dirs.staging,
      settings: liveSettings,
      name: "self",
      log,
      purgeWaitMs: 2_000,
      // The cluster storage view's one peer refuses connections (port 1): it is named unreachable.
      peers: {
        token: () => TOKENS.read,
        timeoutMs: 1000,
        list: () => [{ name: "peer", apiUrl: "http://127.0.0.1:1" }],
      },
    };
    // Pulls as the store host serves them (node.ts): a real PullManager over the store host, which has
    // no hub, so each pull fails at once (hub_error) and nothing is written.
    pulls = new PullManager({ target: storeHost });
    servePulls(bus, pulls, storeHost, { name: "node-1", apiUrl: "http://127.0.0.1:1" });
    // The settings editor over its own config file, as node.ts wires it.
    settingsDir = await mkdtemp(join(tmpdir(), "ic-fuzz-settings-"));
    SETTINGS_FIXTURE.file = join(settingsDir, "config.yaml");
    await writeFile(SETTINGS_FIXTURE.file, SETTINGS_YAML, { mode: 0o600 });
    const dashboard = dashboardComponent({
      log,
      file: SETTINGS_FIXTURE.file,
      nodeName: "self",
      live: liveSettings,
      env: {},
    });
    for (const [path, a] of Object.entries(DASHBOARD_ASSETS))
      SETTINGS_FIXTURE.dashboard.set(path, await readFile(join(DASHBOARD_PUBLIC, a.file)));
    // Observability as buildNode wires it: runner logs answered on the bus (this node's and the
    // peer's), metrics over the scripted cluster (the ready engine's scrape is refused), a log tail.
    serveRunnerLogs(bus, { peerKey: "p-peer", name: "peer", runnerLogDir: dirs.peerRunners });
    const collector = new TelemetryCollector(
      {
        log,
        engine: () => TELEMETRY.engine,
        declaredBackend: "auto",
        modelsPath: dirs.store,
        intervalMs: 2000,
      },
      async () => ({ telemetry: TELEMETRY, health: [] }),
    );
    await collector.read();
    const logTail = new LogTail({ maxLines: 100 });
    for (const [level, msg] of [
      [30, "starting"],
      [40, "slow peer"],
      [50, "engine died"],
      [20, "detail é"],
    ] as const)
      logTail.write(`${JSON.stringify({ level, time: 1, node: "self", msg })}\n`);
    logTail.write("not json\n");
    const observability = observabilityComponent(cfg.dashboard, {
      bus,
      sources: {
        name: "self",
        peerKey: "p-self",
        cluster,
        log,
        runners: () => [
          { instance_id: "i-ready", rank: 0, state: "RunnerReady", endpoint: "http://127.0.0.1:1" },
        ],
        engineHeaders: (id) => ({ authorization: `Bearer key-${id}` }),
        scrapeTimeoutMs: 1000,
      },
      runnerLogs: { runnerLogDir: dirs.runners, logFileOf: () => undefined },
      peers: storeOpts.peers,
      logTail,
    });
    parts.push(observability);
    await observability.start!();
    // Tracing: one trace on disk (written by a tracing that is then stopped), switched off.
    await traceFixture(dirs.traces, log);
    const tracingPart = tracingComponent(
      { enabled: false, retention_days: 3650, dir: dirs.traces },
      { log, node: "self", peers: storeOpts.peers },
    );
    parts.push(tracingPart);
    await tracingPart.start!();
    const store = storeComponent(storeOpts);
    parts.push(store);
    await store.start!();
    for (const kind of ["anonymous", "tokens"] as const) {
      // The API as buildNode composes it (node-api.ts), over the scripted cluster.
      const app = nodeApi(cfg, {
        cluster,
        log,
        hooks: { onRestartRequested: () => void restarts++ },
        tokens: kind === "tokens" ? API_TOKENS : [],
        routes: {
          events,
          telemetry: {
            name: "telemetry",
            routes: () => telemetryRoutes(collector, { node: "self", peer_key: "p-self" }),
          },
          observability,
          tracing: tracingPart,
          store,
          cluster: {
            name: "cluster",
            routes: () =>
              routesOf((a) => {
                watchRoutes(a, { agent: watchAgent, log });
                healthRoutes(a, { agent: cluster, name: "self", phase: () => "started" });
              }),
          },
          dashboard,
          storeHost: { name: "store-host", routes: () => storeHost.app },
        },
      });
      apps[kind] = app;
      // As node.ts serves it: the same listener (the Node request/response pair goes along).
      const server = await new Promise<Server>((resolve) => {
        const s = createServer(apiListener(() => app, log));
        s.listen(0, "127.0.0.1", () => resolve(s));
      });
      servers.push(server);
      ports[kind] = (server.address() as AddressInfo).port;
    }
    before = await snapshot(dirs.root);
  });

  afterAll(async () => {
    process.off("unhandledRejection", onUnhandled);
    process.off("uncaughtException", onUnhandled);
    agent.destroy();
    for (const s of servers) {
      (s as { closeAllConnections?: () => void }).closeAllConnections?.();
      await new Promise<void>((r) => s.close(() => r()));
    }
    pulls?.stop();
    for (const c of parts.reverse()) await c.stop?.();
    await events?.stop?.();
    await staging?.stop();
    await storeHost?.stop();
    if (dirs) await rm(dirs.root, { recursive: true, force: true });
    if (settingsDir) await rm(settingsDir, { recursive: true, force: true });
  });

  /** Sends one request both ways and checks every property; restores staging after a purge. */
  async function exercise(r: Req): Promise<void> {
    if (process.env.FUZZ_TRACE)
      writeSync(
        2,
        `${JSON.stringify({ ...r, body: r.body?.subarray(0, 5000).toString("latin1"), bodyLength: r.body?.length })}\n`,
      );
    const answers: [Transport, Answer | undefined][] = [
      ["node server", await sendWire(ports[r.app], { ...r, headers: fixOrigin(r, ports[r.app]) })],
      [
        "app.request",
        await sendInProcess(apps[r.app], { ...r, headers: fixOrigin(r, "localhost") }),
      ],
    ];
    let purged: Check["purged"][] = [];
    const removed: string[] = [];
    for (const [how, a] of answers) {
      if (!a) continue;
      reached.add(`${r.endpoint} ${a.status}`);
      const c = check(r, a);
      if (c.problem) {
        throw new Error(
          `${how}: ${r.method} ${r.target.slice(0, 300)} -> ${a.status}: ${c.problem}\n` +
            `body: ${a.body.subarray(0, 400).toString()}`,
        );
      }
      purged.push(c.purged);
      if (c.removed) removed.push(c.removed);
    }
    await new Promise((res) => setImmediate(res));
    expect(unhandled, "unhandled rejections or exceptions").toEqual([]);
    expect(errors, "error-level logs").toEqual([]);
    if (r.endpoint === "settings-put" && answers.some(([, a]) => a?.status === 200))
      settingsFileKept(await readFile(SETTINGS_FIXTURE.file, "utf8"));
    purged = purged.filter((p) => p !== undefined);
    const after = await snapshot(dirs.root);
    const changed = withoutTraces(changes(before, after));
    if (removed.length > 0) {
      await removalChanged(removed, after, changed);
      return;
    }
    if (purged.length === 0) {
      expect(changed, `${r.method} ${r.target.slice(0, 200)} changed the disk`).toEqual([]);
      return;
    }
    // Only a purge changes anything: the staging copies it reports deleted, never one in use; all
    // idle copies ({}) or only the named model's.
    const deleted = new Set(purged.flatMap((p) => p!.deleted));
    expect(deleted.has(LIVE), "purge deleted a copy in use").toBe(false);
    const named = new Set(purged.map((p) => p!.modelId));
    const idle = ["acme/old", "acme/tiny"];
    const due = named.has(null) ? idle : idle.filter((id) => named.has(id));
    expect([...deleted].sort(), "purge deleted other copies than the idle ones named").toEqual(due);
    const stagingRel = "d1/d2/d3/d4/d5/d6/staging/";
    for (const c of changed) {
      const path = c.replace(/^\w+ /, "");
      const dir = path.startsWith(stagingRel)
        ? path.slice(stagingRel.length).split("/")[0]
        : undefined;
      const allowed =
        path === stagingRel ||
        (dir !== undefined &&
          [...deleted].some((id) => dir === id.replace("/", "--")) &&
          c.startsWith("deleted"));
      expect(allowed, `purge changed ${c}`).toBe(true);
    }
    for (const id of deleted) {
      const gone = [...after.keys()].some((k) =>
        k.startsWith(`${stagingRel}${id.replace("/", "--")}/`),
      );
      expect(gone, `${id} was reported deleted but is still there`).toBe(false);
    }
    await rm(dirs.staging, { recursive: true, force: true });
    await mkdir(dirs.staging);
    await stagingFixture(dirs);
    before = await snapshot(dirs.root);
  }

  /**
   * A removal deleted the model's directory from the store and nothing else (a symbolic link in it
   * is not followed); then the store is put back as it was.
   */
  async function removalChanged(
    removed: string[],
    after: Map<string, string>,
    changed: string[],
  ): Promise<void> {
    const storeRel = "d1/d2/d3/d4/d5/d6/store/";
    const gone = [...new Set(removed)].map((id) => `${storeRel}${id.replace("/", "--")}/`);
    for (const c of changed) {
      const path = c.replace(/^\w+ /, "");
      const allowed =
        c === `changed ${storeRel}` ||
        (c.startsWith("deleted ") && gone.some((dir) => path.startsWith(dir)));
      expect(allowed, `removal changed ${c}`).toBe(true);
    }
    for (const dir of gone)
      expect(
        [...after.keys()].some((k) => k.startsWith(dir)),
        `${dir} was reported removed but is still there`,
      ).toBe(false);
    await storeFixture(
      dirs,
      gone.map((dir) => dir.slice(storeRel.length, -1)),
    );
    if (removed.includes(TINY)) await storeHost.register(TINY);
    before = await snapshot(dirs.root);
  }

  /** The own origin depends on the transport (the Host header each sends). */
  function fixOrigin(r: Req, host: number | string): Record<string, string> {
    const h = { ...r.headers };
    if (h.origin !== undefined && (r.origin === "own" || r.origin === "either")) {
      const own = typeof host === "number" ? `127.0.0.1:${host}` : host;
      h.origin = h.origin.replace(/127\.0\.0\.1:\d+/, own);
    }
    return h;
  }

  it("answers every generated request as documented, with one envelope and no side effects", async () => {
    await fc.assert(
      fc.asyncProperty(requests(0), async (r) => exercise(r)),
      { ...fuzz, numRuns: RUNS * 10 },
    );
  }, 90_000);

  /** GET /logs?follow=1 over the wire: status, content type and the first chunk; then the client leaves. */
  /** An SSE stream over the wire: status, content type and its first event (to its blank line). */
  function firstEventWire(port: number, target: string, headers: Record<string, string>) {
    return new Promise<{ status: number; type: string; first: string }>((resolve, reject) => {
      const req = httpRequest(
        { host: "127.0.0.1", port, method: "GET", path: target, headers },
        (res) => {
          let text = "";
          const done = () =>
            resolve({
              status: res.statusCode!,
              type: res.headers["content-type"] ?? "",
              first: text,
            });
          res.on("data", (b: Buffer) => {
            text += b.toString();
            if (text.includes("\n\n")) {
              done();
              req.destroy();
            }
          });
          res.once("end", done);
        },
      );
      req.setTimeout(5_000, () => req.destroy(new Error(`no first event for ${target}`)));
      req.on("error", (e) => (req.destroyed ? undefined : reject(e)));
      req.end();
    });
  }

  /** The same in process; `leave: false` keeps the stream open (its reader is returned). */
  async function firstEventInProcess(
    app: Hono,
    target: string,
    headers: Record<string, string>,
    leave = true,
  ) {
    const res = await app.request(`http://localhost${target}`, { headers });
    const type = res.headers.get("content-type") ?? "";
    if (res.status !== 200) return { status: res.status, type, first: await res.text() };
    const reader = res.body!.getReader();
    let text = "";
    while (!text.includes("\n\n")) {
      const chunk = await reader.read();
      if (chunk.done) break;
      text += Buffer.from(chunk.value).toString();
    }
    if (leave) await reader.cancel();
    return { status: res.status, type, first: text, reader };
  }

  it("GET /logs?follow=1 starts an SSE stream of the tail, frees its slot when the client leaves, and is gated", async () => {
    const read = { authorization: `Bearer ${TOKENS.read}` };
    // More followers than a node keeps (16), one after the other: each leaving frees its slot.
    for (let i = 0; i < 20; i++) {
      for (const [kind, headers] of [
        ["anonymous", {}],
        ["tokens", read],
      ] as const) {
        const target = i % 2 ? "/logs?follow=1&tail=2" : "/logs?follow=true&level=error";
        for (const a of [
          await firstEventWire(ports[kind], target, headers),
          await firstEventInProcess(apps[kind], target, headers),
        ]) {
          expect(a.status, `${kind} ${target}`).toBe(200);
          expect(a.type).toMatch(/^text\/event-stream/);
          expect(a.first).toMatch(/^(data|event): /);
        }
      }
    }
    for (const [kind, target, headers, status] of [
      ["anonymous", "/logs?follow=1&tail=-1", {}, 400],
      ["anonymous", "/logs?follow=yes", {}, 400],
      ["anonymous", "/logs?follow=1&level=loud", {}, 400],
      ["tokens", "/logs?follow=1", {}, 401],
      ["tokens", "/logs?follow=1", { authorization: `Bearer ${TOKENS.inference}` }, 403],
    ] as const) {
      const a = await sendWire(ports[kind], {
        app: kind,
        method: "GET",
        target,
        headers,
        endpoint: "logs",
        holder: null,
        origin: "none",
        contentType: "absent",
      });
      expect(a.status, `${kind} ${target}`).toBe(status);
      expect(ErrorBodySchema.safeParse(JSON.parse(a.body.toString())).success).toBe(true);
    }
    await new Promise((res) => setImmediate(res));
    expect(unhandled).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("GET /cluster/watch holds a stream open, has the peer probed when it leaves, and is gated", async () => {
    const read = { authorization: `Bearer ${TOKENS.read}` };
    probed.length = 0;
    for (let i = 0; i < 6; i++) {
      for (const [kind, headers] of [
        ["anonymous", {}],
        ["tokens", read],
      ] as const) {
        const target = `/cluster/watch?peer_key=p-${kind}-${i}&started_at=${i}`;
        const a = await firstEventWire(ports[kind], target, headers);
        expect(a.status, `${kind} ${target}`).toBe(200);
        expect(a.type).toMatch(/^text\/event-stream/);
        expect(a.first).toBe(": watching\n\n");
      }
    }
    for (let t = 0; t < 500 && probed.length < 12; t++) await new Promise((r) => setTimeout(r, 10));
    expect(new Set(probed).size).toBe(12);
    for (const [kind, target, headers, status] of [
      ["anonymous", "/cluster/watch", {}, 400],
      ["anonymous", "/cluster/watch?peer_key=p&started_at=soon", {}, 400],
      ["anonymous", `/cluster/watch?peer_key=${"x".repeat(201)}&started_at=1`, {}, 400],
      ["tokens", "/cluster/watch?peer_key=p&started_at=1", {}, 401],
      [
        "tokens",
        "/cluster/watch?peer_key=p&started_at=1",
        { authorization: `Bearer ${TOKENS.inference}` },
        403,
      ],
    ] as const) {
      const a = await sendWire(ports[kind], {
        app: kind,
        method: "GET",
        target,
        headers,
        endpoint: "ping",
        holder: null,
        origin: "none",
        contentType: "absent",
      });
      expect(a.status, `${kind} ${target}`).toBe(status);
      expect(ErrorBodySchema.safeParse(JSON.parse(a.body.toString())).success).toBe(true);
    }
    expect(probed.length).toBe(12);
  });

  it("GET /state/stream sends the state document at once, frees its slot when the client leaves, and refuses a bad links", async () => {
    const read = { authorization: `Bearer ${TOKENS.read}` };
    const firstState = (a: { status: number; type: string; first: string }, target: string) => {
      expect(a.status, target).toBe(200);
      expect(a.type).toMatch(/^text\/event-stream/);
      const m = /^event: state\ndata: (.*)\n\n$/.exec(a.first);
      expect(m, a.first.slice(0, 300)).not.toBeNull();
      const doc = StateDocumentSchema.parse(JSON.parse(m![1]!));
      expect(doc.this_node.name).toBe("self");
      expect(doc.session?.session_id).toBe(S);
      // links=0 leaves the topology's links out (the scripted peers measured two).
      expect(doc.topology.links.length > 0, target).toBe(!target.endsWith("links=0"));
    };
    // More streams than a node serves at once (64), one after the other: each leaving frees its slot.
    for (let i = 0; i < 36; i++) {
      for (const [kind, headers] of [
        ["anonymous", {}],
        ["tokens", read],
      ] as const) {
        const target = ["/state/stream", "/state/stream?links=0", "/state/stream?links=1"][i % 3]!;
        firstState(await firstEventWire(ports[kind], target, headers), target);
        firstState(await firstEventInProcess(apps[kind], target, headers), target);
      }
    }
    // At the cap, one more is 503 unavailable; once the others leave, a stream opens again.
    await new Promise((r) => setTimeout(r, 50));
    const open = [];
    for (let i = 0; i < 64; i++) {
      const a = await firstEventInProcess(apps.anonymous, "/state/stream?links=0", {}, false);
      firstState(a, "/state/stream?links=0");
      open.push(a.reader!);
    }
    const full = await firstEventInProcess(apps.anonymous, "/state/stream", {});
    expect(full.status).toBe(503);
    expect(ErrorBodySchema.parse(JSON.parse(full.first)).error.code).toBe("unavailable");
    for (const reader of open) await reader.cancel();
    await new Promise((r) => setTimeout(r, 50));
    firstState(await firstEventInProcess(apps.anonymous, "/state/stream", {}), "/state/stream");
    for (const [kind, target, headers, status] of [
      ["anonymous", "/state/stream?links=2", {}, 400],
      ["anonymous", "/state/stream?links=", {}, 400],
      ["anonymous", "/state/stream?links=true", {}, 400],
      ["tokens", "/state/stream?links=yes", read, 400],
      ["tokens", "/state/stream", {}, 401],
      ["tokens", "/state/stream", { authorization: `Bearer ${TOKENS.inference}` }, 403],
    ] as const) {
      const req: Req = {
        app: kind,
        method: "GET",
        target,
        headers,
        endpoint: "state-stream",
        holder: null,
        origin: "none",
        contentType: "absent",
      };
      for (const a of [await sendWire(ports[kind], req), await sendInProcess(apps[kind], req)]) {
        expect(a!.status, `${kind} ${target}`).toBe(status);
        const env = ErrorBodySchema.parse(JSON.parse(a!.body.toString()));
        if (status === 400) expect(env.error.code).toBe("invalid_request");
      }
    }
    await new Promise((res) => setImmediate(res));
    expect(unhandled).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("the pull routes check their input before the bus: 400, then 503 unavailable when no store host answers", async () => {
    // A node whose bus has no store host (no node has store_path): nothing answers ic.store.pulls.
    const app = createNodeApp({ log }, [
      { routes: () => routesOf((a) => pullRoutes(a, { bus: loopbackBus(), cluster })) },
    ]);
    const commands = cluster.commands.length;
    const json = { "content-type": "application/json" };
    for (const [method, target, body, status] of [
      ["POST", "/store/pulls", '{"model_id":"acme/pulled"}', 503],
      ["POST", "/store/pulls", '{"model_id":"acme/pulled","revision":"v1.0"}', 503],
      ["POST", "/store/pulls", '{"model_id":"../x"}', 400],
      ["POST", "/store/pulls", '{"model_id":"a/b/c"}', 400],
      ["POST", "/store/pulls", '{"model_id":"acme/x","revision":"../main"}', 400],
      ["POST", "/store/pulls", '{"model_id":"acme/x","extra":1}', 400],
      ["POST", "/store/pulls", "{}", 400],
      ["POST", "/store/pulls", "[]", 400],
      ["POST", "/store/pulls", '{"model_id":', 400],
      ["POST", "/store/pulls", undefined, 400],
      ["GET", "/store/pulls", undefined, 503],
      ["DELETE", "/store/pulls/acme/pulled", undefined, 503],
      ["DELETE", "/store/pulls/a/b/c", undefined, 400],
      ["DELETE", "/store/pulls/..%2Fx", undefined, 400],
      ["DELETE", "/store/pulls/acme/a--b", undefined, 400],
      ["DELETE", "/store/models/acme/tiny", undefined, 503],
      ["DELETE", "/store/models/a/b/c", undefined, 400],
      ["DELETE", "/store/models/a%2Fb/c", undefined, 400],
      ["DELETE", "/store/models/acme/.x", undefined, 400],
    ] as const) {
      const res = await app.request(`http://localhost${target}`, {
        method,
        headers: method === "POST" ? json : {},
        ...(body === undefined ? {} : { body }),
      });
      const env = ErrorBodySchema.parse(await res.json());
      expect([method, target, body, res.status]).toEqual([method, target, body, status]);
      expect(env.error.code).toBe(status === 400 ? "invalid_request" : "unavailable");
      expect(env.error.retryable).toBe(status === 503);
    }
    // A removal no store host can check never reaches the master.
    expect(cluster.commands.slice(commands).map((c) => c.type)).toEqual([]);
    await new Promise((res) => setImmediate(res));
    expect(unhandled).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("still answers after the fuzz: no crash, the store and event log intact", async () => {
    for (const kind of ["anonymous", "tokens"] as const) {
      const a = await sendWire(ports[kind], {
        app: kind,
        method: "GET",
        target: "/v1/ping",
        headers: {},
        endpoint: "ping",
        holder: null,
        origin: "none",
        contentType: "absent",
      });
      expect(a.status).toBe(200);
    }
    expect(withoutTraces(changes(before, await snapshot(dirs.root)))).toEqual([]);
    expect(storeHost.models().map((m) => m.model_id)).toEqual([TINY]);
    expect(restarts).toBeGreaterThan(0);
    if (RUNS >= 150)
      expect(
        MUST_REACH.filter((k) => !reached.has(k)),
        "never reached",
      ).toEqual([]);
  });
});
