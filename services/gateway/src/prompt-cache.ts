// What each instance's prompt cache holds, as this gateway has learned it: per instance, the prompts
// it was sent (their block hashes, prompt-blocks.ts) in least-recently-used order, as many as the
// engine keeps. Routing asks how much of a new prompt each instance holds (`reuse`) and what it would
// drop to take it (`displaced`); the request is recorded on the instance it goes to (`record`). As
// llama-server picks a slot, a prompt replaces the one it shares most of its beginning with (over
// SLOT_SIMILARITY of it), else it takes the least recent one's place; a slot whose request is in
// flight from this gateway is busy (`inFlight`), neither reusable nor taken. The engine's answer
// says how many prompt tokens it really reused (`timings.cache_n`), and `settle` checks the
// prediction:
// - a prompt the map held but the engine had dropped: the engine keeps fewer prompts than the map
//   thought (one fewer, never fewer than the engine's slots once it said how many: engine-slots.ts);
// - a prompt the map had already dropped but the engine still held (the map's ghosts, the prompts it
//   dropped last): the engine keeps more (one more, at most MAX_ENTRIES).
// llama-server keeps a prompt in its slot and, when the slot moves on, in its host-memory prompt
// cache (`--cache-ram`), so how many it keeps depends on the model's KV size and the server's flags:
// learned, not configured. Characters become tokens by the ratio the engine's counts give
// (prompt tokens over the prompt's characters). Counts of predicted and reused tokens per instance
// are kept for metrics. No clock and no I/O (the notices for the other gateways leave through a
// callback, once per event-loop turn), so tables test it.
import type { InstanceId, PromptNotice, PromptNotices } from "@ic/protocol";
import type { PromptBlocks } from "./prompt-blocks.ts";
import { BLOCK_CHARS } from "./prompt-blocks.ts";
import { EntrySet, markPositions } from "./prompt-entries.ts";
import type { Entry } from "./prompt-entries.ts";

/** Prompts an instance is first assumed to keep: llama-server's automatic slot count. */
export const START_ENTRIES = 4;
/** The most prompts the map keeps per instance, whatever the engine seems to hold. */
export const MAX_ENTRIES = 512;
/** Characters per token before the engine has answered once (a BPE vocabulary's usual). */
const START_CHARS_PER_TOKEN = 4;
/**
 * The share of a new prompt a held one must begin alike for the engine to put it in that one's slot
 * (llama-server's `--slot-prompt-similarity`, 0.1 by default): the held prompt is then replaced.
 */
export const SLOT_SIMILARITY = 0.1;

/** A prompt an instance holds, with the seed that names its slot. */
export interface WarmPrompt {
  readonly blocks: number;
  readonly last: number;
  readonly indexed: readonly number[];
  readonly at?: readonly number[] | undefined;
  readonly seed: number;
}

/** What the map expected of a request on one instance, for `settle` to check. */
export interface Prediction {
  readonly instanceId: string;
  /** Blocks the map held (its live entries) and held among its ghosts. */
  readonly liveBlocks: number;
  readonly ghostBlocks: number;
  /** The prompt's characters, and the predicted reused tokens (liveBlocks at the learned ratio). */
  readonly chars: number;
  readonly predictedTokens: number;
  /** The prompt's characters the engine is expected to compute: those not held (request-load.ts). */
  readonly prefillChars: number;
}

/** Per instance, what metrics show: predicted against reused prompt tokens. */
export interface CacheAccuracy {
  readonly requests: number;
  readonly predictedTokens: number;
  readonly cachedTokens: number;
  readonly promptTokens: number;
  /** Sum of |predicted - cached| per request: zero only when every prediction was exact. */
  readonly errorTokens: number;
  /** Prompts the map now assumes the engine keeps, and holds now. */
  readonly capacity: number;
  readonly entries: number;
}

/** The hashes at an entry's marks (markPositions), for its notice. */
function marksOf(e: Pick<Entry, "blocks" | "indexed" | "at">): number[] {
  return e.at ? e.indexed.slice(0, -1) : markPositions(e.blocks).map((p) => e.indexed[p - 1]!);
}

/** The held prompt whose slot the engine gives a prompt of `hashes`, when one begins alike. */
function slotOf(c: InstanceCache, hashes: readonly number[]): Entry | undefined {
  return c.live.closest(hashes, Math.floor(SLOT_SIMILARITY * hashes.length));
}

class InstanceCache {
  /** The prompts in idle slots: what a new request can reuse. */
  readonly live = new EntrySet();
  /**
   * Prompts of this gateway's requests in flight: their slots are processing, and llama-server gives
   * a new request only an idle slot, so what they hold is not reusable until they end.
   */
  readonly busy = new Set<Entry>();
  readonly ghosts = new EntrySet();
  capacity = START_ENTRIES;
  /** The engine's slot count, once it said (`slots`): the least the capacity can be. */
  slots: number | undefined;
  charsPerToken = START_CHARS_PER_TOKEN;
  requests = 0;
  predictedTokens = 0;
  cachedTokens = 0;
  promptTokens = 0;
  errorTokens = 0;
}

export interface PromptCacheOptions {
  /** Characters per block (prompt-blocks.ts BLOCK_CHARS). */
  readonly blockChars?: number;
  /**
   * Tells the other gateways of the prompts recorded (the bus's `prompts`): those of one turn of the
   * event loop together, once that turn's requests are on their way.
   */
  readonly publish?: (n: PromptNotices) => void;
}

export class PromptCacheMap {
  private readonly instances = new Map<string, InstanceCache>();
  private clock = 0;
  private readonly outbox: PromptNotice[] = [];

  constructor(private readonly o: PromptCacheOptions = {}) {
    this.blockChars = o.blockChars ?? BLOCK_CHARS;
  }

  private readonly blockChars: number;
  /** The entry each prediction recorded, for `inFlight`. */
  private readonly entryOf = new WeakMap<Prediction, Entry>();

  /** Characters of `prompt` that `instanceId`'s cache holds, as far as this map knows. */
  reuse(instanceId: string, prompt: PromptBlocks): number {
    const c = this.instances.get(instanceId);
    return c ? c.live.match(prompt.hashes) * this.blockChars : 0;
  }

  /**
   * Prompts `instanceId` can take before it drops one in use: its capacity less its busy prompts and
   * its idle ones still in use (not stale).
   */
  room(instanceId: string): number {
    const c = this.instances.get(instanceId);
    if (!c) return START_ENTRIES;
    const since = this.freshSince();
    let inUse = c.busy.size;
    for (const e of c.live.entries) if (e.used >= since) inUse++;
    return Math.max(0, c.capacity - inUse);
  }

  /**
   * The recency (`used`) from which a prompt is still in use: prompts recorded since then are as
   * many as every cache the map knows holds. A prompt used before is stale, its conversation or
   * group likely over, so dropping it costs nothing, and it leaves room.
   */
  private freshSince(): number {
    let horizon = 0;
    for (const c of this.instances.values()) horizon += c.capacity;
    return this.clock - horizon;
  }

  /**
   * Characters of the prompts `instanceId` would drop to hold `prompt`: none while the prompt takes
   * the slot of one it begins alike or the instance has room, else its least recent prompt (none
   * when that one is stale).
   */
  displaced(instanceId: string, prompt: PromptBlocks): number {
    const c = this.instances.get(instanceId);
    if (!c || prompt.hashes.length === 0 || c.live.entries.size + c.busy.size < c.capacity)
      return 0;
    if (slotOf(c, prompt.hashes)) return 0;
    const oldest = c.live.leastRecent();
    return oldest && oldest.used >= this.freshSince() ? oldest.blocks * this.blockChars : 0;
  }

  /**
   * The request goes to `instanceId`: what it expects reused, and the prompt recorded as the most
   * recent there, in the slot the engine gives it: replacing the prompts it extends, or else the one
   * it begins alike, or else a new entry (the least recent is dropped past the capacity).
   */
  record(instanceId: string, prompt: PromptBlocks, seed?: number): Prediction {
    const c = this.instanceOf(instanceId);
    const liveBlocks = c.live.match(prompt.hashes);
    const ghostBlocks = c.ghosts.match(prompt.hashes);
    const prediction: Prediction = {
      instanceId,
      liveBlocks,
      ghostBlocks,
      chars: prompt.chars,
      predictedTokens: Math.round((liveBlocks * this.blockChars) / c.charsPerToken),
      prefillChars: Math.max(0, prompt.chars - liveBlocks * this.blockChars),
    };
    const blocks = prompt.hashes.length;
    if (blocks === 0) return prediction; // shorter than a block: nothing to share
    for (const e of c.ghosts.extendedBy(prompt.hashes)) c.ghosts.delete(e);
    const last = prompt.hashes[blocks - 1]!;
    const entry: Entry = { blocks, last, indexed: prompt.hashes, used: ++this.clock, seed };
    const extended = c.live.extendedBy(prompt.hashes);
    // A later turn of a conversation this gateway sent whole: only its new blocks are indexed.
    const whole = extended.find((e) => !e.at);
    // Else another prompt of the same beginning (a group's system prompt): the engine overwrites its
    // slot. It may live on in the engine's host-memory cache: a ghost, as a dropped prompt.
    const alike = extended.length === 0 ? slotOf(c, prompt.hashes) : undefined;
    for (const e of extended) if (e !== whole) c.live.delete(e);
    if (whole) c.live.replace(whole, entry);
    else {
      if (alike) {
        c.live.delete(alike);
        c.ghosts.add(alike);
      }
      c.live.add(entry);
    }
    this.fit(c);
    this.entryOf.set(prediction, entry);
    const replaced = whole ?? extended[0] ?? alike;
    if (this.o.publish)
      this.announce({
        instance_id: instanceId as InstanceId,
        blocks,
        last,
        ...(seed === undefined ? {} : { seed }),
        marks: marksOf(entry),
        ...(replaced ? { replaces: { blocks: replaced.blocks, last: replaced.last } } : {}),
      });
    return prediction;
  }

  /**
   * The request of `p` is on its way to the engine: its slot is busy until the returned function is
   * called (once its leg has closed), and then the most recent (the engine's slot was used last).
   */
  inFlight(p: Prediction): () => void {
    const c = this.instances.get(p.instanceId);
    const e = this.entryOf.get(p);
    if (!c || !e || !c.live.entries.has(e)) return () => {};
    c.live.delete(e);
    c.busy.add(e);
    return () => {
      if (!c.busy.delete(e) || this.instances.get(p.instanceId) !== c) return;
      e.used = ++this.clock;
      c.live.add(e);
      this.fit(c);
    };
  }

  /**
   * The prompts an instance holds that name their slot (a seed), most recent first, as many as the
   * map assumes the engine keeps: the conversations a drain moves elsewhere (chat/warm-handoff.ts).
   */
  warmest(instanceId: string): WarmPrompt[] {
    const c = this.instances.get(instanceId);
    if (!c) return [];
    return [...c.live.entries, ...c.busy]
      .filter((e): e is Entry & { seed: number } => e.seed !== undefined)
      .sort((a, b) => b.used - a.used)
      .map(({ blocks, last, indexed, at, seed }) => ({ blocks, last, indexed, at, seed }));
  }

  /**
   * A prompt's cache was restored on `instanceId` (moved from a draining node): recorded there as
   * its most recent prompt, and told to the other gateways, so routing sends its next turn there.
   */
  moved(instanceId: string, p: WarmPrompt): void {
    const c = this.instanceOf(instanceId);
    for (const e of c.live.sameAs(p.blocks, p.last)) c.live.delete(e);
    c.live.add({ ...p, used: ++this.clock });
    this.fit(c);
    if (this.o.publish)
      this.announce({
        instance_id: instanceId as InstanceId,
        blocks: p.blocks,
        last: p.last,
        seed: p.seed,
        marks: marksOf(p),
      });
  }

  /** Other gateways' prompts (the bus's `prompts`). */
  receive(batch: PromptNotices): void {
    for (const n of batch.prompts) this.receiveOne(n);
  }

  private announce(n: PromptNotice): void {
    this.outbox.push(n);
    if (this.outbox.length > 1) return;
    setImmediate(() => {
      const prompts = this.outbox.splice(0);
      this.o.publish!({ prompts });
    });
  }

  /**
   * Another gateway sent a prompt to an instance: recorded as the most recent there, indexed by its
   * last block (what a later turn of its conversation begins with), in place of the prompt whose slot
   * it took there.
   */
  private receiveOne(n: PromptNotice): void {
    const c = this.instanceOf(n.instance_id);
    for (const e of c.live.sameAs(n.blocks, n.last)) c.live.delete(e);
    if (n.replaces)
      for (const e of c.live.sameAs(n.replaces.blocks, n.replaces.last)) {
        c.live.delete(e);
        c.ghosts.add(e);
      }
    const positions = markPositions(n.blocks);
    const marks = (n.marks ?? []).slice(0, positions.length);
    c.live.add({
      blocks: n.blocks,
      last: n.last,
      indexed: [...marks, n.last],
      at: [...positions.slice(0, marks.length), n.blocks],
      used: ++this.clock,
      seed: n.seed,
    });
    this.fit(c);
  }

  /**
   * The engine's answer: `cached` prompt tokens reused of `prompt` in all. Learns the characters per
   * token, and how many prompts the engine keeps, from where the prediction was wrong.
   */
  settle(p: Prediction, engine: { readonly cached: number; readonly prompt: number }): void {
    const c = this.instances.get(p.instanceId);
    if (!c || engine.prompt <= 0) return;
    // Blocks the engine reused, at the ratio before this answer; the first answer sets the ratio.
    const ratio = p.chars / engine.prompt;
    if (c.requests === 0) c.charsPerToken = ratio;
    const reused = (engine.cached * c.charsPerToken) / this.blockChars;
    c.charsPerToken = 0.8 * c.charsPerToken + 0.2 * ratio;
    c.requests++;
    c.predictedTokens += p.predictedTokens;
    c.cachedTokens += engine.cached;
    c.promptTokens += engine.prompt;
    c.errorTokens += Math.abs(p.predictedTokens - engine.cached);
    if (p.liveBlocks >= 2 && reused < p.liveBlocks / 2)
      c.capacity = Math.max(c.slots ?? 1, c.capacity - 1);
    else if (p.ghostBlocks >= p.liveBlocks + 2 && reused >= (p.liveBlocks + p.ghostBlocks) / 2) {
      c.capacity = Math.min(MAX_ENTRIES, c.capacity + 1);
    }
    this.fit(c);
  }

  /**
   * The engine of `instanceId` has `n` slots (llama-server's `total_slots`). Each idle slot keeps the
   * last prompt it computed, so the engine holds at least `n` prompts: a prediction that missed
   * (the map's slot choice is llama-server's, approximately) no longer shrinks the capacity below
   * them, where it made the map forget prompts the engine still held.
   */
  slots(instanceId: string, n: number): void {
    const c = this.instanceOf(instanceId);
    c.slots = n;
    c.capacity = Math.max(c.capacity, n);
  }

  /** Whether the engine of `instanceId` has said how many slots it has. */
  knowsSlots(instanceId: string): boolean {
    return this.instances.get(instanceId)?.slots !== undefined;
  }

  /** Instances the map knows. */
  get size(): number {
    return this.instances.size;
  }

  /** Forgets the instances not in `present` (deleted ones). */
  retain(present: ReadonlySet<string>): void {
    for (const id of this.instances.keys()) if (!present.has(id)) this.instances.delete(id);
  }

  accuracy(): Map<string, CacheAccuracy> {
    const out = new Map<string, CacheAccuracy>();
    for (const [id, c] of this.instances)
      out.set(id, {
        requests: c.requests,
        predictedTokens: c.predictedTokens,
        cachedTokens: c.cachedTokens,
        promptTokens: c.promptTokens,
        errorTokens: c.errorTokens,
        capacity: c.capacity,
        entries: c.live.entries.size + c.busy.size,
      });
    return out;
  }

  private instanceOf(id: string): InstanceCache {
    let c = this.instances.get(id);
    if (!c) this.instances.set(id, (c = new InstanceCache()));
    return c;
  }

  /**
   * Drops the least recent idle prompts past the capacity (busy slots count, and stay) to the
   * ghosts, and ghosts past it for good.
   */
  private fit(c: InstanceCache): void {
    while (c.live.entries.size > 0 && c.live.entries.size + c.busy.size > c.capacity) {
      const e = c.live.leastRecent()!;
      c.live.delete(e);
      c.ghosts.add(e);
    }
    while (c.ghosts.entries.size > c.capacity) c.ghosts.delete(c.ghosts.leastRecent()!);
  }
}
