import { describe, expect, it } from "vitest";
import { formatBytes, progressLine } from "./publish.ts";

describe("progressLine", () => {
  it("reports 0, every 5 percent crossed and the end once", () => {
    const lines: string[] = [];
    const report = progressLine("uploading mtp.safetensors", 1000, (l) => lines.push(l));
    for (const done of [0, 10, 49, 50, 51, 120, 990, 1000, 1000]) report(done);
    expect(lines).toEqual([
      "uploading mtp.safetensors: 0/1000 bytes (0%)",
      "uploading mtp.safetensors: 50/1000 bytes (5%)",
      "uploading mtp.safetensors: 120/1000 bytes (12%)",
      "uploading mtp.safetensors: 990/1000 bytes (99%)",
      "uploading mtp.safetensors: 1000/1000 bytes (100%)",
    ]);
  });

  it("handles an empty total", () => {
    const lines: string[] = [];
    progressLine("x", 0, (l) => lines.push(l))(0);
    expect(lines).toEqual(["x: 0/0 bytes (100%)"]);
  });
});

describe("formatBytes", () => {
  it.each([
    [0, "0 B"],
    [1023, "1023 B"],
    [1536, "1.5 KiB"],
    [3 * 1024 ** 3, "3.0 GiB"],
  ])("formats %d as %s", (n, s) => {
    expect(formatBytes(n)).toBe(s);
  });
});
