// Table tests of the per-node memory model: KV sizing, the itemized requirement, strict fit, and the
// Pipeline layer split (proportional to free memory, one layer minimum, largest remainder).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  contextLadder,
  DEFAULT_MEMORY_MODEL,
  effectiveContext,
  estimateNodeRequirement,
  fits,
  gb,
  gpuLayerFit,
  invalidMemoryModel,
  invalidModelFacts,
  kvCacheBytes,
  resolveMemoryModel,
  splitLayers,
} from "./memory.ts";
import type { MemoryModel, ModelFacts } from "./memory.ts";

const G = 1e9;
const model = (over: Partial<ModelFacts> = {}): ModelFacts => ({
  model_id: "org/m",
  weight_bytes: 10 * G,
  layers: 10,
  context_length: 8192,
  embedding_length: 4096,
  head_count: 32,
  head_count_kv: 8,
  supports_tensor: true,
  ...over,
});
const mem = (over: Partial<MemoryModel> = {}): MemoryModel => resolveMemoryModel(over);

describe("KV cache sizing", () => {
  it.each([
    // layers x ctx x kv_heads x (key + value width) x bytes per element
    ["GQA: 8 KV heads of width 4096/32", model(), mem(), 10 * 4096 * 8 * (128 + 128) * 2],
    ["no GQA", model({ head_count_kv: 32 }), mem(), 10 * 4096 * 32 * 256 * 2],
    [
      "explicit key/value widths",
      model({ key_length: 192, value_length: 128 }),
      mem(),
      10 * 4096 * 8 * 320 * 2,
    ],
    ["q8 cache", model(), mem({ kvBytesPerElement: 1 }), 10 * 4096 * 8 * 256],
    [
      "context capped by the trained one",
      model({ context_length: 2048 }),
      mem(),
      10 * 2048 * 8 * 256 * 2,
    ],
    [
      "unknown trained context keeps the configured one",
      model({ context_length: 0 }),
      mem({ contextSize: 1024 }),
      10 * 1024 * 8 * 256 * 2,
    ],
    [
      "unknown heads: K and V each as wide as the embedding",
      model({ head_count: 0, head_count_kv: 0 }),
      mem(),
      10 * 4096 * 8192 * 2,
    ],
    [
      "unknown heads but known KV heads: still no grouped-query saving assumed",
      model({ head_count: 0, head_count_kv: 8 }),
      mem(),
      10 * 4096 * 8192 * 2,
    ],
    [
      "unknown heads with key_length: KV heads x key width",
      model({ head_count: 0, head_count_kv: 8, key_length: 128 }),
      mem(),
      10 * 4096 * 8 * 256 * 2,
    ],
  ])("%s", (_name, m, mm, bytes) => {
    expect(kvCacheBytes(m, mm)).toBe(bytes);
  });

  it("the effective context is the configured one capped by the model's", () => {
    expect(effectiveContext(model({ context_length: 100_000 }), mem({ contextSize: 8192 }))).toBe(
      8192,
    );
    expect(effectiveContext(model({ context_length: 512 }), mem({ contextSize: 8192 }))).toBe(512);
  });
});

describe("estimateNodeRequirement", () => {
  it("is share x weights x overhead + share x KV + runner allowance", () => {
    const m = model();
    const mm = mem({ overheadFactor: 1.2, runnerBytes: 0.5 * G });
    const kv = kvCacheBytes(m, mm);
    const r = estimateNodeRequirement(m, 0.25, mm);
    expect(r.weight_bytes).toBe(2.5 * G);
    expect(r.kv_bytes).toBe(kv / 4);
    expect(r.runner_bytes).toBe(0.5 * G);
    expect(r.required_bytes).toBeCloseTo(2.5 * G * 1.2 + kv / 4 + 0.5 * G, 0);
  });

  it("uses the documented defaults: 1.2 overhead, 256 MiB runner, f16 KV, 4096 context", () => {
    expect(DEFAULT_MEMORY_MODEL).toEqual({
      overheadFactor: 1.2,
      runnerBytes: 256 * 1024 ** 2,
      kvBytesPerElement: 2,
      contextSize: 4096,
    });
    expect(resolveMemoryModel({ overheadFactor: 1.5 })).toEqual({
      ...DEFAULT_MEMORY_MODEL,
      overheadFactor: 1.5,
    });
  });

  it("a share fits only when strictly less than free memory", () => {
    expect(fits(10 * G, 10 * G)).toBe(false);
    expect(fits(10 * G, 10 * G + 1)).toBe(true);
    expect(fits(10 * G + 1, 10 * G)).toBe(false);
  });

  it("prints decimal gigabytes with two decimals", () => {
    expect(gb(12.404 * G)).toBe("12.40");
    expect(gb(0)).toBe("0.00");
  });

  it.each([
    [{ overheadFactor: 0.9 }, "overheadFactor"],
    [{ overheadFactor: Number.NaN }, "overheadFactor"],
    [{ runnerBytes: -1 }, "runnerBytes"],
    [{ kvBytesPerElement: -2 }, "kvBytesPerElement"],
    [{ contextSize: 0 }, "contextSize"],
    [{ contextSize: 10.5 }, "contextSize"],
  ])("rejects the memory model %o", (over, key) => {
    expect(invalidMemoryModel(mem(over))).toContain(key);
  });

  it.each([
    [{ layers: 0 }, "layer count"],
    [{ layers: 2.5 }, "layer count"],
    [{ weight_bytes: 0 }, "weight size"],
    [{ weight_bytes: Number.POSITIVE_INFINITY }, "weight size"],
  ])("rejects the model facts %o", (over, what) => {
    expect(invalidModelFacts(model(over))).toContain(what);
    expect(invalidModelFacts(model())).toBeNull();
  });
});

describe("splitLayers", () => {
  it.each([
    [10, [30, 10], [8, 2]],
    [40, [64, 32], [27, 13]],
    [80, [50, 30, 20], [40, 24, 16]],
    [5, [1, 1], [3, 2]], // a tie goes to the lower rank
    [4, [100, 1, 1, 1], [1, 1, 1, 1]], // one layer minimum
    [6, [100, 1, 1, 1], [3, 1, 1, 1]],
    [7, [0, 0, 0], [3, 2, 2]], // nothing known: even split
    [3, [1, 1, 1, 1], null], // fewer layers than nodes
    [3, [], null],
  ])("%i layers over free %j -> %j", (layers, free, want) => {
    expect(splitLayers(layers, free)).toEqual(want);
  });

  it("always sums to the layer count with at least one layer each", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 16 }),
        (layers, free) => {
          const s = splitLayers(layers, free);
          if (layers < free.length) return s === null;
          return s !== null && s.every((x) => x >= 1) && s.reduce((a, b) => a + b, 0) === layers;
        },
      ),
    );
  });

  it("is proportional: each node is within one layer of its ideal unless the minimum lifted others", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.integer({ min: 1, max: 1000 }), { minLength: 1, maxLength: 16 }),
        (layers, free) => {
          const s = splitLayers(layers, free);
          if (!s) return layers < free.length;
          const total = free.reduce((a, b) => a + b, 0);
          const ideal = free.map((f) => (f / total) * layers);
          if (ideal.some((x) => x < 1)) return true;
          return s.every((x, i) => Math.abs(x - ideal[i]!) < 1);
        },
      ),
    );
  });

  it("never gives a node with more free memory fewer layers", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 16 }),
        (layers, free) => {
          const s = splitLayers(layers, free);
          if (!s) return true;
          for (let i = 0; i < free.length; i++)
            for (let j = 0; j < free.length; j++)
              if (free[i]! > free[j]! && s[i]! < s[j]!) return false;
          return true;
        },
      ),
    );
  });
});

describe("gpuLayerFit: a layer share over several GPUs, whole layers each", () => {
  const BARE: MemoryModel = {
    overheadFactor: 1,
    runnerBytes: 0,
    kvBytesPerElement: 0,
    contextSize: 1,
  };
  const m = (layers: number, weightGb: number) =>
    model({ layers, weight_bytes: weightGb * G, head_count: 0, head_count_kv: 0 });
  it.each([
    { name: "one GPU: the node rule is enough", layers: 2, weight: 40, gpus: [48], want: null },
    { name: "no GPUs", layers: 2, weight: 40, gpus: undefined, want: null },
    {
      name: "2 x 24 GB hold 2 layers of 20 GB: one each",
      layers: 2,
      weight: 40,
      gpus: [24, 24],
      want: { fits: true, layers: 1 },
    },
    {
      name: "2 x 24 GB do not hold 1 layer of 40 GB, though the node has 48 GB",
      layers: 1,
      weight: 40,
      gpus: [24, 24],
      want: { fits: false, layers: 1, gpu: 0 },
    },
    {
      name: "3 layers of 13.3 GB split 2 and 1: 26.7 GB on GPU 0 does not fit 24 GB",
      layers: 3,
      weight: 40,
      gpus: [24, 24],
      want: { fits: false, layers: 2, gpu: 0 },
    },
    {
      name: "uneven GPUs take layers by free memory: 6 and 2 of 8 layers of 3 GB",
      layers: 8,
      weight: 24,
      gpus: [19, 8],
      want: { fits: true, gpus: 2 },
    },
    {
      name: "fewer layers than GPUs: the layer goes to the GPU with most free memory",
      layers: 1,
      weight: 20,
      gpus: [8, 24],
      want: { fits: true, gpu: 1, layers: 1 },
    },
  ])("$name", ({ layers, weight, gpus, want }) => {
    const r = gpuLayerFit(
      m(layers, weight),
      layers,
      gpus?.map((g) => g * G),
      BARE,
    );
    if (want === null) expect(r).toBeNull();
    else expect(r).toMatchObject(want);
  });

  it("each GPU carries its own runner allowance", () => {
    const mem = { ...BARE, runnerBytes: 0.5 * G };
    // 10 layers of 0.6 GB on 2 GPUs of 3.4 GB: 5 each, 3.0 + 0.5 = 3.5 GB > 3.4 GB.
    expect(gpuLayerFit(m(10, 6), 10, [3.4 * G, 3.4 * G], mem)).toMatchObject({
      fits: false,
      layers: 5,
    });
    expect(gpuLayerFit(m(10, 6), 10, [3.6 * G, 3.6 * G], mem)?.fits).toBe(true);
  });

  it("a share that fits its GPUs fits its node (the GPU rule is only stricter)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 80 }),
        fc.integer({ min: 1, max: 100 }),
        fc.array(fc.integer({ min: 1, max: 80 }), { minLength: 2, maxLength: 8 }),
        (layers, weight, gpus) => {
          const r = gpuLayerFit(
            m(layers, weight),
            layers,
            gpus.map((g) => g * G),
            BARE,
          )!;
          const free = gpus.reduce((a, b) => a + b, 0) * G;
          return !r.fits || fits(weight * G, free);
        },
      ),
    );
  });
});

describe("contextLadder", () => {
  it.each([
    [131_072, [131_072, 65_536, 32_768, 16_384, 8192, 4096]],
    [32_768, [32_768, 16_384, 8192, 4096]],
    [6000, [6000, 4096]],
    [4096, [4096]],
    [2048, [2048]],
    [0, [4096]],
  ])("a model trained on %d tokens tries %j", (trained, want) => {
    expect(contextLadder({ context_length: trained })).toEqual(want);
  });
});
