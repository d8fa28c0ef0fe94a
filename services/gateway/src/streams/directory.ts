// Where the cluster's resumable streams are: every gateway keeps the same bounded table, filled by
// its own streams and by the others' notices on the bus (one small message per stream started), so
// any node finds a conversation's instance without asking the engines, and after the gateway that
// started it died. An entry is the stream of one (token, conversation id): only the token that
// started it finds it, and it expires when the engine forgets the stream.
import type { StreamNotice, StreamStarted } from "@ic/protocol";

/** Entries kept at most; the oldest go first (a stream lives minutes, so this is a burst's worth). */
export const MAX_STREAMS = 50_000;

/** Expired entries dropped per notice at most (the cost of a notice stays bounded). */
const SWEEP_PER_NOTICE = 8;

export class StreamDirectory {
  /** Insertion order is age order: a Map iterates oldest first. */
  private readonly entries = new Map<string, StreamStarted>();
  private readonly resumedWatch = new Map<string, () => void>();

  constructor(
    /** Sends a notice to the other gateways (the node's bus; absent: this gateway alone). */
    private readonly publish: (n: StreamNotice) => void = () => {},
    private readonly max = MAX_STREAMS,
    private readonly now: () => number = Date.now,
  ) {}

  /** A stream this gateway started: kept here and told to the others. */
  announce(s: StreamStarted): void {
    this.receive(s);
    this.publish(s);
  }

  /** A notice from another gateway (or this one's own, on the bus's echo). */
  receive(n: StreamNotice): void {
    if (n.type === "resumed") {
      const f = this.resumedWatch.get(n.command_id);
      this.resumedWatch.delete(n.command_id);
      f?.();
      return;
    }
    const key = keyOf(n.token, n.conversation_id);
    this.entries.delete(key);
    this.entries.set(key, n);
    while (this.entries.size > this.max) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
    this.sweep();
  }

  /**
   * Drops expired entries from the oldest end, a few per notice, so that under steady traffic the
   * table holds about the streams the engines still keep rather than `max` of them. Entries expire
   * nearly in the order they came (each gateway gives its own the same lifetime), so the oldest end
   * is where the expired ones are; one that expires before an older one waits for that one, a
   * lookup, or the bound. What is left when traffic stops goes with the next notices.
   */
  private sweep(): void {
    const now = this.now();
    let n = 0;
    for (const [key, e] of this.entries) {
      if (e.expires_at > now || n === SWEEP_PER_NOTICE) return;
      this.entries.delete(key);
      n++;
    }
  }

  /** The stream `token` started under `conversationId`, while the engine keeps it. */
  lookup(token: string | null, conversationId: string, now: number): StreamStarted | undefined {
    const key = keyOf(token, conversationId);
    const e = this.entries.get(key);
    if (e && e.expires_at <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return e;
  }

  /** A client read the stream again: its first gateway (wherever it is) keeps it going. */
  resumed(commandId: string): void {
    const n: StreamNotice = {
      type: "resumed",
      command_id: commandId as StreamStarted["command_id"],
    };
    this.receive(n);
    this.publish(n);
  }

  /** Calls `f` once if the stream is resumed anywhere; the returned function stops watching. */
  onResumed(commandId: string, f: () => void): () => void {
    this.resumedWatch.set(commandId, f);
    return () => {
      if (this.resumedWatch.get(commandId) === f) this.resumedWatch.delete(commandId);
    };
  }

  get size(): number {
    return this.entries.size;
  }
}

const keyOf = (token: string | null, conversationId: string) =>
  `${token ?? ""}\u0000${conversationId}`;
