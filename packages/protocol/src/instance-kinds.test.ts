// The kinds table: every path has one kind, records from before kinds read as theirs, and a
// placement's two ways of asking agree or are refused.
import { describe, expect, it } from "vitest";
import {
  INSTANCE_KIND_TABLE,
  INSTANCE_KINDS,
  kindForPath,
  kindOf,
  requestedKind,
} from "./instance-kinds.ts";

describe("instance kinds", () => {
  it("gives every path exactly one kind", () => {
    const paths = INSTANCE_KINDS.flatMap((k) => INSTANCE_KIND_TABLE[k].paths);
    expect(new Set(paths).size).toBe(paths.length);
    for (const k of INSTANCE_KINDS)
      for (const p of INSTANCE_KIND_TABLE[k].paths) expect(kindForPath(p)).toBe(k);
    expect(kindForPath("/v1/models")).toBeUndefined();
  });

  it.each([
    [{}, "generate"],
    [{ embeddings: true }, "embed"],
    [{ embeddings: false }, "generate"],
    [{ kind: "rerank" as const }, "rerank"],
    [{ kind: "embed" as const, embeddings: true }, "embed"],
  ])("kindOf(%o) is %s", (record, kind) => {
    expect(kindOf(record)).toBe(kind);
  });

  it.each([
    [undefined, undefined, "generate"],
    [undefined, true, "embed"],
    ["rerank", undefined, "rerank"],
    ["embed", true, "embed"],
    ["rerank", true, null],
    ["generate", true, null],
    ["generate", false, "generate"],
  ] as const)("requestedKind(%s, %s) is %s", (kind, embeddings, want) => {
    expect(requestedKind(kind, embeddings)).toBe(want);
  });

  it("starts each kind's engine in its mode", () => {
    expect(INSTANCE_KIND_TABLE.generate.engineArgs(undefined)).toEqual([]);
    expect(INSTANCE_KIND_TABLE.embed.engineArgs(undefined)).toEqual([
      "--embeddings",
      "--pooling",
      "mean",
    ]);
    expect(INSTANCE_KIND_TABLE.embed.engineArgs("cls")).toContain("cls");
    expect(INSTANCE_KIND_TABLE.rerank.engineArgs(undefined)).toEqual(["--reranking"]);
  });
});
