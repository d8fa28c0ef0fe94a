// A scripted llama-server (a real HTTP server whose answers each test writes) and a scripted
// cluster view with one ready instance of MODEL, whose events each test emits: what the gateway's
// route tests run against. Servers a test opens are closed by closing `closers` after it.
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { emptyState, ErrorBodySchema } from "@ic/protocol";
import type {
  ClusterView,
  ControlEvent,
  ControlState,
  InstanceId,
  InstanceKind,
  ModelId,
  SessionId,
  TaskId,
} from "@ic/protocol";
import { nodeIdFor } from "@ic/state";

export const S = "s-chat" as SessionId;
export const MODEL = "org/tiny" as ModelId;
export const INSTANCE = "i-1" as InstanceId;
export const closers: (() => Promise<void>)[] = [];

export type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

/**
 * A scripted llama-server: each test says what it answers to POSTs. Records the bodies it received
 * and their `x-conversation-id`, and the streams cancelled (DELETE /v1/stream, answered 204).
 * Answers GET /props as llama-server with 4 slots does (the gateway asks it once per instance,
 * engine-slots.ts), counted in `props`.
 */
export async function engine(handler: Handler) {
  const bodies: Record<string, unknown>[] = [];
  const conversations: (string | undefined)[] = [];
  const cancelled: string[] = [];
  const props = { asked: 0 };
  const server = createServer((req, res) => {
    if (req.method === "GET" && req.url === "/props") {
      props.asked++;
      res.writeHead(200, { "content-type": "application/json" }).end('{"total_slots":4}');
      return;
    }
    if (req.method === "DELETE") {
      cancelled.push(req.url ?? "");
      res.writeHead(204).end();
      return;
    }
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      // A GET (a stream read again) has no body: the handler answers it too.
      if (req.method === "GET") return handler(req, res, body);
      bodies.push(JSON.parse(body) as Record<string, unknown>);
      const conv = req.headers["x-conversation-id"];
      conversations.push(typeof conv === "string" ? conv : undefined);
      handler(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => close(server));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    bodies,
    conversations,
    cancelled,
    props,
    server,
  };
}

/** Serves `app` on a free loopback port until the test's closers run; its base URL. */
export async function listen(app: { fetch: (req: Request) => Response | Promise<Response> }) {
  const server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () =>
      resolve(s as Server),
    );
  });
  closers.push(() => close(server));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((r) => server.close(() => r()));
}

/** How the scripted cluster's instance is written, and how its master answers. */
interface ClusterOptions {
  mmproj?: boolean;
  taskFailedFirst?: boolean;
  /** Written the way records before kinds had it. */
  embeddings?: boolean;
  kind?: InstanceKind;
}

/** The state of a cluster with one ready instance of MODEL at `endpoint`, the master its node. */
function readyState(endpoint: string, opts: ClusterOptions): ControlState {
  const state: ControlState = emptyState();
  const master = nodeIdFor(S, "p-0");
  state.session = {
    session_id: S,
    master_node_id: master,
    master_peer_key: "p-0",
    master_started_at: 0,
    started_at: 0,
  };
  state.models[MODEL] = {
    model_id: MODEL,
    file: "tiny.gguf",
    bytes: 1e6,
    architecture: "llama",
    layers: 2,
    context_length: 256,
    embedding_length: 64,
    head_count: 4,
    head_count_kv: 4,
    supports_tensor: false,
    ...(opts.mmproj ? { mmproj: "mmproj.gguf" } : {}),
  };
  state.instances[INSTANCE] = {
    instance_id: INSTANCE,
    model_id: MODEL,
    sharding: "Pipeline",
    ...(opts.embeddings ? { embeddings: true } : {}),
    ...(opts.kind ? { kind: opts.kind } : {}),
    created_at: 1,
    assignments: [
      { node_id: master, peer_key: "p-0", rank: 0, weight_bytes: 1, required_bytes: 1 },
    ],
  };
  state.runners[`${INSTANCE}/0`] = {
    instance_id: INSTANCE,
    node_id: master,
    rank: 0,
    state: "RunnerReady",
    endpoint,
    restarts: 0,
    since: 0,
  };
  return state;
}

/** A cluster view with one ready instance of MODEL at `endpoint`; tests emit events through it. */
export function cluster(endpoint: string, opts: ClusterOptions = {}) {
  const state = readyState(endpoint, opts);
  const master = nodeIdFor(S, "p-0");
  const listeners = new Set<(ev: { event: ControlEvent }) => void>();
  const sessions = new Set<(prev: SessionId | null, next: SessionId) => void>();
  let n = 0;
  const emit = (event: ControlEvent) => {
    n += 1;
    for (const l of listeners) l({ event });
  };
  const view: ClusterView = {
    peerKey: "p-0",
    synced: true,
    isMaster: true,
    sessionId: S,
    nodeId: master,
    snapshot: () => state,
    // As the agent's: self included (the instance's node is heard).
    livePeers: () => [{ heartbeat: { peer_key: "p-0", links: [] }, lastHeard: 0 }] as never,
    command: async (cmd) => {
      if (cmd.type !== "CreateTask") return { ok: true, index: n };
      const task_id = `t-${n}` as TaskId;
      // The master's TaskFailed event can overtake the reply to CreateTask.
      if (opts.taskFailedFirst) emit({ type: "TaskFailed", task_id, reason: "node lost" });
      return { ok: true, index: n, task_id };
    },
    on: (l) => {
      const ev = l.event as ((ev: { event: ControlEvent }) => void) | undefined;
      if (ev) listeners.add(ev);
      if (l.session) sessions.add(l.session);
      return () => {
        if (ev) listeners.delete(ev);
        if (l.session) sessions.delete(l.session);
      };
    },
  };
  return { view, emit, changeSession: (next: SessionId) => sessions.forEach((s) => s(S, next)) };
}

/** MODEL on two ready instances: i-1 (chosen first: the oldest) at `first`, i-2 at `second`. */
export function twoInstances(first: string, second: string) {
  const c = cluster(first);
  const s = c.view.snapshot();
  const i2 = "i-2" as InstanceId;
  s.instances[i2] = { ...s.instances[INSTANCE]!, instance_id: i2, created_at: 2 };
  s.runners[`${i2}/0`] = { ...s.runners[`${INSTANCE}/0`]!, instance_id: i2, endpoint: second };
  return c;
}

/** The error of an answer in the OpenAI envelope. */
export function errorOf(text: string) {
  return ErrorBodySchema.parse(JSON.parse(text)).error;
}
