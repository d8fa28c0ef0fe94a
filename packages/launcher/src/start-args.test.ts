import { describe, expect, it } from "vitest";
import { parseStartArgs } from "./start-args.ts";

const HOME = "/home/op";

describe("npm start options", () => {
  it.each([
    [[], { nodes: 1, port: 8080, dataDir: "/home/op/.service/local-cluster", verbose: false }],
    [["--nodes", "3"], { nodes: 3, port: 8080 }],
    [["--nodes=16", "--port", "9000"], { nodes: 16, port: 9000 }],
    [["--port", "65535"], { port: 65535 }],
    [["--data-dir", "/srv/ic", "--verbose"], { dataDir: "/srv/ic", verbose: true }],
    [
      ["--model", "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"],
      { model: { model_id: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", quant: "Q4_K_M" } },
    ],
    [["--model", "org/repo@v1"], { model: { model_id: "org/repo", revision: "v1" } }],
    [["--config", "/etc/ic/local.yaml"], { configFile: "/etc/ic/local.yaml" }],
  ])("%j starts with %j", (argv, want) => {
    const r = parseStartArgs(argv, {}, HOME);
    expect(r.kind).toBe("start");
    expect(r.kind === "start" && r.options).toMatchObject(want);
  });

  it("takes IC_DATA_DIR when no --data-dir is given", () => {
    const r = parseStartArgs([], { IC_DATA_DIR: "/data/ic" }, HOME);
    expect(r.kind === "start" && r.options.dataDir).toBe("/data/ic");
  });

  it.each([[["--help"]], [["-h"]], [["--nodes", "3", "--help"]]])("%j is help", (argv) =>
    expect(parseStartArgs(argv, {}, HOME)).toEqual({ kind: "help" }),
  );

  it.each([
    [["--port", "abc"], '--port must be a whole number, not "abc"'],
    [["--port", "70000"], "--port must be between 1 and 65535, not 70000"],
    [["--port", "0"], "--port must be between 1 and 65535, not 0"],
    [["--port", "-1"], "Option '--port' argument is ambiguous"],
    [["--nodes", "0"], "--nodes must be between 1 and 16, not 0"],
    [["--nodes", "17"], "--nodes must be between 1 and 16, not 17"],
    [["--nodes", "2.5"], '--nodes must be a whole number, not "2.5"'],
    [["--port", "65535", "--nodes", "2"], "--port 65535 leaves no room for 2 nodes"],
    [["--data-dir", " "], "--data-dir must not be empty"],
    [["--model", "../x"], '--model must be org/repo[:QUANT][@revision], not "../x"'],
    [["--model", "org/repo:"], "--model must be org/repo[:QUANT][@revision]"],
    [["--config", ""], "--config must name a YAML file"],
    [["--bogus"], "Unknown option '--bogus'"],
    [["stray"], "Unexpected argument 'stray'"],
    [["--port"], "Option '--port <value>' argument missing"],
  ])("%j is refused: %s", (argv, message) => {
    const r = parseStartArgs(argv, {}, HOME);
    expect(r.kind).toBe("error");
    expect(r.kind === "error" && r.message).toContain(message);
  });
});
