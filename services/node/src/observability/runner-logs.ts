// Runner logs over HTTP: GET /instances/{id}/logs?rank=&tail= answers from whichever node holds that
// rank. The holding node reads the end of `<engine.runner_log_dir>/<instance>-rank<n>.log` and answers
// on the bus (`runnerLog`, suffix: its peer key); this node asks it, or reads locally when it holds
// the rank itself. Reads are bounded (lines and bytes), ids are checked at both edges (HTTP and bus)
// against a pattern with no separators or dots, and the resolved path must stay inside the log dir.
import { constants } from "node:fs";
import { open } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import type { Hono } from "hono";
import { z } from "zod";
import type { Bus } from "@ic/bus";
import { validationError } from "@ic/http";
import type { ClusterView } from "@ic/protocol";
import type { Logger } from "@ic/log";
import {
  fromWireError,
  LOG_INSTANCE_ID,
  RUNNER_LOG_MAX_BYTES,
  RUNNER_LOG_MAX_LINES,
  RUNNER_LOG_MAX_RANK,
  ServiceError,
  toWireError,
} from "@ic/protocol";
import type { RunnerLogReply, RunnerLogRequest } from "@ic/protocol";

/** The bus reply must stay well below nats-server's 1 MiB payload limit once JSON-escaped. */
const MAX_REPLY_BYTES = 900 * 1024;
const RUNNER_LOG_DEFAULT_LINES = 200;
const RUNNER_LOG_DEFAULT_BYTES = 128 * 1024;

export interface RunnerLogSource {
  readonly peerKey: string;
  readonly name: string;
  readonly runnerLogDir: string;
  /** The log file the worker's runner writes, when it runs one for this rank. */
  readonly logFileOf?: (instanceId: string, rank: number) => string | undefined;
}

/** The file a runner rank logs to, inside the log dir; null for an id that could leave it. */
export function runnerLogPath(dir: string, instanceId: string, rank: number): string | null {
  if (!LOG_INSTANCE_ID.test(instanceId) || !Number.isInteger(rank) || rank < 0) return null;
  const root = resolve(dir);
  const file = resolve(join(root, `${instanceId}-rank${rank}.log`));
  return file.startsWith(root + sep) ? file : null;
}

/** Reads the end of a runner's log on this node (the holding node's side). */
export async function readRunnerLog(
  src: RunnerLogSource,
  req: RunnerLogRequest,
): Promise<RunnerLogReply> {
  const base = { peer_key: src.peerKey, name: src.name };
  const file = runnerLogPath(src.runnerLogDir, req.instance_id, req.rank);
  if (!file)
    return fail(
      base,
      "",
      new ServiceError("invalid_request", "instance id is not a log file name"),
    );
  // The worker's own path when it runs the rank (the same file; checked against the dir too).
  const own = src.logFileOf?.(req.instance_id, req.rank);
  const path = own !== undefined && resolve(own) === file ? own : file;
  let fh;
  try {
    // O_NOFOLLOW: a symlink planted in the log dir is not followed out of it.
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    const st = await fh.stat();
    if (!st.isFile())
      return fail(base, path, new ServiceError("not_found", `${path} is not a regular file`));
    const len = Math.min(st.size, req.max_bytes);
    const buf = Buffer.alloc(len);
    if (len > 0) await fh.read(buf, 0, len, st.size - len);
    let lines = buf.toString("utf8").split("\n");
    if (lines.at(-1) === "") lines.pop();
    // The first line may have been cut by the window.
    if (len < st.size) lines.shift();
    const kept = lines.length;
    lines = lines.slice(-req.tail);
    let truncated = len < st.size || lines.length < kept;
    let size = lines.reduce((s, l) => s + Buffer.byteLength(JSON.stringify(l)), 0);
    while (size > MAX_REPLY_BYTES && lines.length > 0) {
      size -= Buffer.byteLength(JSON.stringify(lines.shift()!));
      truncated = true;
    }
    return {
      ...base,
      ok: true,
      file: path,
      size_bytes: st.size,
      modified_at: st.mtime.toISOString(),
      truncated,
      lines,
    };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT")
      return fail(
        base,
        path,
        new ServiceError(
          "not_found",
          `no log yet for ${req.instance_id} rank ${req.rank} on ${src.name}`,
        ),
      );
    if (code === "ELOOP")
      return fail(
        base,
        path,
        new ServiceError("not_found", `${path} is a symbolic link; not followed`),
      );
    return fail(
      base,
      path,
      new ServiceError("internal", `reading ${path}: ${(e as Error).message}`),
    );
  } finally {
    await fh?.close();
  }
}

function fail(
  base: { peer_key: string; name: string },
  file: string,
  err: ServiceError,
): RunnerLogReply {
  return {
    ...base,
    ok: false,
    file,
    size_bytes: 0,
    modified_at: null,
    truncated: false,
    lines: [],
    error: toWireError(err),
  };
}

/** Answers runner-log requests addressed to this node; returns the unsubscribe function. */
export function serveRunnerLogs(bus: Pick<Bus, "respond">, src: RunnerLogSource): () => void {
  return bus.respond("runnerLog", (req) => readRunnerLog(src, req), { suffix: src.peerKey });
}

export const RunnerLogsQuerySchema = z
  .object({
    rank: z.coerce.number().int().min(0).max(RUNNER_LOG_MAX_RANK).default(0),
    tail: z.coerce
      .number()
      .int()
      .min(1)
      .max(RUNNER_LOG_MAX_LINES)
      .default(RUNNER_LOG_DEFAULT_LINES),
    max_bytes: z.coerce
      .number()
      .int()
      .min(1)
      .max(RUNNER_LOG_MAX_BYTES)
      .default(RUNNER_LOG_DEFAULT_BYTES),
    format: z.enum(["json", "text"]).default("json"),
  })
  .strict();

export interface RunnerLogRouteOptions {
  readonly cluster: ClusterView;
  readonly bus: Pick<Bus, "request">;
  /** This node's own reader (it answers for the ranks it holds without a bus round trip). */
  readonly local: RunnerLogSource;
  readonly log: Logger;
  readonly timeoutMs?: number;
}

export function runnerLogRoutes(app: Hono, o: RunnerLogRouteOptions): void {
  app.get("/instances/:instance_id/logs", async (c) => {
    const id = c.req.param("instance_id");
    if (!LOG_INSTANCE_ID.test(id))
      throw new ServiceError("invalid_request", "instance id: letters, digits, '_' and '-' only", {
        details: { issues: [{ path: "instance_id", message: "invalid instance id" }] },
      });
    const parsed = RunnerLogsQuerySchema.safeParse(c.req.query());
    if (!parsed.success) throw validationError(parsed.error, "query");
    const q = parsed.data;
    const state = o.cluster.snapshot();
    // Own keys only: an id such as `constructor` names no instance (not Object.prototype's).
    const inst = Object.hasOwn(state.instances, id) ? state.instances[id] : undefined;
    if (!inst) throw new ServiceError("not_found", `no instance ${id}`);
    const a = inst.assignments.find((x) => x.rank === q.rank);
    if (!a)
      throw new ServiceError(
        "not_found",
        `instance ${id} has no rank ${q.rank} (ranks ${inst.assignments.map((x) => x.rank).join(", ")})`,
      );
    const holder = Object.hasOwn(state.members, a.node_id) ? state.members[a.node_id] : undefined;
    const req: RunnerLogRequest = {
      instance_id: id,
      rank: q.rank,
      tail: q.tail,
      max_bytes: q.max_bytes,
    };
    const reply =
      a.peer_key === o.cluster.peerKey
        ? await readRunnerLog(o.local, req)
        : await o.bus
            .request("runnerLog", req, {
              suffix: a.peer_key,
              timeoutMs: o.timeoutMs ?? 5000,
            })
            .catch((e: unknown) => {
              throw new ServiceError(
                "unavailable",
                `node ${holder?.name ?? a.node_id} holding ${id} rank ${q.rank} did not answer: ${(e as Error).message}`,
                { cause: e },
              );
            });
    if (!reply.ok) throw fromWireError(reply.error ?? { code: "internal", message: "read failed" });
    if (q.format === "text") {
      return c.text(reply.lines.length > 0 ? `${reply.lines.join("\n")}\n` : "", 200, {
        "x-log-file": reply.file,
        "x-log-node": reply.name,
        "x-log-truncated": String(reply.truncated),
      });
    }
    return c.json({
      instance_id: id,
      model_id: inst.model_id,
      rank: q.rank,
      node: { node_id: a.node_id, name: reply.name, peer_key: reply.peer_key },
      file: reply.file,
      size_bytes: reply.size_bytes,
      modified_at: reply.modified_at,
      truncated: reply.truncated,
      lines: reply.lines,
    });
  });
}
