// The prompts one instance's cache holds, as prompt-cache.ts keeps them: each prompt's block hashes
// (chained, prompt-blocks.ts), with every prefix indexed, so that how much of a new prompt is held
// is a lookup and a binary search; a prompt another gateway announced is known at a few marks only.
// Pure; prompt-cache.ts decides what goes in and what is dropped.

/**
 * Where a prompt another gateway announces is marked besides its end (block counts 1, 2, 3, 4, 6, 8,
 * 12, 16, 24 ... below its length): what a receiver learns of how much of another prompt it shares,
 * to within a third, in a few hashes whatever its length.
 */
export function markPositions(blocks: number): number[] {
  const out: number[] = [];
  for (let p = 1; p < blocks; p *= 2) {
    out.push(p);
    if (p >= 2 && (p * 3) / 2 < blocks) out.push((p * 3) / 2);
  }
  return out;
}

/**
 * One prompt an instance holds: its whole blocks and the last one's chained hash, and the hashes
 * indexed for it: every block of a prompt this gateway sent; the marks and the last block of one
 * another gateway announced (`at` says where they are).
 */
export interface Entry {
  readonly blocks: number;
  readonly last: number;
  readonly indexed: readonly number[];
  /** The block counts `indexed` ends at, when not every block is indexed (an announced prompt). */
  readonly at?: readonly number[] | undefined;
  /** Recency (a counter): the least recent is dropped first. */
  used: number;
  /** The sampling seed of the request that sent it, which names the slot holding it (kv moves). */
  readonly seed?: number | undefined;
}

/** A set of prompts with every prefix indexed: hash -> how many entries contain that block. */
export class EntrySet {
  readonly entries = new Set<Entry>();
  private readonly blocks = new Map<number, number>();

  /**
   * Blocks of `hashes` held, from the start. A chain hash stands for its whole prefix, so a hash
   * indexed here means that much is held, and the prompts indexed whole answer a binary search; an
   * announced prompt matches at its marks, or whole when `hashes` has its last block where it ended.
   */
  match(hashes: readonly number[]): number {
    let lo = longestPrefix(hashes.length, (k) => this.blocks.has(hashes[k - 1]!));
    for (const p of markPositions(hashes.length + 1))
      if (p > lo && this.blocks.has(hashes[p - 1]!)) lo = p;
    for (const e of this.entries)
      if (e.blocks > lo && e.at && hashes[e.blocks - 1] === e.last) lo = e.blocks;
    return lo;
  }

  add(e: Entry): void {
    this.entries.add(e);
    for (const h of e.indexed) this.blocks.set(h, (this.blocks.get(h) ?? 0) + 1);
  }

  /** `e` in place of `old`, whose blocks (all indexed) begin e's: only e's further blocks are added. */
  replace(old: Entry, e: Entry): void {
    this.entries.delete(old);
    this.entries.add(e);
    for (let i = old.blocks; i < e.indexed.length; i++) {
      const h = e.indexed[i]!;
      this.blocks.set(h, (this.blocks.get(h) ?? 0) + 1);
    }
  }

  delete(e: Entry): void {
    if (!this.entries.delete(e)) return;
    for (const h of e.indexed) {
      const n = (this.blocks.get(h) ?? 1) - 1;
      if (n > 0) this.blocks.set(h, n);
      else this.blocks.delete(h);
    }
  }

  /** Entries whose whole prompt begins `hashes` (the prompt extends them). */
  extendedBy(hashes: readonly number[]): Entry[] {
    return [...this.entries].filter(
      (e) => e.blocks <= hashes.length && hashes[e.blocks - 1] === e.last,
    );
  }

  /** Entries a prompt of `blocks` blocks ending in `last` extends, as far as `last` tells. */
  sameAs(blocks: number, last: number): Entry[] {
    return [...this.entries].filter((e) => e.blocks === blocks && e.last === last);
  }

  /**
   * The entry sharing the most leading blocks with `hashes`, over `min` of them: the slot the engine
   * gives that prompt. An announced entry is known at its marks and its end (commonBlocks).
   */
  closest(hashes: readonly number[], min: number): Entry | undefined {
    let best: Entry | undefined;
    let bestShared = min;
    for (const e of this.entries) {
      const shared = commonBlocks(e, hashes);
      if (shared > bestShared) [best, bestShared] = [e, shared];
    }
    return best;
  }

  leastRecent(): Entry | undefined {
    let oldest: Entry | undefined;
    for (const e of this.entries) if (!oldest || e.used < oldest.used) oldest = e;
    return oldest;
  }
}

/** Leading blocks `e` and a prompt of `hashes` share (chained hashes: a binary search). */
function commonBlocks(e: Entry, hashes: readonly number[]): number {
  if (e.at) {
    for (let i = e.at.length - 1; i >= 0; i--)
      if (e.at[i]! <= hashes.length && hashes[e.at[i]! - 1] === e.indexed[i]) return e.at[i]!;
    return 0;
  }
  return longestPrefix(
    Math.min(e.blocks, hashes.length),
    (k) => e.indexed[k - 1] === hashes[k - 1],
  );
}

/**
 * The largest k in 0..n for which `held(k)` holds, `held` being true up to some k and false after
 * (a chain hash stands for its whole prefix): a binary search.
 */
function longestPrefix(n: number, held: (k: number) => boolean): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (held(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
