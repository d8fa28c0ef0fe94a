// Pure core of tracing: one chat request's observed events -> a Chrome trace (trace event format,
// `ph: "X"` complete events in microseconds) and the timing summary read back from such a file.
//
// Span derivation (all instants are the gateway's clock; durations measured by the engine are its own):
// - gateway receive: request arrival -> end (the root span; the time the gateway held the request)
// - validate: arrival -> body read, parsed and schema-checked;  route: -> instance chosen
// - upstream connect: instance chosen -> request on the engine's socket ("sent")
// - task creation: sent -> the master's TaskCreated reply (runs while the engine works)
// - engine queue / prefill / decode: llama-server reports prompt_ms and predicted_ms but no start
//   time, so they are anchored on what the gateway sees. Streaming: llama-server emits its first
//   chunk when the first token is sampled, i.e. when prefill ends, so prefill = [first chunk -
//   prompt_ms, first chunk] and decode = [first chunk, + predicted_ms]. Non-streaming: the response
//   headers come with the finished body, so decode = [headers - predicted_ms, headers] and prefill
//   ends where decode starts. Queue = sent -> prefill start (never negative): the wait for a slot
//   plus the request's transit to the engine and the first chunk's transit back.
// - stream to client: first chunk -> end (streaming); headers -> end (non-streaming body relay)
// - error: an instant event at the end with the code and message, when the request failed.
import type { ChatEvent, EngineTimings } from "@ic/protocol";
import { z } from "zod";

/** What the observer collected for one request. */
export interface TraceRecord {
  readonly commandId: string;
  /** Wall-clock ms (sub-ms precision) when the request arrived. */
  readonly receivedAt: number;
  /** Name of the node whose gateway served the request (the trace's writer). */
  readonly node: string;
  readonly events: readonly ChatEvent[];
}

export const SPAN = {
  root: "gateway receive",
  validate: "validate",
  route: "route",
  connect: "upstream connect",
  task: "task creation",
  queue: "engine queue",
  prefill: "prefill",
  decode: "decode",
  stream: "stream to client",
  firstChunk: "first chunk",
  error: "error",
} as const;

export const PID = { gateway: 1, engine: 2 } as const;
export const TID = { gateway: 1, master: 2, engine: 3 } as const;

export interface TraceEvent {
  name: string;
  ph: "X" | "i" | "M";
  pid: number;
  tid: number;
  ts?: number;
  dur?: number;
  cat?: string;
  s?: "t" | "p" | "g";
  args?: Record<string, unknown>;
}

/** Per-trace facts kept beside the events (`otherData` is part of the trace event format). */
export interface TraceMeta {
  taskId: string;
  modelId: string;
  commandId: string;
  instanceId: string | null;
  /** Node id of the instance's rank 0 (the engine's node) in the session of the request. */
  engineNodeId: string | null;
  /** The gateway node that served the request and wrote the file. */
  node: string;
  createdAt: string;
  stream: boolean;
  ok: boolean;
  status: number;
  error: { code: string; message: string | null } | null;
  /** llama-server's `timings` as it sent them (absent when the request failed before). */
  timings: (EngineTimings & Record<string, unknown>) | null;
}

export interface ChromeTrace {
  traceEvents: TraceEvent[];
  displayTimeUnit: "ms";
  otherData: TraceMeta;
}

const us = (ms: number): number => Math.round(ms * 1000);

/** Spans on one thread of the trace (`pid`, `tid`): each from `fromMs` to `toMs`. */
function spansOn(pid: number, tid: number) {
  return (
    name: string,
    fromMs: number,
    toMs: number,
    args?: Record<string, unknown>,
  ): TraceEvent => {
    const ts = us(fromMs);
    return {
      name,
      cat: "request",
      ph: "X",
      ts,
      dur: Math.max(0, us(toMs) - ts),
      pid,
      tid,
      ...(args ? { args } : {}),
    };
  };
}

type Ev<T extends ChatEvent["type"]> = Extract<ChatEvent, { type: T }>;

function first<T extends ChatEvent["type"]>(events: readonly ChatEvent[], t: T): Ev<T> | undefined {
  return events.find((e): e is Ev<T> => e.type === t);
}

/** Where prefill and decode lie on the gateway's clock (see the header), or undefined without timings. */
export function engineWindow(
  stream: boolean,
  timings: EngineTimings | undefined,
  firstChunkAt: number | undefined,
  headersAt: number | undefined,
): { prefillStart: number; prefillEnd: number; decodeEnd: number } | undefined {
  const prompt = timings?.prompt_ms;
  const predicted = timings?.predicted_ms;
  if (prompt === undefined || predicted === undefined) return undefined;
  if (stream) {
    const anchor = firstChunkAt ?? headersAt;
    if (anchor === undefined) return undefined;
    return { prefillStart: anchor - prompt, prefillEnd: anchor, decodeEnd: anchor + predicted };
  }
  if (headersAt === undefined) return undefined;
  const decodeStart = headersAt - predicted;
  return { prefillStart: decodeStart - prompt, prefillEnd: decodeStart, decodeEnd: headersAt };
}

/**
 * The events a trace is built from: the first of each type, of the try that answered (validated
 * and end: of the whole request).
 */
interface RequestEvents {
  readonly task: Ev<"task">;
  readonly end: Ev<"end">;
  readonly validated: Ev<"validated"> | undefined;
  readonly routed: Ev<"routed"> | undefined;
  readonly sent: Ev<"sent"> | undefined;
  readonly headers: Ev<"headers"> | undefined;
  readonly chunk: Ev<"first_chunk"> | undefined;
  readonly engine: Ev<"engine"> | undefined;
}

/**
 * The engine's spans (its queue, prefill and decode), placed in the gateway's timeline from the
 * engine's own timings (engineWindow); none when the engine reported none.
 */
function engineSpans(
  stream: boolean,
  { engine, chunk, headers, sent, routed }: RequestEvents,
  meta: TraceMeta,
  ids: Record<string, unknown>,
): TraceEvent[] {
  const win = engineWindow(stream, engine?.timings, chunk?.at, headers?.at);
  if (!win) return [];
  const out: TraceEvent[] = [];
  const E = PID.engine;
  const onEngine = spansOn(E, TID.engine);
  const where = routed?.nodeId ? ` on ${routed.nodeId}` : "";
  out.push(
    { name: "process_name", ph: "M", pid: E, tid: 0, args: { name: `engine${where}` } },
    { name: "thread_name", ph: "M", pid: E, tid: TID.engine, args: { name: meta.instanceId } },
  );
  const t = engine!.timings;
  if (sent) out.push(onEngine(SPAN.queue, sent.at, Math.max(sent.at, win.prefillStart), ids));
  out.push(
    onEngine(SPAN.prefill, win.prefillStart, win.prefillEnd, {
      ...ids,
      prompt_ms: t.prompt_ms,
      prompt_n: t.prompt_n,
      cache_n: t.cache_n,
    }),
    onEngine(SPAN.decode, win.prefillEnd, win.decodeEnd, {
      ...ids,
      predicted_ms: t.predicted_ms,
      predicted_n: t.predicted_n,
    }),
  );
  return out;
}

/** What a trace says of its request beside the spans (otherData): ids, outcome, the engine's timings. */
function traceMeta(
  rec: TraceRecord,
  { task, end, validated, routed, engine }: RequestEvents,
): TraceMeta {
  const stream = validated?.stream ?? false;
  return {
    taskId: task.taskId,
    modelId: validated?.model ?? "",
    commandId: rec.commandId,
    instanceId: routed?.instanceId ?? null,
    engineNodeId: routed?.nodeId ?? null,
    node: rec.node,
    createdAt: new Date(Math.floor(rec.receivedAt)).toISOString(),
    stream,
    ok: end.ok,
    status: end.status,
    error: end.ok ? null : { code: end.code ?? "internal", message: end.message ?? null },
    timings: (engine?.timings as TraceMeta["timings"]) ?? null,
  };
}

/**
 * The Chrome trace of one request, or undefined when it has no task id (it failed before the master
 * created its task: nothing to key the trace on) or has not ended.
 */
export function buildTrace(rec: TraceRecord): ChromeTrace | undefined {
  const all = rec.events;
  // A request retried on another instance: its trace is the try that answered (the last one).
  const lastRetry = all.findLastIndex((e) => e.type === "retry");
  const ev = lastRetry < 0 ? all : all.slice(lastRetry + 1);
  const task = first(ev, "task");
  const end = first(all, "end");
  if (!task || !end) return undefined;
  const validated = first(all, "validated");
  const routed = first(ev, "routed");
  const sent = first(ev, "sent");
  const headers = first(ev, "headers");
  const chunk = first(ev, "first_chunk");
  const engine = first(ev, "engine");
  const events: RequestEvents = { task, end, validated, routed, sent, headers, chunk, engine };
  const stream = validated?.stream ?? false;
  const meta = traceMeta(rec, events);

  const ids = {
    taskId: meta.taskId,
    modelId: meta.modelId,
    commandId: meta.commandId,
    instanceId: meta.instanceId,
  };
  const G = PID.gateway;
  const onRequest = spansOn(G, TID.gateway);
  const onMaster = spansOn(G, TID.master);
  const out: TraceEvent[] = [
    { name: "process_name", ph: "M", pid: G, tid: 0, args: { name: `gateway ${rec.node}` } },
    { name: "thread_name", ph: "M", pid: G, tid: TID.gateway, args: { name: "request" } },
    { name: "thread_name", ph: "M", pid: G, tid: TID.master, args: { name: "master" } },
    onRequest(SPAN.root, rec.receivedAt, end.at, {
      ...ids,
      node: rec.node,
      stream,
      status: end.status,
      ok: end.ok,
      ...(lastRetry < 0
        ? {}
        : {
            retried_from: all.flatMap((e) =>
              e.type === "retry" ? [`${e.instanceId} (${e.code})`] : [],
            ),
          }),
    }),
  ];
  if (validated) out.push(onRequest(SPAN.validate, rec.receivedAt, validated.at));
  if (validated && routed)
    out.push(
      onRequest(SPAN.route, validated.at, routed.at, {
        instanceId: routed.instanceId,
        engineNodeId: routed.nodeId ?? null,
      }),
    );
  if (routed && sent)
    out.push(onRequest(SPAN.connect, routed.at, sent.at, { endpoint: routed.endpoint }));
  out.push(onMaster(SPAN.task, sent?.at ?? routed?.at ?? rec.receivedAt, task.at, ids));
  out.push(...engineSpans(stream, events, meta, ids));
  const relayFrom = stream ? chunk?.at : headers?.at;
  if (relayFrom !== undefined) out.push(onRequest(SPAN.stream, relayFrom, end.at, { stream }));
  if (stream && chunk)
    out.push({
      name: SPAN.firstChunk,
      ph: "i",
      s: "t",
      ts: us(chunk.at),
      pid: G,
      tid: TID.gateway,
    });
  if (!end.ok)
    out.push({
      name: SPAN.error,
      cat: "request",
      ph: "i",
      s: "t",
      ts: us(end.at),
      pid: G,
      tid: TID.gateway,
      args: { ...ids, code: meta.error!.code, message: meta.error!.message, status: end.status },
    });
  return { traceEvents: out, displayTimeUnit: "ms", otherData: meta };
}

/** The summary of one trace: gateway-side times in ms from its spans, engine figures as reported. */
export interface TraceStats {
  taskId: string;
  modelId: string;
  commandId: string;
  instanceId: string | null;
  node: string;
  createdAt: string;
  stream: boolean;
  ok: boolean;
  status: number;
  error: { code: string; message: string | null } | null;
  /** Arrival -> end at the gateway. */
  totalMs: number;
  /** Arrival -> first chunk (streaming); arrival -> the whole body (non-streaming); null if none. */
  ttftMs: number | null;
  queueMs: number | null;
  /** llama-server's prompt_ms and predicted_ms, unchanged. */
  prefillMs: number | null;
  decodeMs: number | null;
  /** llama-server's prompt_n, cache_n and predicted_n, unchanged. */
  promptTokens: number | null;
  cachedTokens: number | null;
  completionTokens: number | null;
  /** llama-server's predicted_per_second (else predicted_n / predicted_ms). */
  tokensPerSecond: number | null;
  /** llama-server's prompt_per_second (else prompt_n / prompt_ms). */
  promptTokensPerSecond: number | null;
}

const ms3 = (usec: number): number => Math.round(usec) / 1000;

const rate = (n: number | undefined, ms: number | undefined): number | null =>
  n !== undefined && ms !== undefined && ms > 0 ? (n / ms) * 1000 : null;

/** Stats of a trace file (as written by buildTrace). */
export function traceStats(t: ChromeTrace): TraceStats {
  const m = t.otherData;
  const byName = (n: string) => t.traceEvents.find((e) => e.name === n && e.ph !== "M");
  const root = byName(SPAN.root);
  const totalMs = root?.dur !== undefined ? ms3(root.dur) : 0;
  const chunk = byName(SPAN.firstChunk);
  const ttftMs =
    m.stream && chunk?.ts !== undefined && root?.ts !== undefined
      ? ms3(chunk.ts - root.ts)
      : !m.stream && m.ok
        ? totalMs
        : null;
  const queue = byName(SPAN.queue);
  const tm = m.timings;
  const num = (v: unknown): number | null => (typeof v === "number" ? v : null);
  return {
    taskId: m.taskId,
    modelId: m.modelId,
    commandId: m.commandId,
    instanceId: m.instanceId,
    node: m.node,
    createdAt: m.createdAt,
    stream: m.stream,
    ok: m.ok,
    status: m.status,
    error: m.error,
    totalMs,
    ttftMs,
    queueMs: queue?.dur !== undefined ? ms3(queue.dur) : null,
    prefillMs: num(tm?.prompt_ms),
    decodeMs: num(tm?.predicted_ms),
    promptTokens: num(tm?.prompt_n),
    cachedTokens: num(tm?.cache_n),
    completionTokens: num(tm?.predicted_n),
    tokensPerSecond: num(tm?.predicted_per_second) ?? rate(tm?.predicted_n, tm?.predicted_ms),
    promptTokensPerSecond: num(tm?.prompt_per_second) ?? rate(tm?.prompt_n, tm?.prompt_ms),
  };
}

/** What a trace file must hold to be read back (files are an edge: validated when read). */
export const ChromeTraceSchema = z.object({
  traceEvents: z.array(
    z
      .object({
        name: z.string(),
        ph: z.enum(["X", "i", "M"]),
        pid: z.number(),
        tid: z.number(),
        ts: z.number().optional(),
        dur: z.number().optional(),
      })
      .passthrough(),
  ),
  displayTimeUnit: z.literal("ms"),
  otherData: z
    .object({
      taskId: z.string(),
      modelId: z.string(),
      commandId: z.string(),
      instanceId: z.string().nullable(),
      engineNodeId: z.string().nullable(),
      node: z.string(),
      createdAt: z.string(),
      stream: z.boolean(),
      ok: z.boolean(),
      status: z.number(),
      error: z.object({ code: z.string(), message: z.string().nullable() }).nullable(),
      timings: z.record(z.string(), z.unknown()).nullable(),
    })
    .passthrough(),
});

const nullableNumber = z.number().nullable();

/** A peer's stats answer (the cluster view validates what peers send). */
export const TraceStatsSchema: z.ZodType<TraceStats> = z.object({
  taskId: z.string(),
  modelId: z.string(),
  commandId: z.string(),
  instanceId: z.string().nullable(),
  node: z.string(),
  createdAt: z.string(),
  stream: z.boolean(),
  ok: z.boolean(),
  status: z.number(),
  error: z.object({ code: z.string(), message: z.string().nullable() }).nullable(),
  totalMs: z.number(),
  ttftMs: nullableNumber,
  queueMs: nullableNumber,
  prefillMs: nullableNumber,
  decodeMs: nullableNumber,
  promptTokens: nullableNumber,
  cachedTokens: nullableNumber,
  completionTokens: nullableNumber,
  tokensPerSecond: nullableNumber,
  promptTokensPerSecond: nullableNumber,
});
