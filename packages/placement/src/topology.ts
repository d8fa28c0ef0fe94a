// The measured link graph and a bounded search for simple cycles of exactly k nodes in it. Placement
// needs a ring of min_nodes nodes; enumerating every cycle is exponential, so the search is budgeted.
// Tie-breaks use a seeded generator, so the heuristic's choices are reproducible and placement is pure.
import { mulberry32 } from "@ic/protocol";

/** An undirected measured link between two nodes. */
export interface LinkEdge {
  readonly a: string;
  readonly b: string;
  readonly rtt_ms: number;
}

/**
 * Nodes are numbered by rank (0 = the preferred node, e.g. most free memory); adjacency lists are
 * sorted by rank. Duplicate links keep the lowest latency; self links and unknown ids are dropped.
 * Latency lookups binary-search the adjacency list (O(log degree)).
 */
export interface LinkGraph {
  readonly n: number;
  readonly adj: readonly Int32Array[];
  /** Latency of the link a-b, or undefined when they are not linked. */
  rtt(a: number, b: number): number | undefined;
}

/** The graph over `rankedIds` (index = rank) from measured links; O(V + E), two counting sorts. */
export function buildGraph(rankedIds: readonly string[], links: readonly LinkEdge[]): LinkGraph {
  const n = rankedIds.length;
  const index = new Map<string, number>();
  rankedIds.forEach((id, i) => index.set(id, i));
  const m = Math.max(1, links.length);
  const ea = new Int32Array(m);
  const eb = new Int32Array(m);
  const er = new Float64Array(m);
  const deg = new Int32Array(n);
  let e = 0;
  for (const l of links) {
    const a = index.get(l.a);
    const b = index.get(l.b);
    if (a === undefined || b === undefined || a === b) continue;
    ea[e] = a;
    eb[e] = b;
    er[e] = Number.isFinite(l.rtt_ms) && l.rtt_ms >= 0 ? l.rtt_ms : Number.MAX_VALUE;
    deg[a]!++;
    deg[b]!++;
    e++;
  }
  // Both directions of every link, ordered by node, then neighbour, then input order: two stable
  // counting sorts (by neighbour, then by node), O(V + E) with no comparisons.
  const from = new Int32Array(2 * e);
  const to = new Int32Array(2 * e);
  const via = new Int32Array(2 * e);
  for (let j = 0; j < e; j++) {
    from[2 * j] = ea[j]!;
    to[2 * j] = eb[j]!;
    from[2 * j + 1] = eb[j]!;
    to[2 * j + 1] = ea[j]!;
    via[2 * j] = via[2 * j + 1] = j;
  }
  const byTo = countingOrder(to, n, null);
  const order = countingOrder(from, n, byTo);
  const adj: Int32Array[] = [];
  const lat: Float64Array[] = [];
  let at = 0;
  for (let v = 0; v < n; v++) {
    const nb = new Int32Array(deg[v]!);
    const rt = new Float64Array(deg[v]!);
    let d = 0;
    for (const end = at + deg[v]!; at < end; at++) {
      const x = order[at]!;
      const w = to[x]!;
      const r = er[via[x]!]!;
      if (d > 0 && nb[d - 1] === w) rt[d - 1] = Math.min(rt[d - 1]!, r);
      else {
        nb[d] = w;
        rt[d++] = r;
      }
    }
    adj.push(d === nb.length ? nb : nb.slice(0, d));
    lat.push(d === rt.length ? rt : rt.slice(0, d));
  }
  const rtt = (a: number, b: number): number | undefined => {
    const nb = adj[a];
    if (!nb) return undefined;
    let lo = 0;
    let hi = nb.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const x = nb[mid]!;
      if (x === b) return lat[a]![mid];
      if (x < b) lo = mid + 1;
      else hi = mid - 1;
    }
    return undefined;
  };
  return { n, adj, rtt };
}

/** Stable counting sort: the entries of `within` (or 0..len-1) reordered by key[x] in [0, range). */
function countingOrder(key: Int32Array, range: number, within: Int32Array | null): Int32Array {
  const len = key.length;
  const count = new Int32Array(range + 1);
  for (let i = 0; i < len; i++) count[key[i]! + 1]!++;
  for (let r = 0; r < range; r++) count[r + 1]! += count[r]!;
  const out = new Int32Array(len);
  for (let i = 0; i < len; i++) {
    const x = within ? within[i]! : i;
    out[count[key[x]!]!++] = x;
  }
  return out;
}

/** Sum of link latencies around a cycle (k = 1: 0; k = 2: the one link). */
export function cycleRtt(g: LinkGraph, cycle: readonly number[]): number {
  if (cycle.length < 2) return 0;
  if (cycle.length === 2) return g.rtt(cycle[0]!, cycle[1]!) ?? Infinity;
  let s = 0;
  for (let i = 0; i < cycle.length; i++)
    s += g.rtt(cycle[i]!, cycle[(i + 1) % cycle.length]!) ?? Infinity;
  return s;
}

/** True when consecutive nodes (and last-first, for k >= 3) are linked and no node repeats. */
export function isCycle(g: LinkGraph, cycle: readonly number[]): boolean {
  const k = cycle.length;
  if (k === 0 || new Set(cycle).size !== k) return false;
  if (k === 1) return true;
  if (k === 2) return g.rtt(cycle[0]!, cycle[1]!) !== undefined;
  return cycle.every((v, i) => g.rtt(v, cycle[(i + 1) % k]!) !== undefined);
}

/**
 * Biconnected blocks among the nodes of rank < limit, each as its member ranks (an isolated node is a
 * block of 1, a bridge a block of 2; articulation points belong to several). A simple cycle of k >= 3
 * nodes lies inside one block, so blocks smaller than k need no search. Iterative Hopcroft-Tarjan, O(V + E).
 */
export function biconnectedBlocks(g: LinkGraph, limit = g.n): number[][] {
  const disc = new Int32Array(limit).fill(-1);
  const low = new Int32Array(limit);
  const edgeIx = new Int32Array(limit);
  const parent = new Int32Array(limit).fill(-1);
  const stack: number[] = [];
  const out: number[][] = [];
  let time = 0;
  for (let root = 0; root < limit; root++) {
    if (disc[root] !== -1) continue;
    disc[root] = low[root] = time++;
    stack.push(root);
    const before = out.length;
    const call: number[] = [root];
    while (call.length > 0) {
      const v = call[call.length - 1]!;
      const nb = g.adj[v]!;
      if (edgeIx[v]! < nb.length) {
        const w = nb[edgeIx[v]!++]!;
        if (w >= limit) continue;
        if (disc[w] === -1) {
          parent[w] = v;
          disc[w] = low[w] = time++;
          stack.push(w);
          call.push(w);
        } else if (w !== parent[v]) {
          low[v] = Math.min(low[v]!, disc[w]!);
        }
        continue;
      }
      call.pop();
      const p = parent[v]!;
      if (p === -1) {
        // A root without tree children is an isolated node: a block of its own.
        if (out.length === before) out.push([root]);
        stack.length = 0;
        continue;
      }
      low[p] = Math.min(low[p]!, low[v]!);
      if (low[v]! >= disc[p]!) {
        // p is an articulation point (or the root): the nodes above v on the stack form a block with p.
        const block = [p];
        for (;;) {
          const x = stack.pop()!;
          block.push(x);
          if (x === v) break;
        }
        out.push(block.sort((a, b) => a - b));
      }
    }
  }
  return out;
}

/** Size of the largest biconnected block among the nodes of rank < limit (0 for no nodes). */
export function largestBlock(g: LinkGraph, limit = g.n): number {
  return biconnectedBlocks(g, limit).reduce((m, b) => Math.max(m, b.length), 0);
}

/** A shared step counter: every adjacency entry the search looks at costs one step. */
export interface Budget {
  left: number;
}

export interface CycleSearchOptions {
  /** Cycle length (>= 1). */
  readonly k: number;
  /** Only nodes of rank < limit take part (placement passes the memory-eligible prefix). */
  readonly limit: number;
  /** When given, only nodes marked 1 take part (placement passes one biconnected block). */
  readonly within?: Uint8Array;
  readonly budget: Budget;
  /** Per-node weight summed along a path (placement: free bytes), for `cut`. */
  readonly weight?: (v: number) => number;
  /**
   * Drops a partial path when true: `pathWeight` is the summed weight of the path so far, `missing`
   * how many nodes it still needs, `start` the rank the cycle starts from (all later nodes rank higher).
   */
  readonly cut?: (pathWeight: number, missing: number, start: number) => boolean;
  /**
   * Called for each cycle found, in path order starting at its best (lowest) rank. The array is
   * reused by the search: copy it to keep it. Returning true stops the search.
   */
  readonly visit: (cycle: readonly number[]) => boolean;
}

export interface CycleSearchOutcome {
  /** Cycles handed to visit. */
  readonly found: number;
  /** True when the budget ran out before the search space was covered. */
  readonly exhausted: boolean;
  /** True when visit asked to stop. */
  readonly stopped: boolean;
}

/** Long rings: backtracking probes with this share of the budget (it settles small graphs exactly)... */
const PROBE_SHARE = 0.05;
/** ...then rotation-extension may spend up to this share, then backtracking resumes with the rest. */
const ROTATE_SHARE = 0.5;

/**
 * Finds simple cycles of exactly k nodes (k = 1: a node; k = 2: two linked nodes). Backtracking
 * (depthFirst) is exhaustive when the budget allows, so a search that ends without exhausting it
 * proves that no such cycle exists. Long rings (k >= 3 and more than half the allowed nodes) are
 * where backtracking drowns in permutations, so there a short backtracking probe runs first, then
 * rotation-extension (rotateExtend), then backtracking again with whatever budget is left.
 */
export function searchCycles(g: LinkGraph, o: CycleSearchOptions): CycleSearchOutcome {
  const limit = Math.min(o.limit, g.n);
  let allowed = 0;
  for (let v = 0; v < limit; v++) if (!o.within || o.within[v]) allowed++;
  if (o.k < 3 || 2 * o.k <= allowed) return depthFirst(g, o);
  const total = o.budget.left;
  const probe = spend(o.budget, Math.floor(total * PROBE_SHARE), (b) =>
    depthFirst(g, { ...o, budget: b }),
  );
  if (probe.found > 0 || !probe.exhausted || o.budget.left <= 0) return probe;
  const ring = spend(o.budget, Math.floor(total * ROTATE_SHARE), (b) =>
    rotateExtend(g, { k: o.k, limit, within: o.within, budget: b }),
  );
  if (ring) {
    const s = ring.indexOf(Math.min(...ring));
    const path = [...ring.slice(s), ...ring.slice(0, s)];
    const w = path.reduce((t, v) => t + (o.weight?.(v) ?? 0), 0);
    if (!o.cut?.(w, 0, path[0]!)) return { found: 1, exhausted: false, stopped: o.visit(path) };
  }
  if (o.budget.left <= 0) return { found: 0, exhausted: true, stopped: false };
  return depthFirst(g, o);
}

/** Runs `f` on a sub-budget of at most `cap` steps and charges what it used to `budget`. */
function spend<T>(budget: Budget, cap: number, f: (b: Budget) => T): T {
  const sub: Budget = { left: Math.min(cap, budget.left) };
  const start = sub.left;
  const out = f(sub);
  budget.left -= start - sub.left;
  return out;
}

/**
 * Depth-first search for simple cycles of exactly k nodes, each found once: from its best-ranked node
 * (the start; later nodes all have a larger rank), in the direction whose second node ranks first. Per start, a BFS over the allowed nodes gives
 * distances back to the start, which prune any path that could no longer close in k steps; a
 * component smaller than k is skipped. Neighbours are tried best rank first, except when k is more
 * than half the start's component: then Warnsdorff's rule (fewest onward options first) steers a
 * near-Hamiltonian search, and when k equals the component a node left with fewer than two usable
 * neighbours cuts the branch. Cost is at most O(budget) whatever the graph.
 */
/** Rings of one node: each allowed node alone (k = 1). */
function singleNodes(
  o: CycleSearchOptions,
  limit: number,
  ok: (v: number) => boolean,
): CycleSearchOutcome {
  let found = 0;
  for (let s = 0; s < limit; s++) {
    if (!ok(s)) continue;
    if (o.budget.left-- <= 0) return { found, exhausted: true, stopped: false };
    if (o.cut?.(o.weight?.(s) ?? 0, 0, s)) continue;
    found++;
    if (o.visit([s])) return { found, exhausted: false, stopped: true };
  }
  return { found, exhausted: false, stopped: false };
}

/**
 * Breadth-first from s over allowed ranks >= s, charged to the search's budget: its `dist` holds
 * each node's hop count (-1 when not reached), its `queue` the nodes reached in order; returns how
 * many were reached.
 */
function reachFrom(st: RingSearch, s: number): number {
  const { g, ok, dist, queue } = st;
  const { budget } = st.o;
  dist.fill(-1);
  dist[s] = 0;
  let head = 0;
  let tail = 0;
  queue[tail++] = s;
  while (head < tail) {
    const v = queue[head++]!;
    const nb = g.adj[v]!;
    budget.left -= nb.length;
    for (let i = 0; i < nb.length; i++) {
      const w = nb[i]!;
      if (w < s || !ok(w) || dist[w] !== -1) continue;
      dist[w] = dist[v]! + 1;
      queue[tail++] = w;
    }
  }
  return tail;
}

function depthFirst(g: LinkGraph, o: CycleSearchOptions): CycleSearchOutcome {
  const { k, budget, within } = o;
  const limit = Math.min(o.limit, g.n);
  const ok = (v: number) => v < limit && (!within || within[v] === 1);
  if (k < 1 || limit < k) return { found: 0, exhausted: false, stopped: false };
  if (k === 1) return singleNodes(o, limit, ok);
  const search: RingSearch = {
    g,
    o,
    ok,
    dist: new Int32Array(limit),
    onPath: new Uint8Array(limit),
    options: new Int32Array(limit), // unvisited allowed neighbours, Warnsdorff mode only
    path: [],
    queue: new Int32Array(limit),
    found: 0,
    exhausted: false,
    stopped: false,
  };
  for (let s = 0; s <= limit - k && !search.exhausted && !search.stopped; s++) {
    if (!ok(s) || o.cut?.(o.weight?.(s) ?? 0, k - 1, s)) continue;
    const comp = reachFrom(search, s);
    if (budget.left <= 0) {
      search.exhausted = true;
      break;
    }
    if (comp < k) continue;
    ringsFrom(search, s, comp);
  }
  return { found: search.found, exhausted: search.exhausted, stopped: search.stopped };
}

/** The state of one search for rings: the graph and options, its buffers, and how far it got. */
interface RingSearch {
  readonly g: LinkGraph;
  readonly o: CycleSearchOptions;
  readonly ok: (v: number) => boolean;
  /** Hops from the current start (-1: not reached). */
  readonly dist: Int32Array;
  readonly onPath: Uint8Array;
  readonly options: Int32Array;
  readonly path: number[];
  readonly queue: Int32Array;
  found: number;
  exhausted: boolean;
  stopped: boolean;
}

/**
 * The rings whose lowest rank is s (its component of `comp` nodes reached): depth first, in
 * Warnsdorff order when the ring covers most of the component, with the Hamiltonian dead-end check
 * when it covers all of it.
 */
function ringsFrom(st: RingSearch, s: number, comp: number): void {
  const { g, o, ok, dist, onPath, options, path, queue } = st;
  const { k, budget, visit } = o;
  const warnsdorff = k > 2 && 2 * k > comp;
  const hamiltonian = k > 2 && k === comp;
  if (warnsdorff) {
    for (let q = 0; q < comp; q++) {
      const v = queue[q]!;
      let c = 0;
      for (const w of g.adj[v]!) if (w > s && dist[w] !== -1 && ok(w)) c++;
      options[v] = c;
      budget.left -= g.adj[v]!.length;
    }
  }
  // Below, a node w is in play when w > s, ok(w) and dist[w] !== -1 (reached from s).
  const enter = (v: number, delta: number) => {
    onPath[v] = delta > 0 ? 1 : 0;
    if (!warnsdorff) return;
    for (const w of g.adj[v]!) if (w > s && ok(w) && dist[w] !== -1) options[w]! -= delta;
  };
  // Hamiltonian mode: every unvisited node must keep two usable neighbours (unvisited, the new end, s).
  const deadEnd = (end: number, prev: number): boolean => {
    for (const base of [end, prev]) {
      budget.left -= g.adj[base]!.length;
      for (const u of g.adj[base]!) {
        if (u <= s || !ok(u) || dist[u] === -1 || onPath[u]) continue;
        const usable =
          options[u]! + (g.rtt(u, end) !== undefined ? 1 : 0) + (dist[u] === 1 ? 1 : 0);
        if (usable < 2) return true;
      }
    }
    return false;
  };

  let weight = o.weight?.(s) ?? 0;
  path.push(s);
  onPath[s] = 1;
  const dfs = (): void => {
    const depth = path.length;
    const last = path[depth - 1]!;
    const nb = g.adj[last]!;
    budget.left -= nb.length;
    if (budget.left <= 0) {
      st.exhausted = true;
      return;
    }
    // After adding v, `rest` nodes remain to add and the ring must then close back to s.
    const rest = k - depth - 1;
    const cands: number[] = [];
    for (let i = 0; i < nb.length; i++) {
      const v = nb[i]!;
      if (v <= s || !ok(v) || onPath[v] || dist[v] === -1 || dist[v]! > rest + 1) continue;
      // Close each ring in one direction only: its last node ranks after its second.
      if (rest === 0 && k > 2 && v < path[1]!) continue;
      cands.push(v);
    }
    if (warnsdorff && cands.length > 1) cands.sort((x, y) => options[x]! - options[y]! || x - y);
    for (const v of cands) {
      if (st.exhausted || st.stopped) return;
      const w = o.weight?.(v) ?? 0;
      if (o.cut?.(weight + w, rest, s)) continue;
      path.push(v);
      enter(v, 1);
      weight += w;
      if (rest === 0) {
        st.found++;
        if (visit(path)) st.stopped = true;
      } else if (!(hamiltonian && deadEnd(v, last))) {
        dfs();
      }
      weight -= w;
      enter(v, -1);
      path.pop();
    }
  };
  dfs();
  path.pop();
  onPath[s] = 0;
}

/**
 * Posa's rotation-extension for a ring of exactly k nodes (k >= 3): grow a path from the best-ranked
 * allowed node, extending by Warnsdorff's rule (ties broken by a seeded PRNG); when the end is stuck,
 * or the path has k nodes but its end does not link to its start, drop the end now and then to change
 * the node set, else rotate: for a path neighbour v_i of the end, reverse the tail after v_i so that
 * v_(i+1) becomes the end. A heuristic for long rings in sparse graphs, where backtracking drowns in
 * permutations; each step costs O(degree^2 + k) and the budget bounds the total.
 */
export function rotateExtend(
  g: LinkGraph,
  { k, limit, within, budget }: Pick<CycleSearchOptions, "k" | "limit" | "within" | "budget">,
  seed = 0x5eed,
): number[] | null {
  limit = Math.min(limit, g.n);
  if (k < 3 || limit < k) return null;
  const rand = mulberry32(seed + k);
  const pos = new Int32Array(limit).fill(-1);
  const ok = (v: number) => v < limit && (!within || within[v] === 1);
  const free = (v: number) => ok(v) && pos[v] === -1;
  const path: number[] = [];
  for (let start = 0; start < limit && budget.left > 0; start++) {
    if (!ok(start) || g.adj[start]!.length < 2) continue;
    for (const v of path) pos[v] = -1;
    path.length = 0;
    path.push(start);
    pos[start] = 0;
    let idle = 0;
    while (budget.left > 0 && idle < 4 * limit + 64) {
      const end = path[path.length - 1]!;
      const nb = g.adj[end]!;
      budget.left -= nb.length;
      if (path.length === k) {
        if (g.rtt(end, path[0]!) !== undefined) return [...path];
      } else {
        let best = -1;
        let bestDeg = Infinity;
        for (const w of nb) {
          if (!free(w)) continue;
          let d = 0;
          for (const x of g.adj[w]!) if (free(x)) d++;
          budget.left -= g.adj[w]!.length;
          if (d < bestDeg || (d === bestDeg && rand() < 0.5)) {
            best = w;
            bestDeg = d;
          }
        }
        if (best >= 0) {
          pos[best] = path.length;
          path.push(best);
          idle = 0;
          continue;
        }
      }
      idle++;
      if (path.length === k && rand() < 0.3) {
        pos[path.pop()!] = -1;
        continue;
      }
      const pivots: number[] = [];
      for (const w of nb)
        if (ok(w) && pos[w]! >= 0 && pos[w]! < path.length - 2) pivots.push(pos[w]!);
      if (pivots.length === 0) {
        path.reverse();
        path.forEach((v, i) => (pos[v] = i));
        budget.left -= path.length;
        continue;
      }
      const i = pivots[Math.floor(rand() * pivots.length)]!;
      for (let p = i + 1, q = path.length - 1; p < q; p++, q--) {
        const a = path[p]!;
        const b = path[q]!;
        path[p] = b;
        path[q] = a;
        pos[b] = p;
        pos[a] = q;
      }
      budget.left -= path.length - i;
    }
  }
  return null;
}

/**
 * Bounded 2-opt on latency: reverses segments of the ring (rank 0 stays first) while that lowers the
 * summed link latency and every new pair is linked. At most `passes` sweeps of O(k^2) each.
 */
export function improveRing(g: LinkGraph, cycle: readonly number[], passes = 4): number[] {
  const c = [...cycle];
  const k = c.length;
  if (k < 4) return c;
  const d = (a: number, b: number) => g.rtt(a, b);
  for (let pass = 0; pass < passes; pass++) {
    let improved = false;
    for (let i = 0; i < k - 1; i++) {
      for (let j = i + 2; j < k; j++) {
        if (i === 0 && j === k - 1) continue;
        const a = c[i]!;
        const b = c[i + 1]!;
        const x = c[j]!;
        const y = c[(j + 1) % k]!;
        const ax = d(a, x);
        const by = d(b, y);
        if (ax === undefined || by === undefined) continue;
        if (ax + by < d(a, b)! + d(x, y)! - 1e-9) {
          // Reverse c[i+1..j]; c[0] is never inside the segment.
          for (let p = i + 1, q = j; p < q; p++, q--) [c[p], c[q]] = [c[q]!, c[p]!];
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  return c;
}
