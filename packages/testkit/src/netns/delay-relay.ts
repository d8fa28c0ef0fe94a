// A user-space TCP relay that delays every chunk by `delayMs` in each direction, keeping their order.
// The test kernel has no netem, so latency between hosts is added by pointing a peer at this relay.
//
// Each direction of a connection is one queue of (due time, chunk) with a single timer for its head;
// a half-close travels through the queue like data, so it arrives after the chunks sent before it.
import { connect, createServer } from "node:net";
import type { AddressInfo, Server, Socket } from "node:net";
import { performance } from "node:perf_hooks";

export interface DelayRelayOptions {
  /** Address to listen on, e.g. `lab.rootAddress` (every lab host reaches it); 127.0.0.1 by default. */
  readonly listenHost?: string;
  /** 0 (the default) lets the kernel pick a free port. */
  readonly listenPort?: number;
  readonly targetHost: string;
  readonly targetPort: number;
  /** One-way delay added to every chunk, in each direction. */
  readonly delayMs: number;
}

/** One direction of a relayed connection: chunks leave `to` no earlier than `delay` after arrival. */
class DelayedPipe {
  private readonly queue: { due: number; chunk: Buffer | null }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private blocked = false;
  private stopped = false;

  constructor(
    private readonly from: Socket,
    private readonly to: Socket,
    private readonly delay: () => number,
  ) {
    from.on("data", (chunk: Buffer) => this.push(chunk));
    from.on("end", () => this.push(null));
  }

  /** `null` is the sender's FIN. */
  private push(chunk: Buffer | null): void {
    if (this.stopped) return;
    this.queue.push({ due: performance.now() + this.delay(), chunk });
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped || this.blocked || this.timer) return;
    const head = this.queue[0];
    if (!head) return;
    const wait = head.due - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.flush();
      }, Math.ceil(wait));
    } else {
      this.flush();
    }
  }

  private flush(): void {
    const now = performance.now();
    for (let head = this.queue[0]; head && head.due <= now; head = this.queue[0]) {
      this.queue.shift();
      if (head.chunk === null) {
        this.to.end();
        this.stop();
        return;
      }
      if (!this.to.write(head.chunk)) {
        // Backpressure: stop reading the sender until the receiver drains.
        this.blocked = true;
        this.from.pause();
        this.to.once("drain", () => {
          this.blocked = false;
          this.from.resume();
          this.schedule();
        });
        return;
      }
    }
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
  }
}

export class DelayRelay implements AsyncDisposable {
  private readonly sockets = new Set<Socket>();
  private closed = false;
  private bound: AddressInfo | undefined;

  private constructor(
    private readonly server: Server,
    private readonly opts: DelayRelayOptions,
    /** One-way delay applied to chunks that arrive from now on. */
    public delayMs: number,
  ) {}

  /** Starts listening; resolves once the port is bound. */
  static async start(opts: DelayRelayOptions): Promise<DelayRelay> {
    if (!(opts.delayMs >= 0)) throw new Error("DelayRelay: delayMs must be >= 0");
    const server = createServer({ allowHalfOpen: true, noDelay: true });
    const relay = new DelayRelay(server, opts, opts.delayMs);
    server.on("connection", (client) => relay.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(opts.listenPort ?? 0, opts.listenHost ?? "127.0.0.1", () => {
        server.off("error", reject);
        relay.bound = server.address() as AddressInfo;
        resolve();
      });
    });
    return relay;
  }

  /** The bound address (still known after close). */
  get host(): string {
    return this.bound?.address ?? "";
  }
  get port(): number {
    return this.bound?.port ?? 0;
  }
  /** `host:port`, ready for a peer list. */
  get address(): string {
    return `${this.host}:${this.port}`;
  }

  private accept(client: Socket): void {
    if (this.closed) {
      client.destroy();
      return;
    }
    const upstream = connect({
      host: this.opts.targetHost,
      port: this.opts.targetPort,
      allowHalfOpen: true,
      noDelay: true,
    });
    const delay = () => this.delayMs;
    const pipes = [
      new DelayedPipe(client, upstream, delay),
      new DelayedPipe(upstream, client, delay),
    ];
    const sockets = [client, upstream];
    const fail = () => {
      for (const p of pipes) p.stop();
      for (const s of sockets) s.destroy();
    };
    for (const s of sockets) {
      this.sockets.add(s);
      s.on("error", fail);
      s.on("close", () => {
        this.sockets.delete(s);
        // Once both sides are done, nothing is left to relay.
        if (sockets.every((x) => x.destroyed)) for (const p of pipes) p.stop();
      });
    }
  }

  /** Closes the listener and every relayed connection. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
