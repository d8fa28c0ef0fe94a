// Typed publish / subscribe / request over nats.js, generic over the protocol catalog.
// Every inbound message and reply is validated with safeParse (the bus edge); invalid ones are dropped and logged.
// No send can throw out of this class into a callback: a publish or a reply that fails (payload over
// the server's max_payload, a closed connection) is logged with its subject and size, counted
// (`sendStats`, on /metrics), and reported to the caller as a value (publish) or a typed
// ServiceError (request); a reply that fails leaves the requester to its timeout.
import { randomUUID } from "node:crypto";
import { connect, createInbox, headers, JSONCodec } from "nats";
import type { Msg, NatsConnection, Subscription } from "nats";
import { CATALOG, ServiceError } from "@ic/protocol";
import type {
  MessageIn,
  MessageOf,
  PublishName,
  ReplyIn,
  ReplyOf,
  RequestName,
} from "@ic/protocol";
import type { Logger } from "@ic/log";
import { JetStreamIntentStore } from "./intent-store.ts";
import type { IntentStoreOptions } from "./intent-store.ts";
import type { z } from "zod";

const codec = JSONCodec();
/** Header naming the bus connection that published a message (lets a subscriber skip its own). */
const ORIGIN_HEADER = "ic-origin";

export interface Unsubscribe {
  (): void;
}

// The catalog is a const object, so indexing it with a generic key loses the link between a name
// and its schema; these two accessors restore it in one place.
function messageSchema<K extends keyof typeof CATALOG>(name: K): z.ZodType<MessageOf<K>> {
  return CATALOG[name].message as unknown as z.ZodType<MessageOf<K>>;
}
function replySchema<K extends RequestName>(name: K): z.ZodType<ReplyOf<K>> {
  return (CATALOG[name] as unknown as { reply: z.ZodType<ReplyOf<K>> }).reply;
}

function subjectOf(name: keyof typeof CATALOG, suffix?: string): string {
  const base = CATALOG[name].subject;
  return suffix ? `${base}.${suffix}` : base;
}

/** One handler of a subject shared by this connection's subscriptions (see `Bus.subscribe`). */
interface SharedHandler {
  readonly handler: (msg: unknown, meta: MessageMeta) => void;
  readonly ignoreOwn: boolean;
}

/** What the bus knows of a message beyond its body. */
export interface MessageMeta {
  /** The publishing connection's origin id (see `Bus.origin`), when it sent one. */
  readonly origin: string | undefined;
}

/** The three ways a message leaves this connection. */
export type SendOp = "publish" | "request" | "respond";

/** Sends that failed and the largest message sent, per catalog name (a bounded label set). */
export interface BusSendStats {
  /** Keyed by op, catalog name and failure code (`MAX_PAYLOAD_EXCEEDED`, `CONNECTION_CLOSED`, ...). */
  readonly failures: ReadonlyMap<string, { op: SendOp; name: string; code: string; count: number }>;
  /** Largest encoded body sent (or tried) per catalog name, in bytes. */
  readonly largest: ReadonlyMap<string, number>;
  /** Messages and bytes (payloads) this connection received and sent since it opened. */
  readonly traffic: { inMsgs: number; outMsgs: number; inBytes: number; outBytes: number };
}

/** The code of a failed nats.js send: its NatsError code, else the error's name. */
function sendCode(e: unknown): string {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" ? code : e instanceof Error ? e.name : "unknown";
}

/** A send that failed: how it was sent, its catalog name and subject, its encoded size in bytes. */
interface FailedSend {
  op: SendOp;
  name: string;
  subject: string;
  bytes: number;
}

function closedError(): Error {
  return Object.assign(new Error("the bus connection is closed"), { code: "CONNECTION_CLOSED" });
}

export class Bus implements AsyncDisposable {
  /** Names this connection in every message it publishes or answers (the `ic-origin` header). */
  readonly origin = randomUUID();

  /** One NATS subscription per subject, shared by its handlers on this connection. */
  private readonly shared = new Map<
    string,
    { readonly sub: Subscription; readonly handlers: Set<SharedHandler> }
  >();

  private readonly failures = new Map<
    string,
    { op: SendOp; name: string; code: string; count: number }
  >();
  private readonly largest = new Map<string, number>();

  private constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

  /** The cluster's intent store (JetStream key-value) over this connection. */
  intentStore(log: Logger, opts: IntentStoreOptions = {}): JetStreamIntentStore {
    return new JetStreamIntentStore(this.nc, log.child({ component: "intent-store" }), opts);
  }

  /** The server's largest accepted message, in bytes (nats-server's `max_payload`, 1 MiB by default). */
  get maxPayload(): number {
    return this.nc.info?.max_payload ?? 1024 * 1024;
  }

  /** Failed sends and the largest message per catalog name, for /metrics. */
  get sendStats(): BusSendStats {
    return { failures: this.failures, largest: this.largest, traffic: this.nc.stats() };
  }

  /** Encodes a body and records its size under its catalog name. */
  private encode(name: string, msg: unknown): Uint8Array {
    const data = codec.encode(msg);
    if (data.length > (this.largest.get(name) ?? 0)) this.largest.set(name, data.length);
    return data;
  }

  /** Logs and counts a send that failed; never throws. */
  private sendFailed({ op, name, subject, bytes }: FailedSend, e: unknown): string {
    const code = sendCode(e);
    const key = `${op}|${name}|${code}`;
    const f = this.failures.get(key);
    if (f) f.count += 1;
    else this.failures.set(key, { op, name, code, count: 1 });
    // A closed or draining connection is the normal end of a stopping node: worth a warning only.
    const level = /CLOSED|DRAINING/.test(code) ? "warn" : "error";
    this.log[level](
      { err: e, op, subject, bytes, max_payload: this.maxPayload, code },
      "bus send failed",
    );
    return code;
  }

  /** Connects with the node's bus credentials; a refused login fails at once (no reconnect loop). */
  static async connect(
    url: string,
    log: Logger,
    opts: { name?: string; user: string; password: string },
  ): Promise<Bus> {
    const nc = await connect({
      servers: url,
      name: opts.name,
      user: opts.user,
      pass: opts.password,
      reconnect: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 200,
      pingInterval: 5000,
    });
    const bus = new Bus(nc, log.child({ component: "bus" }));
    void bus.watchStatus();
    return bus;
  }

  private async watchStatus(): Promise<void> {
    for await (const s of this.nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnect")
        this.log.info({ type: s.type }, "bus connection");
    }
  }

  /** Every message this connection sends (publish, request, reply) names its origin. */
  private originHeaders() {
    const h = headers();
    h.set(ORIGIN_HEADER, this.origin);
    return h;
  }

  /**
   * The same headers, built once for publishes: nats.js only encodes them, and a publish per
   * control event (two per chat request) otherwise built a header set each time.
   */
  private readonly publishHeaders = this.originHeaders();

  get closed(): boolean {
    return this.nc.isClosed();
  }

  /** Publishes a message; false when it could not be sent (logged and counted, never thrown). */
  publish<K extends PublishName>(name: K, msg: MessageIn<K>, suffix?: string): boolean {
    const subject = subjectOf(name, suffix);
    let data: Uint8Array | undefined;
    try {
      data = this.encode(name, msg);
      if (this.nc.isClosed()) throw closedError();
      this.nc.publish(subject, data, { headers: this.publishHeaders });
      return true;
    } catch (e) {
      this.sendFailed({ op: "publish", name, subject, bytes: data?.length ?? 0 }, e);
      return false;
    }
  }

  /**
   * Handles every valid message on a subject. With `ignoreOwn`, messages this connection published
   * are dropped before decoding (a publisher that already applied what it sent skips the echo).
   * Handlers of the same subject on this connection share one NATS subscription: the server sends
   * each message once and it is decoded and validated once, every handler getting the same object
   * (read-only to them). A node subscribes to every node's heartbeat twice (the cluster agent, and
   * the telemetry echo), and heartbeats grow with the cluster.
   */
  subscribe<K extends PublishName>(
    name: K,
    handler: (msg: MessageOf<K>, meta: MessageMeta) => void,
    opts: { suffix?: string; ignoreOwn?: boolean } = {},
  ): Unsubscribe {
    const subject = subjectOf(name, opts.suffix);
    let shared = this.shared.get(subject);
    if (!shared) {
      const schema = messageSchema(name);
      const handlers = new Set<SharedHandler>();
      const sub = this.nc.subscribe(subject, {
        callback: (err, m) => {
          if (err) return;
          const origin = m.headers?.get(ORIGIN_HEADER) || undefined;
          const own = origin === this.origin;
          let parsed: MessageOf<K> | undefined;
          let decoded = false;
          for (const h of handlers) {
            if (h.ignoreOwn && own) continue;
            if (!decoded) {
              parsed = this.decode(schema, m.data, name);
              decoded = true;
            }
            if (parsed === undefined) return;
            try {
              h.handler(parsed, { origin });
            } catch (e) {
              this.log.error({ err: e, subject: m.subject }, "message handler failed");
            }
          }
        },
      });
      shared = { sub, handlers };
      this.shared.set(subject, shared);
    }
    const entry: SharedHandler = {
      handler: handler as unknown as SharedHandler["handler"],
      ignoreOwn: opts.ignoreOwn ?? false,
    };
    const s = shared;
    s.handlers.add(entry);
    return () => {
      if (!s.handlers.delete(entry) || s.handlers.size > 0) return;
      s.sub.unsubscribe();
      if (this.shared.get(subject) === s) this.shared.delete(subject);
    };
  }

  /** Serve a request subject; the handler's value (or thrown ServiceError, mapped by the caller's schema) is the reply. */
  respond<K extends RequestName>(
    name: K,
    handler: (
      msg: MessageOf<K>,
      meta: MessageMeta,
    ) => Promise<ReplyIn<K> | undefined> | ReplyIn<K> | undefined,
    opts: { suffix?: string; queue?: string } = {},
  ): Unsubscribe {
    const schema = messageSchema(name);
    const sub: Subscription = this.nc.subscribe(subjectOf(name, opts.suffix), {
      ...(opts.queue ? { queue: opts.queue } : {}),
      callback: (err, m) => {
        if (err || !m.reply) return;
        const parsed = this.decode(schema, m.data, name);
        if (parsed === undefined) return;
        const origin = m.headers?.get(ORIGIN_HEADER) || undefined;
        Promise.resolve()
          .then(() => handler(parsed, { origin }))
          .then(
            (reply) => {
              if (reply === undefined) return;
              this.reply(name, m, reply);
            },
            (e: unknown) =>
              this.log.error({ err: e, subject: m.subject }, "request handler failed"),
          );
      },
    });
    return () => sub.unsubscribe();
  }

  /** Sends one reply; a failure is logged and counted, and the requester meets its timeout. */
  private reply(name: string, m: Msg, reply: unknown): void {
    let data: Uint8Array | undefined;
    try {
      data = this.encode(name, reply);
      if (this.nc.isClosed()) throw closedError();
      if (!m.respond(data, { headers: this.originHeaders() }))
        throw Object.assign(new Error("the request has no reply subject"), { code: "NO_REPLY" });
    } catch (e) {
      this.sendFailed({ op: "respond", name, subject: m.subject, bytes: data?.length ?? 0 }, e);
    }
  }

  /**
   * One request, one reply. With `from`, only a reply from that origin counts (a request served by a
   * single rightful responder, such as the master, cannot be answered by another member first).
   */
  async request<K extends RequestName>(
    name: K,
    msg: MessageIn<K>,
    opts: { timeoutMs: number; suffix?: string; from?: string },
  ): Promise<ReplyOf<K>> {
    const reply = replySchema(name);
    if (opts.from !== undefined) {
      const from = opts.from;
      const [got] = await this.gather(name, msg, {
        maxWaitMs: opts.timeoutMs,
        expected: 1,
        suffix: opts.suffix,
        accept: (origin) => origin === from,
      });
      if (got === undefined)
        throw new ServiceError(
          "unavailable",
          `${subjectOf(name, opts.suffix)}: no reply from the expected responder`,
        );
      return got;
    }
    const subject = subjectOf(name, opts.suffix);
    let m;
    try {
      m = await this.nc.request(subject, this.encode(name, msg), {
        timeout: opts.timeoutMs,
        headers: this.originHeaders(),
      });
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (code === "503" || code === "TIMEOUT")
        throw new ServiceError(
          "unavailable",
          `${subject}: ${code === "503" ? "no responder" : "timed out"}`,
          { cause: e },
        );
      // The request itself could not be sent.
      this.sendFailed({ op: "request", name, subject, bytes: codec.encode(msg).length }, e);
      throw new ServiceError("unavailable", `${subject}: ${String(e)}`, { cause: e });
    }
    const parsed = this.decode(reply, m.data, name);
    if (parsed === undefined) throw new ServiceError("internal", `invalid reply on ${name}`);
    return parsed;
  }

  /** Scatter-gather: collects replies until `expected` arrive or `maxWaitMs` passes. */
  async requestMany<K extends RequestName>(
    name: K,
    msg: MessageIn<K>,
    opts: { maxWaitMs: number; expected?: number; suffix?: string },
  ): Promise<ReplyOf<K>[]> {
    return this.gather(name, msg, opts);
  }

  private async gather<K extends RequestName>(
    name: K,
    msg: MessageIn<K>,
    opts: {
      maxWaitMs: number;
      expected?: number | undefined;
      suffix?: string | undefined;
      accept?: (origin: string | undefined) => boolean;
    },
  ): Promise<ReplyOf<K>[]> {
    const reply = replySchema(name);
    const inbox = createInbox();
    const out: ReplyOf<K>[] = [];
    const subject = subjectOf(name, opts.suffix);
    if (this.nc.isClosed()) {
      this.sendFailed({ op: "request", name, subject, bytes: 0 }, closedError());
      return out;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, opts.maxWaitMs);
      const sub = this.nc.subscribe(inbox, {
        callback: (err, m) => {
          if (err) return;
          if (opts.accept && !opts.accept(m.headers?.get(ORIGIN_HEADER) || undefined)) return;
          const parsed = this.decode(reply, m.data, name);
          if (parsed !== undefined) out.push(parsed);
          if (opts.expected !== undefined && out.length >= opts.expected) done();
        },
      });
      function done() {
        clearTimeout(timer);
        sub.unsubscribe();
        resolve();
      }
      let data: Uint8Array | undefined;
      try {
        data = this.encode(name, msg);
        this.nc.publish(subject, data, { reply: inbox, headers: this.originHeaders() });
      } catch (e) {
        this.sendFailed({ op: "request", name, subject, bytes: data?.length ?? 0 }, e);
        done();
      }
    });
    return out;
  }

  async flush(): Promise<void> {
    await this.nc.flush();
  }

  private decode<T>(schema: z.ZodType<T>, data: Uint8Array, name: string): T | undefined {
    let raw: unknown;
    try {
      raw = codec.decode(data);
    } catch {
      this.log.warn({ subject: name }, "dropped non-JSON bus message");
      return undefined;
    }
    const r = schema.safeParse(raw);
    if (!r.success) {
      this.log.warn(
        { subject: name, issues: r.error.issues.slice(0, 3) },
        "dropped invalid bus message",
      );
      return undefined;
    }
    return r.data;
  }

  async close(): Promise<void> {
    if (this.nc.isClosed()) return;
    try {
      await this.nc.drain();
    } catch {
      await this.nc.close();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
