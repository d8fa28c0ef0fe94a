import { describe, expect, it } from "vitest";
import { parseModelRef, parseRepoId } from "./model-ref.ts";

describe("parseModelRef", () => {
  it.each([
    ["owner/repo", "owner/repo"],
    ["  Qwen/Qwen3-30B-A3B  ", "Qwen/Qwen3-30B-A3B"],
    ["https://huggingface.co/acme/Tiny-MTP", "acme/Tiny-MTP"],
    ["https://huggingface.co/acme/Tiny-MTP/", "acme/Tiny-MTP"],
    ["https://huggingface.co/acme/Tiny-MTP/tree/main", "acme/Tiny-MTP"],
    ["https://huggingface.co/acme/Tiny-MTP/blob/main/config.json", "acme/Tiny-MTP"],
    [
      "https://huggingface.co/acme/Tiny-MTP/resolve/main/model.safetensors?download=true",
      "acme/Tiny-MTP",
    ],
    ["huggingface.co/acme/Tiny-MTP", "acme/Tiny-MTP"],
    ["https://hf.co/acme/tiny.v2_x", "acme/tiny.v2_x"],
    ["http://127.0.0.1:4321/acme/Tiny-MTP", "acme/Tiny-MTP"],
  ])("reads %s as %s", (input, id) => {
    expect(parseModelRef(input, "http://127.0.0.1:4321")).toBe(id);
  });

  it.each([
    [""],
    ["   "],
    ["owner"],
    ["a/b/c"],
    ["owner/re po"],
    ["-owner/repo"],
    ["owner/..repo"],
    ["owner/re--po"],
    ["https://example.com/owner/repo"],
    ["https://huggingface.co/datasets/owner/repo"],
    ["https://huggingface.co/spaces/owner/repo"],
    ["https://huggingface.co/owner"],
    ["https://huggingface.co/owner/repo/settings"],
    ["ftp://huggingface.co/owner/repo"],
    ["http://127.0.0.1:9999/acme/Tiny-MTP"],
  ])("refuses %j", (input) => {
    expect(parseModelRef(input, "http://127.0.0.1:4321")).toBeNull();
  });

  it("accepts repo ids only as two valid segments", () => {
    expect(parseRepoId("a/b")).toBe("a/b");
    expect(parseRepoId("a/b.git")).toBeNull();
    expect(parseRepoId(`a/${"x".repeat(97)}`)).toBeNull();
  });
});
