import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { describe, expect, it } from "vitest";
import { escapeLabel, mergeFamilies, parseExposition, renderFamilies } from "./prom-text.ts";

const LLAMA = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 14
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 = 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
`;

describe("parseExposition", () => {
  it("reads families with their help, type and samples (labels, escapes, timestamps)", () => {
    const fams = parseExposition(
      `${LLAMA}# a comment\nweird{path="C:\\\\DIR",msg="say \\"hi\\"\\n"} +Inf 1395066363000\n`,
    );
    expect(fams.map((f) => [f.name, f.type])).toEqual([
      ["llamacpp:prompt_tokens_total", "counter"],
      ["llamacpp:kv_cache_usage_ratio", "gauge"],
      ["weird", undefined],
    ]);
    expect(fams[2]!.samples[0]).toEqual({
      name: "weird",
      labels: [
        ["path", "C:\\DIR"],
        ["msg", 'say "hi"\n'],
      ],
      value: "+Inf",
      timestamp: "1395066363000",
    });
  });

  it("groups a histogram's bucket, sum and count samples under its family", () => {
    const fams = parseExposition(`# TYPE h histogram
h_bucket{le="1"} 2
h_bucket{le="+Inf"} 3
h_sum 4.5
h_count 3
`);
    expect(fams).toHaveLength(1);
    expect(fams[0]!.samples.map((s) => s.name)).toEqual([
      "h_bucket",
      "h_bucket",
      "h_sum",
      "h_count",
    ]);
  });

  it("skips lines that are not samples", () => {
    const fams = parseExposition(
      `ok 1\nbad{ 2\n9bad 3\nnovalue\nalso_bad abc\nfine{a="b"} 4 5 6\n`,
    );
    expect(fams.map((f) => f.name)).toEqual(["ok"]);
  });
});

describe("mergeFamilies and renderFamilies", () => {
  it("re-exports several engines' metrics as one valid exposition with their labels", () => {
    const merged = mergeFamilies([
      {
        labels: [
          ["model", "org/a"],
          ["instance", "i-1"],
          ["rank", "0"],
        ],
        families: parseExposition(LLAMA),
      },
      {
        labels: [
          ["model", "org/b"],
          ["instance", "i-2"],
          ["rank", "0"],
        ],
        // An engine's own label of the same name does not override ours.
        families: parseExposition(LLAMA.replace("ratio 0.25", 'ratio{model="x"} 0.5')),
      },
    ]);
    const text = renderFamilies(merged);
    expect(text.match(/# TYPE llamacpp:kv_cache_usage_ratio gauge/g)).toHaveLength(1);
    const parsed = parsePrometheusTextFormat(text);
    const kv = parsed.find((f) => f.name === "llamacpp:kv_cache_usage_ratio")!;
    expect(kv.type).toBe("GAUGE");
    expect(kv.metrics).toEqual([
      { labels: { model: "org/a", instance: "i-1", rank: "0" }, value: "0.25" },
      { labels: { model: "org/b", instance: "i-2", rank: "0" }, value: "0.5" },
    ]);
  });

  it("escapes label values", () => {
    expect(escapeLabel('a"b\\c\nd')).toBe('a\\"b\\\\c\\nd');
  });
});
