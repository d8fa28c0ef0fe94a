// The relay and finish steps: an answer read whole, or a stream forwarded event by event (ids
// rewritten in place), continued once on another ready instance (continuation.ts) when it opted in
// to migration and loses its instance; each ends once, with the task closed and the observer told
// how.
import { anthropicErrorBody, errorBody, ServiceError } from "@ic/protocol";
import type { ChatEvent, ChatObserver, CommandId, EngineTimings, PeerView } from "@ic/protocol";
import { readAll, SseRelay } from "../upstream.ts";
import type { ReadyInstance } from "../readiness.ts";
import { engineFailure } from "../engine-errors.ts";
import {
  ContinuationRewriter,
  continuationRequest,
  includesUsage,
  Transcript,
} from "../migration.ts";
import type { StreamSoFar } from "../migration.ts";
import { anthropicReport, openAiUsage, preciseNow, tokensUsed, engineReport } from "./request.ts";
import type { AnyUsage, ChatContext, RequestContext, StreamStyle } from "./request.ts";
import { readyOthers } from "./routing.ts";
import { migrationOutcomes, openContinuation } from "./continuation.ts";
import { openSink } from "./sink.ts";
import type { Sink } from "./sink.ts";
import { BeforeFirstByte, RETRY_ON, connectionError, openLeg } from "./leg.ts";
import type { Leg } from "./leg.ts";
import { carryCache, handoverTargets, reportCarried } from "./handover.ts";
import type { CarriedCache, HandoverCandidate } from "./handover.ts";

/** How long llama-server keeps a finished stream readable (its STREAM_SESSION_TTL_SECONDS). */
export const ENGINE_STREAM_TTL_MS = 300_000;

/**
 * Relays a leg's SSE answer through `relay` (whole events only, ids rewritten) to `to.write`, and
 * calls `to.ended` once: without an error at the engine's end (or after a client disconnect), else
 * with what ended it (the engine's error event, a broken stream, the leg's failure watch).
 */
export function relayLeg(
  leg: Leg,
  relay: SseRelay,
  model: string,
  to: { write(out: Buffer): void; ended(err?: ServiceError): void },
): void {
  const { upstream } = leg;
  let done = false;
  const end = (err?: ServiceError) => {
    if (done) return;
    done = true;
    to.ended(err);
  };
  const broken = (why: string) =>
    new ServiceError("instance_lost", `the engine stream broke ${why}; retry`);
  void leg.watch.failed.then((e) => end(e));
  upstream.once("data", leg.prefilled);
  upstream.on("data", (chunk: Buffer) => {
    if (done) return;
    leg.touch();
    const r = relay.push(chunk);
    if (r.out) to.write(r.out);
    if (r.error !== undefined) end(engineFailure(safeCode(r.error), r.error, model));
  });
  upstream.on("end", () => end(relay.pendingBytes > 0 ? broken("inside an event") : undefined));
  upstream.on("error", (e) => end(leg.abort.aborted ? undefined : broken(`(${e.message})`)));
  upstream.on("close", () => {
    if (!upstream.complete) end(broken("before it completed"));
  });
}

/**
 * One try of the request on `target`. Throws BeforeFirstByte for a failure before anything was
 * sent to the client (the caller may try another instance), any other error as it is.
 */
export async function attempt(
  ctx: ChatContext,
  request: RequestContext,
  target: ReadyInstance,
): Promise<Response> {
  const { commandId } = request;
  const leg = await openLeg(ctx, request, { target, body: request.body, obs: request.obs });
  const headers: Record<string, string> = {
    "x-task-id": leg.taskId ?? "",
    "x-command-id": commandId,
    "x-instance-id": target.instance.instance_id,
  };
  if (leg.status !== 200 || !request.body.stream) return answerWhole(ctx, request, leg, headers);
  const { conversation } = request;
  if (conversation) {
    headers["x-conversation-id"] = conversation.id;
    // Before the first bytes: a gateway killed right after a client read its first event had not
    // yet told the others (the notice went out a tick after the answer), and the stream could not
    // be read again through another node (the resume chaos test, once). A publish is a buffered
    // write: no wait for the bus.
    ctx.streams.announce({
      type: "started",
      conversation_id: conversation.id,
      token: request.token,
      command_id: commandId,
      instance_id: target.instance.instance_id,
      path: request.endpoint.path,
      expires_at: Date.now() + ctx.limits.total_timeout_ms + ENGINE_STREAM_TTL_MS,
    });
  }
  return new StreamAnswer(ctx, request, leg, headers).response;
}

/** A non-streaming answer, or an engine's refusal (any status but 200), read whole. */
async function answerWhole(
  ctx: ChatContext,
  request: RequestContext,
  leg: Leg,
  headers: Record<string, string>,
): Promise<Response> {
  const { body, countTokens, obs, commandId, c } = request;
  let raw: Buffer;
  try {
    raw = await Promise.race([readAll(leg.upstream), leg.failed]);
  } catch (e) {
    leg.abort.abort(new Error("request failed while reading the engine's answer"));
    leg.close(false);
    throw new BeforeFirstByte(connectionError(leg.watch.failure ?? e, body.model));
  }
  if (leg.status !== 200) {
    leg.close(false);
    throw engineFailure(leg.status, raw.toString(), body.model);
  }
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(raw.toString()) as Record<string, unknown>;
  } catch {
    leg.close(false);
    throw new ServiceError(
      "upstream_failed",
      `the engine for ${body.model} answered a body that is not JSON`,
    );
  }
  const j = json as { timings?: EngineTimings; usage?: AnyUsage };
  const usage = request.endpoint.usage ? openAiUsage(j.usage) : undefined;
  leg.close(true, countTokens ? tokensUsed(usage, j.timings) : undefined);
  settlePrediction(ctx, request, leg.instanceId, j.timings);
  if (obs) {
    const at = preciseNow();
    if (j.timings || usage) obs.event({ type: "engine", at, timings: j.timings ?? {}, usage });
    obs.event({ type: "end", at, ok: true, status: 200, code: undefined, message: undefined });
  }
  // A completion's, a response's or a message's id is the command id; lists and counts have none.
  return c.json(request.endpoint.rewritesId ? { ...json, id: commandId } : json, 200, headers);
}

/**
 * A streamed answer, one stream's relay: complete SSE events are forwarded as they arrive (id
 * rewritten in place); it holds the leg it reads now, what it forwarded last, and how it ends
 * (once). Under @hono/node-server the events go straight to the Node response; elsewhere through a
 * web stream. A stream that opted in to migration and loses its instance after its first byte goes
 * on, once, on another ready instance (migrate below); else an error ends it with one error event.
 */
class StreamAnswer implements HandoverCandidate {
  readonly response: Response;
  private current: Leg;
  private readonly sink: Sink;
  private finished = false;
  /**
   * The last two forwarded buffers: the engine's timings are in its last event before [DONE], read
   * once at the end instead of searched for in every chunk.
   */
  private lastOut: Buffer | undefined;
  private prevOut: Buffer | undefined;
  /** The first forwarded buffer: an Anthropic stream's input usage is in its message_start. */
  private firstOut: Buffer | undefined;
  /** Only a request that opted in reads what it relayed (to continue it elsewhere if need be). */
  private readonly transcript: Transcript | undefined;
  private continuation: ContinuationRewriter | undefined;
  /** The leg being handed over (its node drains): what it still sends is not relayed. */
  private leaving: Leg | undefined;
  /** The cache that moved with the stream, counted when it ends. */
  private carried: CarriedCache | undefined;
  private unwatch: (() => void) | undefined;

  private readonly commandId: CommandId;
  private readonly obs: ChatObserver | undefined;

  constructor(
    private readonly ctx: ChatContext,
    private readonly request: RequestContext,
    first: Leg,
    headers: Record<string, string>,
  ) {
    this.commandId = request.commandId;
    this.obs = request.obs;
    this.current = first;
    this.sink = request.early ?? openSink(request.c, headers, () => this.current.clientGone());
    this.transcript = request.migrate ? new Transcript() : undefined;
    this.relayFirst(first);
    this.response = this.sink.response;
    // A stream whose cache can move goes elsewhere when its node drains (handover.ts).
    if (this.transcript && request.kvSeed !== undefined) this.unwatch = ctx.handovers.add(this);
  }

  /**
   * A tick of the hand-over watch: when this stream's node is draining and the model is ready off
   * draining nodes on an engine that restores caches, the stream moves there with its cache.
   */
  check(live: readonly PeerView[]): void {
    if (this.finished || this.leaving || this.continuation || !this.transcript) return;
    // A stream that could not go on elsewhere (a tool call, its finish sent) stays where it is.
    if (
      this.request.clientGone ||
      !continuationRequest(this.request.body, this.transcript.sofar).ok
    )
      return;
    const snap = this.ctx.o.cluster.snapshot();
    const source = snap.instances[this.current.instanceId];
    if (!source) return;
    const targets = handoverTargets(source, readyOthers(this.ctx, this.request, live), live);
    if (targets.length === 0) return;
    const leg = this.current;
    this.leaving = leg;
    leg.abort.abort(new Error("handed over: its node is draining"));
    const node = snap.members[source.assignments[0]!.node_id]?.name;
    const err = new ServiceError(
      "instance_lost",
      `the stream's node (${node ?? "its node"}) is draining and its continuation elsewhere failed; retry`,
    );
    void this.migrate(leg, err, this.transcript.sofar, targets);
  }

  private relayFirst(first: Leg): void {
    const { obs, request } = this;
    const track = obs !== undefined || request.countTokens || request.prediction !== undefined;
    let firstChunk = false;
    const named = request.endpoint.style === "anthropic";
    const relay = new SseRelay(this.commandId, named, request.resumable ? 0 : undefined);
    relayLeg(first, relay, request.body.model, {
      write: (out) => {
        if (this.leaving) return;
        this.sink.write(out);
        if (obs && !firstChunk) obs.event({ type: "first_chunk", at: preciseNow() });
        firstChunk = true;
        if (track) {
          this.firstOut ??= out;
          this.prevOut = this.lastOut;
          this.lastOut = out;
        }
        this.transcript?.push(out);
      },
      ended: (err) => this.ended(first, err),
    });
  }

  /** The engine's report and the tokens used, from the continuation or the last events relayed. */
  private report(): { report?: Extract<ChatEvent, { type: "engine" }>; tokens?: number } {
    if (this.continuation) {
      const { usage, timings } = this.continuation.report();
      const report = timings
        ? { type: "engine" as const, at: preciseNow(), timings, usage }
        : undefined;
      return { ...(report ? { report } : {}), tokens: tokensUsed(usage, timings) };
    }
    const { endpoint } = this.request;
    const { countTokens, prediction } = this.request;
    if ((!this.obs && !countTokens && !prediction) || !endpoint.usage) return {};
    const report =
      endpoint.style === "anthropic"
        ? anthropicReport(this.firstOut, [this.lastOut, this.prevOut])
        : ((this.lastOut && engineReport(this.lastOut)) ??
          (this.prevOut && engineReport(this.prevOut)));
    return report ? { report, tokens: tokensUsed(report.usage, report.timings) } : {};
  }

  private finish(err?: ServiceError): void {
    if (this.finished) return;
    this.finished = true;
    this.unwatch?.();
    if (err) this.sink.write(errorEvent(this.request.endpoint.style, err));
    // The client gets its last bytes before the task bookkeeping runs.
    this.sink.end();
    const { report, tokens } = this.report();
    this.current.close(!err, tokens);
    if (this.carried) reportCarried(this.ctx, this.request, this.carried, report?.timings);
    if (!err) settlePrediction(this.ctx, this.request, this.current.instanceId, report?.timings);
    const obs = this.obs;
    if (!obs) return;
    if (report) obs.event(report);
    obs.event({
      type: "end",
      at: preciseNow(),
      ok: !err,
      status: 200,
      code: err?.code,
      message: err?.message,
    });
  }

  private ended(leg: Leg, err?: ServiceError): void {
    if (this.finished || leg !== this.current || leg === this.leaving) return;
    if (err && !leg.upstream.complete) leg.abort.abort(new Error(`request ended: ${err.code}`));
    const { transcript } = this;
    if (
      err &&
      transcript &&
      !this.continuation &&
      RETRY_ON.has(err.code) &&
      !this.request.clientGone
    ) {
      void this.migrate(leg, err, transcript.sofar);
      return;
    }
    this.finish(err);
  }

  /**
   * The stream's instance was lost (`err`) after the client got `sofar`, or its node drains and
   * `planned` are where it may go: the request, continued from there, goes on in this stream from
   * another ready instance (with the stream's KV cache where it can move); else `err` ends it.
   */
  private async migrate(
    lost: Leg,
    err: ServiceError,
    sofar: StreamSoFar,
    planned?: readonly ReadyInstance[],
  ): Promise<void> {
    const { ctx, commandId, request } = this;
    const { body } = request;
    const outcome = migrationOutcomes(ctx, request, { from: lost.instanceId, err });
    lost.close(false);
    // Only a hand-over's source still answers: a lost engine's cache went with it.
    this.carried = planned ? await carryCache(ctx, request, lost, planned) : undefined;
    const next = await openContinuation(ctx, request, sofar, {
      outcome,
      carried: this.carried,
    });
    if (!next) return this.finish(err);
    const { leg, to } = next;
    const moved = this.carried?.result.ok ? this.carried.result : undefined;
    const rewriter = new ContinuationRewriter({
      id: commandId,
      created: sofar.created,
      model: sofar.model,
      migratedFrom: lost.instanceId,
      sentTokens: sofar.tokens,
      includeUsage: includesUsage(body),
      ...(moved
        ? { kv: { restored_tokens: moved.restored.tokens, bytes: moved.saved.bytes } }
        : {}),
    });
    this.current = leg;
    this.leaving = undefined;
    this.continuation = rewriter;
    let relayed = false;
    relayLeg(leg, new SseRelay(commandId), body.model, {
      write: (out) => {
        const text = rewriter.rewrite(out.toString());
        if (text.length === 0) return;
        this.sink.write(Buffer.from(text));
        if (relayed) return;
        relayed = true;
        outcome("migrated", {
          to,
          sent_tokens: sofar.tokens,
          max_tokens: next.maxTokens,
          ...(moved
            ? { kv_restored_tokens: moved.restored.tokens, kv_bytes: moved.saved.bytes }
            : {}),
        });
      },
      // A continuation that ends before its first event reached the client: the loss's error.
      ended: (e) => {
        if (relayed || this.finished) return this.ended(leg, e);
        outcome("failed", { to, err: e?.message });
        this.ended(leg, err);
      },
    });
  }
}

/**
 * The event that ends a stream with `err`, in the stream's dialect: OpenAI's `data: {"error": …}`
 * (which the openai clients raise from, on chat and on the Responses API), Anthropic's named
 * `event: error` with its envelope (which the Anthropic clients raise from).
 */
export function errorEvent(style: StreamStyle, err: ServiceError): Buffer {
  return Buffer.from(
    style === "anthropic"
      ? `event: error\ndata: ${JSON.stringify(anthropicErrorBody(err))}\n\n`
      : `data: ${JSON.stringify(errorBody(err))}\n\n`,
  );
}

/** The numeric `code` of an engine error event (`{"error":{"code":400,...}}`), 500 when absent. */
export function safeCode(text: string): number {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    return typeof code === "number" ? code : 500;
  } catch {
    return 500;
  }
}

/**
 * The engine's own counts (`timings.cache_n` reused of `cache_n + prompt_n` prompt tokens) settle
 * what the prompt-cache map predicted for the request on that instance (prompt-cache.ts).
 */
function settlePrediction(
  ctx: ChatContext,
  request: RequestContext,
  instanceId: string,
  timings: EngineTimings | undefined,
): void {
  const p = request.prediction;
  ctx.kv.notePrefill(instanceId, timings);
  if (!p || p.instanceId !== instanceId || timings?.cache_n === undefined) return;
  request.prediction = undefined;
  ctx.cache.settle(p, {
    cached: timings.cache_n,
    prompt: timings.cache_n + (timings.prompt_n ?? 0),
  });
}
