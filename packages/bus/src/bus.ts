// Typed publish / subscribe / request over nats.js, generic over the protocol catalog.
// Every inbound message and reply is validated with safeParse (the bus edge); invalid ones are dropped and logged.
import { randomUUID } from "node:crypto";
import { connect, createInbox, headers, JSONCodec } from "nats";
import type { NatsConnection, Subscription } from "nats";
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

export class Bus implements AsyncDisposable {
  /** Names this connection in every message it publishes or answers (the `ic-origin` header). */
  readonly origin = randomUUID();

  /** One NATS subscription per subject, shared by its handlers on this connection. */
  private readonly shared = new Map<
    string,
    { readonly sub: Subscription; readonly handlers: Set<SharedHandler> }
  >();

  private constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

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

  publish<K extends PublishName>(name: K, msg: MessageIn<K>, suffix?: string): void {
    if (this.nc.isClosed()) return;
    this.nc.publish(subjectOf(name, suffix), codec.encode(msg), { headers: this.publishHeaders });
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
              if (reply === undefined || this.nc.isClosed()) return;
              m.respond(codec.encode(reply), { headers: this.originHeaders() });
            },
            (e: unknown) =>
              this.log.error({ err: e, subject: m.subject }, "request handler failed"),
          );
      },
    });
    return () => sub.unsubscribe();
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
    let m;
    try {
      m = await this.nc.request(subjectOf(name, opts.suffix), codec.encode(msg), {
        timeout: opts.timeoutMs,
        headers: this.originHeaders(),
      });
    } catch (e) {
      const code = (e as { code?: string }).code;
      const what = code === "503" ? "no responder" : code === "TIMEOUT" ? "timed out" : String(e);
      throw new ServiceError("unavailable", `${subjectOf(name, opts.suffix)}: ${what}`, {
        cause: e,
      });
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
      this.nc.publish(subjectOf(name, opts.suffix), codec.encode(msg), {
        reply: inbox,
        headers: this.originHeaders(),
      });
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
