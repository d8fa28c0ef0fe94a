import { describe, expect, it } from "vitest";
import {
  bytes,
  evaluate,
  formatLogLine,
  intOption,
  parse,
  progressBar,
  purgeText,
  table,
  uniqueId,
  UsageError,
  VERBS,
} from "./index.ts";
import { RUNNERS } from "./verbs.ts";
import type { Findings } from "./index.ts";

describe("arguments", () => {
  it.each([
    [["status"], { verb: "status", url: "http://127.0.0.1:8080", json: false }],
    [
      ["--url", "http://n1:8080", "--json", "models"],
      { verb: "models", url: "http://n1:8080", json: true },
    ],
    [["pull", "acme/x", "--detach"], { verb: "pull", positionals: ["acme/x"] }],
    [
      ["chat", "acme/x", "how", "are", "you", "--max-tokens", "8"],
      { verb: "chat", positionals: ["acme/x", "how", "are", "you"] },
    ],
    [["start", "--nodes", "3"], { verb: "start", rest: ["--nodes", "3"] }],
    [[], { verb: "", help: true }],
    [["doctor", "--help"], { verb: "doctor", help: true }],
  ])("%j", (argv, want) => expect(parse(argv, {})).toMatchObject(want));

  it("takes the URL and token from the environment, options first", () => {
    expect(parse(["status"], { IC_URL: "http://a:1", IC_TOKEN: "t" })).toMatchObject({
      url: "http://a:1",
      token: "t",
    });
    expect(parse(["--token", "u", "status"], { IC_TOKEN: "t" }).token).toBe("u");
  });

  it.each([
    [["frobnicate"], 'unknown verb "frobnicate"'],
    [["status", "--bogus"], "Unknown option '--bogus'"],
    [["pull"], "usage: ic pull <org/name>"],
    [["rm", "a", "b"], "usage: ic rm <instance_id>"],
    [["place", "acme/x", "--min-nodes"], "argument missing"],
  ])("%j is a usage error: %s", (argv, message) => {
    expect(() => parse(argv, {})).toThrow(UsageError);
    expect(() => parse(argv, {})).toThrow(message);
  });

  it.each([
    ["3", 3],
    [undefined, 7],
  ])("intOption(%j)", (raw, want) =>
    expect(intOption("n", raw, { min: 1, max: 10, fallback: 7 })).toBe(want),
  );
  it.each([["x"], ["0"], ["11"], ["2.5"]])("intOption(%j) refuses", (raw) =>
    expect(() => intOption("n", raw, { min: 1, max: 10, fallback: 7 })).toThrow(UsageError),
  );
});

describe("verbs", () => {
  it("every verb the parser accepts has a runner, and every runner a verb", () =>
    expect(Object.keys(RUNNERS).sort()).toEqual(Object.keys(VERBS).sort()));
});

describe("formatting", () => {
  it("aligns tables", () => {
    expect(
      table(
        ["A", "BB"],
        [
          ["long", "x"],
          ["s", "yy"],
        ],
      ),
    ).toBe("A     BB\nlong  x\ns     yy");
  });
  it.each([
    [0, "0 B"],
    [1536, "1.5 KiB"],
    [5 * 1024 ** 3, "5.0 GiB"],
    [null, "-"],
  ])("bytes(%j) = %s", (n, s) => expect(bytes(n)).toBe(s));
  it("draws progress", () => {
    expect(progressBar(512, 1024, 10)).toBe("[#####-----]  50%  512 B / 1.0 KiB");
    expect(progressBar(10, null)).toBe("10 B");
  });
});

describe("doctor's checks", () => {
  // The findings as a test writes them: a state document with the fields doctor reads.
  type Written = Omit<Findings, "state"> & { state: object | Error };
  const healthy: Written = {
    url: "http://n1:8080",
    health: { ok: true },
    state: {
      this_node: { name: "n1", synced: true },
      node_identities: [
        { node_id: "n-1", name: "n1", api_url: "http://n1:8080" },
        { node_id: "n-2", name: "n2", api_url: "http://n2:8080" },
      ],
      nodeHealth: [],
      topology: {
        nodes: [
          {
            node_id: "n-1",
            name: "n1",
            last_heard_ms_ago: 100,
            telemetry: { engine: { server_bin: "/x/llama-server", usable: true } },
          },
          {
            node_id: "n-2",
            name: "n2",
            last_heard_ms_ago: 900,
            telemetry: { engine: { server_bin: "/x/llama-server", usable: true } },
          },
        ],
      },
      models: [{ model_id: "acme/m", drafter: "acme/d" }],
      instances: [],
    },
    expectNodes: 2,
    storage: {
      n1: { free: 50 * 1024 ** 3, total: 100 * 1024 ** 3 },
      n2: { free: 50 * 1024 ** 3, total: 100 * 1024 ** 3 },
    },
    peers: { n1: true, n2: true },
    completion: { model: "acme/m", result: { tokens: 2 } },
    drafters: { "acme/m": "draft acceptance = 0.61 ( 11 accepted / 18 generated)" },
    natsServer: "nats-server: v2.10.18",
    livenessMs: 6000,
  };
  const failing = (f: Written) => evaluate(f as Findings).filter((c) => !c.ok);

  it("passes a healthy cluster", () => {
    expect(failing(healthy)).toEqual([]);
  });

  const state = healthy.state as Exclude<Findings["state"], Error>;
  it.each<[string, Partial<Written>, string, string]>([
    [
      "node unreachable",
      { health: new Error("cannot reach http://n1:8080: ECONNREFUSED") },
      "api",
      "is the node running",
    ],
    [
      "not in a session",
      { health: { ok: false, reason: "no_session" } },
      "api",
      "not serving: no_session",
    ],
    ["a node missing", { expectNodes: 3 }, "nodes", "expected 3"],
    [
      "a silent node",
      {
        state: {
          ...state,
          topology: {
            nodes: [
              state.topology.nodes[0]!,
              { ...state.topology.nodes[1]!, last_heard_ms_ago: 9000 },
            ],
          },
        },
      },
      "bus",
      "n2",
    ],
    [
      "a deployment that failed everywhere",
      {
        state: {
          ...state,
          deployments: [
            {
              deployment_id: "d-1",
              model_id: "acme/broken",
              status: "Failed",
              refusal: {
                message:
                  "acme/broken failed to run on every node it was tried on: n1 (llama_model_load: error loading model: missing tensor 'token_embd.weight')",
              },
            },
          ],
        },
      },
      "models",
      "missing tensor 'token_embd.weight'",
    ],
    [
      "a runner crash-looping",
      {
        state: {
          ...state,
          nodeHealth: [
            {
              node_name: "n2",
              code: "runner_crash_loop",
              severity: "warn",
              message:
                "the runner of acme/m (instance i-1, rank 0) crashed 3 times in a row: out of memory",
            },
          ],
        },
      },
      "models",
      "n2: the runner of acme/m",
    ],
    [
      "an error in nodeHealth",
      {
        state: {
          ...state,
          nodeHealth: [
            {
              node_name: "n2",
              code: "gpu_serving_disabled",
              severity: "error",
              message: "CPU-only build",
              remediation: "rebuild with CUDA",
            },
          ],
        },
      },
      "node health",
      "rebuild with CUDA",
    ],
    [
      "an unusable engine",
      {
        state: {
          ...state,
          topology: {
            nodes: [
              {
                ...state.topology.nodes[0]!,
                telemetry: { engine: { server_bin: "/x/llama-server", usable: false } },
              },
            ],
          },
        },
      },
      "engine",
      "build-engine",
    ],
    [
      "disk near the floor",
      { storage: { n1: { free: 3 * 1024 ** 3, total: 100 * 1024 ** 3 } } },
      "disk n1",
      "2 GiB event-log floor",
    ],
    [
      "a peer unreachable",
      { peers: { n1: true, n2: new Error("cannot reach http://n2:8080: timeout") } },
      "reach n2",
      "node.host",
    ],
    ["no ready model", { completion: undefined }, "completion", "ic place"],
    [
      "a failing completion",
      { completion: { model: "acme/m", result: new Error("upstream_failed") } },
      "completion",
      "upstream_failed",
    ],
    [
      "no drafter line",
      { drafters: { "acme/m": new Error("no draft acceptance line") } },
      "drafter acme/m",
      "speculative decoding",
    ],
    [
      "no nats-server here",
      { natsServer: new Error("nats-server is not installed on this machine") },
      "nats-server",
      "apt-get install nats-server",
    ],
  ])("%s fails %s with what to fix", (_, change, name, fix) => {
    const bad = failing({ ...healthy, ...change });
    expect(bad.map((c) => c.name)).toEqual([name]);
    expect(bad[0]!.detail).toContain(fix);
  });
});

describe("log lines", () => {
  it.each([
    [
      {
        level: 40,
        time: 0,
        component: "worker",
        msg: "runner failed",
        model: "acme/x",
        instance: "i-1",
        rank: 0,
        error: "llama_model_load: error\nmissing tensor 'token_embd.weight'",
      },
      `1970-01-01T00:00:00.000Z  WARN   worker  runner failed  model=acme/x instance=i-1 rank=0 error="llama_model_load: error ⏎ missing tensor 'token_embd.weight'"`,
    ],
    [{ level: 30, time: 1000, msg: "ready" }, "1970-01-01T00:00:01.000Z  INFO   -  ready"],
    [
      {
        level: 50,
        time: 0,
        component: "master",
        msg: "x",
        err: { type: "Error", message: "boom", stack: "at y" },
        code: "no_quorum",
        node_name: "n2",
      },
      "1970-01-01T00:00:00.000Z  ERROR  master  x  node=n2 code=no_quorum error=boom",
    ],
    [{ raw: "not json" }, '"not json"'],
    [
      { level: 60, time: "2026-11-26T06:00:00Z", msg: "end" },
      "2026-11-26T06:00:00Z  FATAL  -  end",
    ],
  ])("%j", (line, want) => expect(formatLogLine(line)).toBe(want));
});

describe("--version", () => {
  it("is a global option before any verb; after a verb it is not one", () => {
    expect(parse(["--version"], {})).toMatchObject({ version: true, help: false });
    expect(parse([], {})).toMatchObject({ version: false, help: true });
    expect(() => parse(["status", "--version"], {})).not.toThrow();
    expect(parse(["status", "--version"], {}).version).toBe(false);
  });
});

describe("id prefixes", () => {
  const ids = ["i-1c92aaaa", "i-1c93bbbb", "i-77cccccc"];
  it.each([
    ["i-1c92aaaa", "i-1c92aaaa"],
    ["i-1c92", "i-1c92aaaa"],
    ["i-7", "i-77cccccc"],
  ])("%s -> %s", (ref, want) => expect(uniqueId(ref, ids, "instance")).toBe(want));

  it.each([
    ["i-1c9", '"i-1c9" names several instances: i-1c92aaaa, i-1c93bbbb; type more of the id'],
    ["i-0", 'no instance id starts with "i-0" (instances: i-1c92aaaa, i-1c93bbbb, i-77cccccc)'],
  ])("%s is refused: %s", (ref, message) => {
    expect(() => uniqueId(ref, ids, "instance")).toThrow(message);
  });

  it("says so when there is nothing to match", () => {
    expect(() => uniqueId("i-1", [], "instance")).toThrow(
      'no instance id starts with "i-1" (there are no instances)',
    );
  });
});

describe("purge in words", () => {
  const node = (
    name: string,
    o: Partial<Parameters<typeof purgeText>[0]["nodes"][number]> = {},
  ) => ({
    name,
    ok: true,
    deleted: [],
    freed_bytes: 0,
    skipped_in_use: [],
    ...o,
  });
  it("names what each node freed and kept", () => {
    expect(
      purgeText({
        deleted_bytes: 2_000_000,
        not_answered: ["node-3"],
        nodes: [
          node("node-1", { deleted: ["a/b"], freed_bytes: 2_000_000 }),
          node("node-2", { skipped_in_use: ["c/d"] }),
        ],
      }),
    ).toBe(
      [
        `node-1: freed ${bytes(2_000_000)} (a/b)`,
        "node-2: kept in use: c/d",
        `freed ${bytes(2_000_000)} in all`,
        "no answer from node-3",
      ].join("\n"),
    );
  });

  it("says why nothing was freed", () => {
    expect(
      purgeText({ deleted_bytes: 0, not_answered: [], nodes: [node("node-1"), node("node-2")] }),
    ).toBe("freed nothing: no node holds staged copies (the store's own files are never purged)");
    expect(
      purgeText(
        {
          deleted_bytes: 0,
          not_answered: [],
          nodes: [node("node-1", { skipped_in_use: ["a/b"] })],
        },
        "a/b",
      ),
    ).toBe(
      "node-1: kept in use: a/b\nfreed nothing: every staged copy of a/b left is in use by an instance (delete the instance first)",
    );
  });
});
