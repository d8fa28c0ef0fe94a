// The publisher program as deployed (`npm run publisher` runs this file under tsx): LOG_LEVEL is
// honoured, a SIGTERM to npm stops it, and an invalid configuration stops it at startup with one
// line naming the variable.
import { spawn } from "node:child_process";
import { copyFile, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { REPO_ROOT, waitFor } from "@ic/testkit";
import { BUILTIN_CATALOG } from "./config.ts";
import { unreachableHubUrl } from "./testing.ts";

const MAIN = join(REPO_ROOT, "services/publisher/src/main.ts");

interface Program {
  /** Every stdout and stderr line so far. */
  readonly lines: string[];
  readonly exited: Promise<number | null>;
  /** Parsed JSON log records of stdout. */
  records(): Record<string, unknown>[];
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The program, run as tests run it (node under tsx) or as the README does (`npm run publisher`). */
function startMain(env: Record<string, string>, via: "node" | "npm" = "node"): Program {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !k.startsWith("PUBLISHER_") && k !== "HF_TOKEN" && k !== "LOG_LEVEL",
    ),
  );
  const [cmd, args] =
    via === "npm" ? ["npm", ["run", "publisher"]] : [process.execPath, ["--import", "tsx", MAIN]];
  const child = spawn(cmd, args, {
    cwd: REPO_ROOT,
    env: { ...clean, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const collect = (c: Buffer): void => {
    for (const l of c.toString().split("\n")) if (l.trim() !== "") lines.push(l);
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await exited;
  };
  return {
    lines,
    exited,
    records: () =>
      lines.flatMap((l) => {
        try {
          return [JSON.parse(l) as Record<string, unknown>];
        } catch {
          return [];
        }
      }),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

describe("publisher program", () => {
  let dir: string;
  let env: Record<string, string>;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "publisher-main-"));
    const catalog = join(dir, "catalog.yaml");
    await copyFile(BUILTIN_CATALOG, catalog);
    env = {
      PUBLISHER_PORT: "0",
      PUBLISHER_CONFIG_DIR: join(dir, "config"),
      PUBLISHER_CATALOG: catalog,
      PUBLISHER_WORK_DIR: dir,
      HF_ENDPOINT: await unreachableHubUrl(),
    };
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("writes debug lines when LOG_LEVEL=debug", async () => {
    await using program = startMain({ ...env, LOG_LEVEL: "debug" });
    const url = await waitFor(
      () => program.records().find((r) => r["msg"] === "weights publisher listening")?.["url"],
      { timeoutMs: 30_000, what: "the publisher to listen" },
    );
    expect((await fetch(`${String(url)}/api/status`)).status).toBe(200);
    const line = await waitFor(
      () =>
        program
          .records()
          .find((r) => r["level"] === 20 && r["msg"] === "request" && r["path"] === "/api/status"),
      { timeoutMs: 10_000, what: "a debug request line" },
    );
    expect(line).toMatchObject({ component: "api", method: "GET", status: 200 });
  });

  it("writes no debug lines at the default level", async () => {
    await using program = startMain(env);
    const url = await waitFor(
      () => program.records().find((r) => r["msg"] === "weights publisher listening")?.["url"],
      { timeoutMs: 30_000, what: "the publisher to listen" },
    );
    expect((await fetch(`${String(url)}/api/status`)).status).toBe(200);
    await program.stop();
    expect(program.records().some((r) => r["level"] === 20)).toBe(false);
  });

  it("run by `npm run publisher`, stops when npm's process gets SIGTERM (a process manager, kill <pid>)", async () => {
    await using program = startMain(env, "npm");
    const url = await waitFor(
      () => program.records().find((r) => r["msg"] === "weights publisher listening")?.["url"],
      { timeoutMs: 60_000, what: "the publisher to listen" },
    );
    expect((await fetch(`${String(url)}/api/status`)).status).toBe(200);
    // npm hands the signal to its script, which execs the program (it stopped at npm's sh before).
    await program.stop();
    await waitFor(() => program.records().find((r) => r["msg"] === "weights publisher stopped"), {
      timeoutMs: 15_000,
      what: "the publisher to stop",
    });
    await expect(fetch(`${String(url)}/api/status`)).rejects.toThrow();
  });

  it("stops at startup with one line naming PUBLISHER_WORK_DIR when that directory is missing", async () => {
    const missing = join(dir, "no-such-dir");
    await using program = startMain({ ...env, PUBLISHER_WORK_DIR: missing });
    const code = await Promise.race([
      program.exited,
      new Promise<"running">((r) => setTimeout(() => r("running"), 20_000)),
    ]);
    expect(code).toBe(1);
    expect(program.lines).toHaveLength(1);
    expect(JSON.parse(program.lines[0] ?? "{}")).toMatchObject({
      level: 60,
      msg: "invalid configuration",
      err: `invalid environment variable PUBLISHER_WORK_DIR: ${missing} does not exist`,
    });
  });
});
