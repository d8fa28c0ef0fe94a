import { describe, expect, it } from "vitest";
import { parseNodeArgs } from "./node-args.ts";

describe("node process options", () => {
  it.each([
    [[], { kind: "run", config: undefined }],
    [["--config", "/etc/ic/node.yaml"], { kind: "run", config: "/etc/ic/node.yaml" }],
    [["--help"], { kind: "help" }],
    [["-h"], { kind: "help" }],
  ])("%j -> %j", (argv, want) => expect(parseNodeArgs(argv)).toEqual(want));

  it.each([[["--confg", "x"]], [["serve"]], [["--config"]]])("%j is refused", (argv) =>
    expect(parseNodeArgs(argv).kind).toBe("error"),
  );
});
