import { describe, expect, it } from "vitest";
import { pickPiece, pieceOrder, type SourceView } from "./piece-plan.ts";

const store = (o: Partial<SourceView> = {}): SourceView => ({
  id: "store",
  kind: "store",
  has: () => true,
  inflight: 0,
  limit: 2,
  ...o,
});
const peer = (id: string, pieces: number[], o: Partial<SourceView> = {}): SourceView => ({
  id,
  kind: "peer",
  has: (i) => pieces.includes(i),
  inflight: 0,
  limit: 2,
  ...o,
});
const base = { inflight: new Set<number>(), maxInflight: 4, nowMs: 1000 };

describe("pickPiece", () => {
  it.each([
    {
      name: "store alone: the first wanted piece",
      wanted: [3, 1, 2],
      sources: [store()],
      want: { piece: 3, source: "store" },
    },
    {
      name: "a peer that holds a wanted piece goes before the store",
      wanted: [0, 1, 2],
      sources: [store(), peer("a", [2])],
      want: { piece: 2, source: "a" },
    },
    {
      name: "rarest piece first among what free peers hold",
      wanted: [0, 1],
      sources: [store(), peer("a", [0, 1]), peer("b", [0])],
      want: { piece: 1, source: "a" },
    },
    {
      name: "among holders, the least busy peer",
      wanted: [0],
      sources: [store(), peer("a", [0], { inflight: 1 }), peer("b", [0])],
      want: { piece: 0, source: "b" },
    },
    {
      name: "busy peers: the store takes a piece no peer holds",
      wanted: [0, 1, 2],
      sources: [store(), peer("a", [0, 1], { inflight: 2 })],
      want: { piece: 2, source: "store" },
    },
    {
      name: "a cooling peer gets nothing",
      wanted: [0, 1],
      sources: [store(), peer("a", [0], { coolUntilMs: 5000 })],
      want: { piece: 1, source: "store" },
    },
    {
      name: "a cooling peer is open again once its time is up",
      wanted: [0, 1],
      sources: [store(), peer("a", [0], { coolUntilMs: 1000 })],
      want: { piece: 0, source: "a" },
    },
    {
      name: "pieces under way are not asked twice",
      wanted: [0, 1],
      inflight: new Set([0]),
      sources: [store({ inflight: 1 })],
      want: { piece: 1, source: "store" },
    },
    {
      name: "a piece a peer is fetching from the store is left to it while this copy is busy",
      wanted: [0, 1],
      inflight: new Set([7]),
      sources: [store(), peer("a", [], { fetching: (i) => i === 0 })],
      want: { piece: 1, source: "store" },
    },
    {
      name: "nothing from the store when every piece left is being fetched by peers",
      wanted: [0],
      inflight: new Set([7]),
      sources: [store(), peer("a", [], { fetching: (i) => i === 0 })],
      want: undefined,
    },
    {
      name: "with nothing under way, a piece a peer is fetching is taken anyway (no stall)",
      wanted: [0],
      sources: [store(), peer("a", [], { fetching: (i) => i === 0 })],
      want: { piece: 0, source: "store" },
    },
    {
      name: "nothing when the copy has its requests at once",
      wanted: [0, 1, 2],
      inflight: new Set([5, 6, 7, 8]),
      sources: [store()],
      want: undefined,
    },
    {
      name: "nothing when the store is full and no free peer holds anything wanted",
      wanted: [0, 1],
      sources: [store({ inflight: 2 }), peer("a", [3])],
      want: undefined,
    },
    {
      name: "nothing when every wanted piece is under way",
      wanted: [0],
      inflight: new Set([0]),
      sources: [store(), peer("a", [0])],
      want: undefined,
    },
  ])("$name", ({ wanted, sources, want, inflight }) => {
    expect(pickPiece({ ...base, wanted, sources, inflight: inflight ?? base.inflight })).toEqual(
      want,
    );
  });
});

describe("pieceOrder", () => {
  it("is a permutation, the same for a seed and different across seeds", () => {
    const a = pieceOrder(64, "node-1");
    expect([...a].sort((x, y) => x - y)).toEqual(Array.from({ length: 64 }, (_, i) => i));
    expect(pieceOrder(64, "node-1")).toEqual(a);
    expect(pieceOrder(64, "node-2")).not.toEqual(a);
    expect(pieceOrder(0, "x")).toEqual([]);
  });
});
