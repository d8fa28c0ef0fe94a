// Pure span building and stats: tables of ChatEvent sequences (streaming, non-streaming, failures
// before and after the task) -> the Chrome trace's named spans, and the stats read back from it.
import type { ChatEvent } from "@ic/protocol";
import type { TaskId } from "@ic/protocol";
import { describe, expect, it } from "vitest";
import { buildTrace, ChromeTraceSchema, engineWindow, SPAN, traceStats } from "./trace.ts";
import type { ChromeTrace, TraceRecord } from "./trace.ts";

const T0 = 1_763_900_000_000;
const TASK = "t-0a1b2c3d" as TaskId;
const TIMINGS = {
  cache_n: 0,
  prompt_n: 12,
  prompt_ms: 3.25,
  prompt_per_second: 3692.3076923076924,
  predicted_n: 8,
  predicted_ms: 6.5,
  predicted_per_second: 1230.7692307692307,
};

/** A request's events at `T0 + offset` ms, in order. */
function seq(stream: boolean, parts: Partial<Record<ChatEvent["type"], number>>): ChatEvent[] {
  const at = (k: ChatEvent["type"]) => T0 + parts[k]!;
  const out: ChatEvent[] = [];
  if (parts.validated !== undefined)
    out.push({ type: "validated", at: at("validated"), model: "test/tiny", stream });
  if (parts.routed !== undefined)
    out.push({
      type: "routed",
      at: at("routed"),
      instanceId: "i-1",
      nodeId: "n-2",
      endpoint: "http://node-2:4100",
    });
  if (parts.sent !== undefined) out.push({ type: "sent", at: at("sent") });
  if (parts.task !== undefined) out.push({ type: "task", at: at("task"), taskId: TASK });
  if (parts.headers !== undefined) out.push({ type: "headers", at: at("headers"), status: 200 });
  if (parts.first_chunk !== undefined) out.push({ type: "first_chunk", at: at("first_chunk") });
  if (parts.engine !== undefined)
    out.push({
      type: "engine",
      at: at("engine"),
      timings: TIMINGS,
      usage: { prompt_tokens: 12, completion_tokens: 8 },
    });
  return out;
}

const ok = (at: number): ChatEvent => ({
  type: "end",
  at: T0 + at,
  ok: true,
  status: 200,
  code: undefined,
  message: undefined,
});

const rec = (events: ChatEvent[]): TraceRecord => ({
  commandId: "chatcmpl-abc",
  receivedAt: T0,
  node: "node-1",
  events,
});

/** name -> [start ms, end ms] relative to T0 (instants: [t, t]). */
function spans(t: ChromeTrace): Record<string, [number, number]> {
  const out: Record<string, [number, number]> = {};
  for (const e of t.traceEvents) {
    if (e.ph === "M") continue;
    const start = (e.ts! - T0 * 1000) / 1000;
    out[e.name] = [start, start + (e.dur ?? 0) / 1000];
  }
  return out;
}

const STREAM = seq(true, {
  validated: 0.4,
  routed: 0.6,
  sent: 1.0,
  task: 2.5,
  headers: 7.0,
  first_chunk: 7.5,
  engine: 14.5,
});
const NON_STREAM = seq(false, { validated: 0.4, routed: 0.6, sent: 1.0, task: 2.5, headers: 12 });

describe("buildTrace", () => {
  it.each<{
    name: string;
    events: ChatEvent[];
    spans: Record<string, [number, number]>;
  }>([
    {
      name: "a stream: prefill ends at the first chunk, decode follows for predicted_ms",
      events: [...STREAM, ok(15)],
      spans: {
        [SPAN.root]: [0, 15],
        [SPAN.validate]: [0, 0.4],
        [SPAN.route]: [0.4, 0.6],
        [SPAN.connect]: [0.6, 1.0],
        [SPAN.task]: [1.0, 2.5],
        // first chunk 7.5 - prompt_ms 3.25 = 4.25
        [SPAN.queue]: [1.0, 4.25],
        [SPAN.prefill]: [4.25, 7.5],
        [SPAN.decode]: [7.5, 14],
        [SPAN.stream]: [7.5, 15],
        [SPAN.firstChunk]: [7.5, 7.5],
      },
    },
    {
      name: "non-streaming: decode ends at the headers (the body comes finished)",
      events: [
        ...NON_STREAM,
        {
          type: "engine",
          at: T0 + 12.5,
          timings: TIMINGS,
          usage: undefined,
        },
        ok(12.5),
      ],
      spans: {
        [SPAN.root]: [0, 12.5],
        [SPAN.validate]: [0, 0.4],
        [SPAN.route]: [0.4, 0.6],
        [SPAN.connect]: [0.6, 1.0],
        [SPAN.task]: [1.0, 2.5],
        // headers 12 - predicted 6.5 = 5.5; - prompt 3.25 = 2.25
        [SPAN.queue]: [1.0, 2.25],
        [SPAN.prefill]: [2.25, 5.5],
        [SPAN.decode]: [5.5, 12],
        [SPAN.stream]: [12, 12.5],
      },
    },
    {
      name: "an engine that started before 'sent' was seen: the queue is empty, never negative",
      events: [
        ...seq(true, { validated: 0.4, routed: 0.6, sent: 5, task: 6, first_chunk: 7, engine: 14 }),
        ok(15),
      ],
      spans: {
        [SPAN.root]: [0, 15],
        [SPAN.validate]: [0, 0.4],
        [SPAN.route]: [0.4, 0.6],
        [SPAN.connect]: [0.6, 5],
        [SPAN.task]: [5, 6],
        [SPAN.queue]: [5, 5],
        [SPAN.prefill]: [3.75, 7],
        [SPAN.decode]: [7, 13.5],
        [SPAN.stream]: [7, 15],
        [SPAN.firstChunk]: [7, 7],
      },
    },
    {
      name: "a stream cut by a lost instance: no engine timings, an error instant at the end",
      events: [
        ...seq(true, {
          validated: 0.4,
          routed: 0.6,
          sent: 1,
          task: 2,
          headers: 7,
          first_chunk: 7.5,
        }),
        {
          type: "end",
          at: T0 + 30,
          ok: false,
          status: 200,
          code: "instance_lost",
          message: "the engine stream broke; retry",
        },
      ],
      spans: {
        [SPAN.root]: [0, 30],
        [SPAN.validate]: [0, 0.4],
        [SPAN.route]: [0.4, 0.6],
        [SPAN.connect]: [0.6, 1],
        [SPAN.task]: [1, 2],
        [SPAN.stream]: [7.5, 30],
        [SPAN.firstChunk]: [7.5, 7.5],
        [SPAN.error]: [30, 30],
      },
    },
    {
      name: "an engine refusal after the task: headers but no timings, the error with its code",
      events: [
        ...seq(false, { validated: 0.4, routed: 0.6, sent: 1, task: 2, headers: 3 }),
        {
          type: "end",
          at: T0 + 3.5,
          ok: false,
          status: 400,
          code: "invalid_request",
          message: "the prompt is longer than the context",
        },
      ],
      spans: {
        [SPAN.root]: [0, 3.5],
        [SPAN.validate]: [0, 0.4],
        [SPAN.route]: [0.4, 0.6],
        [SPAN.connect]: [0.6, 1],
        [SPAN.task]: [1, 2],
        [SPAN.stream]: [3, 3.5],
        [SPAN.error]: [3.5, 3.5],
      },
    },
  ])("$name", ({ events, spans: want }) => {
    const t = buildTrace(rec(events))!;
    expect(t).toBeDefined();
    const got = spans(t);
    expect(Object.keys(got).sort()).toEqual(Object.keys(want).sort());
    for (const [name, [a, b]] of Object.entries(want)) {
      expect(got[name]![0], `${name} start`).toBeCloseTo(a, 3);
      expect(got[name]![1], `${name} end`).toBeCloseTo(b, 3);
    }
    // A valid Chrome trace: complete events in integer microseconds, one process per side.
    expect(ChromeTraceSchema.safeParse(JSON.parse(JSON.stringify(t))).success).toBe(true);
    for (const e of t.traceEvents.filter((x) => x.ph === "X")) {
      expect(Number.isInteger(e.ts) && Number.isInteger(e.dur)).toBe(true);
      expect(e.dur).toBeGreaterThanOrEqual(0);
    }
    const root = t.traceEvents.find((e) => e.name === SPAN.root)!;
    expect(root.args).toMatchObject({
      taskId: TASK,
      modelId: "test/tiny",
      commandId: "chatcmpl-abc",
      instanceId: "i-1",
    });
  });

  it.each<[string, ChatEvent[]]>([
    [
      "failed before the task (model not found)",
      [
        { type: "validated", at: T0 + 1, model: "x", stream: false },
        {
          type: "end",
          at: T0 + 2,
          ok: false,
          status: 404,
          code: "model_not_found",
          message: "no instance",
        },
      ],
    ],
    [
      "failed while connecting (no task reply)",
      [
        ...seq(false, { validated: 0.4, routed: 0.6 }),
        {
          type: "end",
          at: T0 + 5000,
          ok: false,
          status: 504,
          code: "upstream_timeout",
          message: "no connection",
        },
      ],
    ],
    ["not ended yet", [...STREAM]],
  ])("makes no trace when the request %s", (_name, events) => {
    expect(buildTrace(rec(events))).toBeUndefined();
  });

  it("keeps the ids, the error and the engine's timings beside the events", () => {
    const t = buildTrace(rec([...STREAM, ok(15)]))!;
    expect(t.otherData).toEqual({
      taskId: TASK,
      modelId: "test/tiny",
      commandId: "chatcmpl-abc",
      instanceId: "i-1",
      engineNodeId: "n-2",
      node: "node-1",
      createdAt: new Date(T0).toISOString(),
      stream: true,
      ok: true,
      status: 200,
      error: null,
      timings: TIMINGS,
    });
    const err = t.traceEvents.find((e) => e.name === SPAN.error);
    expect(err).toBeUndefined();
  });
});

describe("a request retried on another instance", () => {
  it("is traced as the try that answered, and the request span names the instance it left", () => {
    const FIRST = "t-first000" as TaskId;
    const events: ChatEvent[] = [
      { type: "validated", at: T0 + 0.4, model: "test/tiny", stream: false },
      { type: "routed", at: T0 + 0.6, instanceId: "i-gone", nodeId: "n-3", endpoint: "http://x" },
      { type: "sent", at: T0 + 1 },
      { type: "task", at: T0 + 2, taskId: FIRST },
      { type: "retry", at: T0 + 5, code: "instance_lost", instanceId: "i-gone" },
      ...seq(false, { routed: 5.2, sent: 5.5, task: 6, headers: 12 }),
      ok(13),
    ];
    const t = buildTrace(rec(events))!;
    expect(t.otherData).toMatchObject({ taskId: TASK, instanceId: "i-1", engineNodeId: "n-2" });
    const root = t.traceEvents.find((e) => e.name === SPAN.root)!;
    expect(root.args).toMatchObject({ retried_from: ["i-gone (instance_lost)"] });
    expect(spans(t)[SPAN.connect]).toEqual([5.2, 5.5]);
  });
});

describe("engineWindow", () => {
  it("needs both prompt_ms and predicted_ms and an anchor", () => {
    expect(engineWindow(true, { prompt_ms: 1 }, 10, 9)).toBeUndefined();
    expect(engineWindow(true, TIMINGS, undefined, undefined)).toBeUndefined();
    expect(engineWindow(false, TIMINGS, 10, undefined)).toBeUndefined();
    // A stream without a content chunk falls back to the headers.
    expect(engineWindow(true, TIMINGS, undefined, 10)).toEqual({
      prefillStart: 6.75,
      prefillEnd: 10,
      decodeEnd: 16.5,
    });
  });
});

describe("traceStats", () => {
  it("reports the engine's own figures unchanged and the gateway's from the spans", () => {
    const t = JSON.parse(JSON.stringify(buildTrace(rec([...STREAM, ok(15)])))) as ChromeTrace;
    expect(traceStats(t)).toEqual({
      taskId: TASK,
      modelId: "test/tiny",
      commandId: "chatcmpl-abc",
      instanceId: "i-1",
      node: "node-1",
      createdAt: new Date(T0).toISOString(),
      stream: true,
      ok: true,
      status: 200,
      error: null,
      totalMs: 15,
      ttftMs: 7.5,
      queueMs: 3.25,
      prefillMs: TIMINGS.prompt_ms,
      decodeMs: TIMINGS.predicted_ms,
      promptTokens: 12,
      cachedTokens: 0,
      completionTokens: 8,
      tokensPerSecond: TIMINGS.predicted_per_second,
      promptTokensPerSecond: TIMINGS.prompt_per_second,
    });
  });

  it("computes tokens/s from n and ms when the engine sent no rate; ttft is the body for non-streaming", () => {
    const timings = { prompt_n: 10, prompt_ms: 5, predicted_n: 4, predicted_ms: 8 };
    const t = buildTrace(
      rec([...NON_STREAM, { type: "engine", at: T0 + 12.5, timings, usage: undefined }, ok(12.5)]),
    )!;
    const s = traceStats(t);
    expect(s.ttftMs).toBe(12.5);
    expect(s.tokensPerSecond).toBe(500);
    expect(s.promptTokensPerSecond).toBe(2000);
    expect(s.cachedTokens).toBeNull();
  });

  it("has no engine figures and no ttft for a stream that failed before its first chunk", () => {
    const t = buildTrace(
      rec([
        ...seq(true, { validated: 0.4, routed: 0.6, sent: 1, task: 2, headers: 3 }),
        {
          type: "end",
          at: T0 + 9,
          ok: false,
          status: 200,
          code: "task_failed",
          message: "lost",
        },
      ]),
    )!;
    const s = traceStats(t);
    expect(s).toMatchObject({
      ok: false,
      error: { code: "task_failed", message: "lost" },
      totalMs: 9,
      ttftMs: null,
      queueMs: null,
      prefillMs: null,
      decodeMs: null,
      tokensPerSecond: null,
    });
  });
});
