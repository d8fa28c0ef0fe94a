// GET /logs?tail=&level=&follow=1: this node's own structured log lines from the in-memory tail the
// root logger feeds (@ic/log LogTail; bounded by lines and bytes). With follow=1 the answer is an SSE
// stream: the tail first, then every new line as it is written. A follower that reads slower than the
// node logs loses lines (its queue is bounded; an `event: dropped` says how many), never the node.
import type { Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { z } from "zod";
import { validationError } from "@ic/http";
import type { LogTail } from "@ic/log";
import { ServiceError } from "@ic/protocol";

const LEVELS = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 } as const;
const NODE_LOG_MAX_TAIL = 5000;
/** Lines a follower may lag behind before the oldest of them are dropped. */
const FOLLOWER_QUEUE = 1000;
const MAX_FOLLOWERS = 16;
const KEEPALIVE_MS = 15_000;

export const NodeLogsQuerySchema = z
  .object({
    tail: z.coerce.number().int().min(0).max(NODE_LOG_MAX_TAIL).default(200),
    level: z
      .enum(Object.keys(LEVELS) as [keyof typeof LEVELS, ...(keyof typeof LEVELS)[]])
      .optional(),
    follow: z.enum(["0", "1", "true", "false"]).default("0"),
  })
  .strict();

export interface NodeLogOptions {
  readonly name: string;
  readonly tail: LogTail;
  readonly keepaliveMs?: number;
}

/** The pino level of a JSON line (lines that are not JSON pass every filter). */
function levelOf(line: string): number | undefined {
  const m = /"level":(\d+)/.exec(line.slice(0, 64));
  return m ? Number(m[1]) : undefined;
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return { raw: line };
  }
}

export function nodeLogRoutes(app: Hono, o: NodeLogOptions): void {
  let followers = 0;
  app.get("/logs", (c) => {
    const parsed = NodeLogsQuerySchema.safeParse(c.req.query());
    if (!parsed.success) throw validationError(parsed.error, "query");
    const q = parsed.data;
    const min = q.level ? LEVELS[q.level] : 0;
    const pass = (l: string) => min === 0 || (levelOf(l) ?? Infinity) >= min;
    const recent = (n: number) =>
      n === 0 ? [] : min === 0 ? o.tail.recent(n) : o.tail.recent().filter(pass).slice(-n);
    if (q.follow === "0" || q.follow === "false") {
      return c.json({ node: o.name, lines: recent(q.tail).map(parseLine), buffer: o.tail.stats });
    }
    if (followers >= MAX_FOLLOWERS)
      throw new ServiceError("unavailable", `this node already has ${MAX_FOLLOWERS} log followers`);
    followers++;
    c.header("x-accel-buffering", "no");
    return streamSSE(c, async (stream) => {
      const queue: string[] = recent(q.tail);
      let dropped = 0;
      let wake: (() => void) | undefined;
      const unsubscribe = o.tail.subscribe((line) => {
        if (!pass(line)) return;
        queue.push(line);
        if (queue.length > FOLLOWER_QUEUE) {
          queue.shift();
          dropped++;
        }
        wake?.();
      });
      let closed = false;
      const done = new Promise<void>((r) =>
        stream.onAbort(() => {
          closed = true;
          r();
        }),
      );
      try {
        while (!closed) {
          if (dropped > 0) {
            const n = dropped;
            dropped = 0;
            await stream.writeSSE({ event: "dropped", data: JSON.stringify({ dropped: n }) });
          }
          const line = queue.shift();
          if (line !== undefined) {
            await stream.writeSSE({ data: line });
            continue;
          }
          let timer: NodeJS.Timeout | undefined;
          const idle = await Promise.race([
            new Promise<boolean>((r) => (wake = () => r(false))),
            new Promise<boolean>(
              (r) => (timer = setTimeout(() => r(true), o.keepaliveMs ?? KEEPALIVE_MS)),
            ),
            done.then(() => false),
          ]);
          clearTimeout(timer);
          wake = undefined;
          if (idle && !closed) await stream.write(": keepalive\n\n");
        }
      } finally {
        unsubscribe();
        followers--;
      }
    });
  });
}
