// Which piece of a file to fetch next, and from where: the pure core of a multi-source transfer.
//
// Policy: peers first, rarest piece first. A free slot goes to a peer that holds a piece this copy
// still needs (the piece the fewest peers hold, so what is rare spreads before it is needed; ties by
// this copy's own order, a shuffle, so copies started together ask for different pieces); the store
// host, which holds everything, gets a slot only when no free peer can give anything, and then for a
// piece no peer holds if there is one, and that no peer is fetching from it already. Each source has a limit of requests at once, and so has the
// copy; a source that failed is cooling and gets nothing until its time is up.

/** What the planner sees of a source. */
export interface SourceView {
  readonly id: string;
  readonly kind: "store" | "peer";
  /** Pieces it can serve now ("all": a complete copy or the store host). */
  readonly has: (piece: number) => boolean;
  /** Requests to it under way. */
  readonly inflight: number;
  /** Requests it may have at once. */
  readonly limit: number;
  /** Gets nothing until this time (a failed request, a bad piece). */
  readonly coolUntilMs?: number | undefined;
  /** A peer: pieces it is fetching from the store host now (it will hold them soon). */
  readonly fetching?: ((piece: number) => boolean) | undefined;
}

export interface PickInput {
  /** Pieces still needed, in this copy's order of preference. */
  readonly wanted: readonly number[];
  readonly inflight: ReadonlySet<number>;
  readonly sources: readonly SourceView[];
  /** Requests this copy may have at once. */
  readonly maxInflight: number;
  readonly nowMs: number;
}

export interface Pick {
  readonly piece: number;
  readonly source: string;
}

/** The next request to make, or undefined when none may start now. */
export function pickPiece(input: PickInput): Pick | undefined {
  if (input.inflight.size >= input.maxInflight) return undefined;
  const open = (s: SourceView) => s.inflight < s.limit && (s.coolUntilMs ?? 0) <= input.nowMs;
  const peers = input.sources.filter((s) => s.kind === "peer");
  const freePeers = peers.filter(open);
  let best: { piece: number; holders: number; source: SourceView } | undefined;
  if (freePeers.length > 0) {
    for (const piece of input.wanted) {
      if (input.inflight.has(piece)) continue;
      let holders = 0;
      let chosen: SourceView | undefined;
      for (const p of peers) {
        if (!p.has(piece)) continue;
        holders++;
        if (open(p) && (!chosen || p.inflight < chosen.inflight)) chosen = p;
      }
      if (chosen && (!best || holders < best.holders)) best = { piece, holders, source: chosen };
      if (best?.holders === 1) break;
    }
    if (best) return { piece: best.piece, source: best.source.id };
  }
  const store = input.sources.find((s) => s.kind === "store" && open(s));
  if (!store) return undefined;
  // A piece a peer is already fetching from the store host is left to it, unless this copy has
  // nothing else under way (then waiting could stall it behind a slow peer).
  const busy = input.inflight.size > 0;
  let pick: { piece: number; holders: number } | undefined;
  for (const piece of input.wanted) {
    if (input.inflight.has(piece)) continue;
    if (busy && peers.some((p) => p.fetching?.(piece))) continue;
    const holders = peers.reduce((n, p) => n + (p.has(piece) ? 1 : 0), 0);
    if (!pick || holders < pick.holders) pick = { piece, holders };
    if (holders === 0) break;
  }
  return pick && { piece: pick.piece, source: store.id };
}

/** A deterministic shuffle of 0..n-1 from a seed string (each copy its own order). */
export function pieceOrder(n: number, seed: string): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  let h = 2166136261;
  for (let i = 0; i < seed.length; i++) h = Math.imul(h ^ seed.charCodeAt(i), 16777619);
  if (h === 0) h = 1;
  const next = () => {
    h ^= h << 13;
    h ^= h >>> 17;
    h ^= h << 5;
    return (h >>> 0) / 2 ** 32;
  };
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
}
