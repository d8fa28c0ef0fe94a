// `npm start`'s entry (cli.ts) and the node's (main.ts) as an operator runs them: real processes.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { freePort, REPO_ROOT, startHubEmulator, tinyGgufRepo, waitFor } from "@ic/testkit";

const CLI = join(REPO_ROOT, "packages/launcher/src/cli.ts");
const MAIN = join(REPO_ROOT, "services/node/src/main.ts");
/** An entry point run to its end: exit status and both outputs (the tests below run side by side). */
const run = (file: string, args: string[]) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", file, ...args],
      { cwd: REPO_ROOT, encoding: "utf8", timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = (err as { code?: unknown } | null)?.code;
        resolve({ status: err ? (typeof code === "number" ? code : null) : 0, stdout, stderr });
      },
    );
  });

/**
 * `npm start` with `args` as an operator runs it: its output so far, and its exit once it ends. The
 * launcher itself, or (`npm`) npm with its script, as the README runs it.
 */
async function npmStart(args: string[], via: "launcher" | "npm" = "launcher") {
  const [cmd, argv] =
    via === "npm"
      ? ["npm", ["start", "--", ...args]]
      : [process.execPath, ["--import", "tsx", CLI, "start", ...args]];
  const child = spawn(cmd, argv, {
    cwd: REPO_ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const output = () => out;
  const ready = () =>
    waitFor(() => (out.includes("Press Ctrl-C to stop.") ? true : undefined), {
      timeoutMs: 150_000,
      what: `the local cluster to be ready; output so far:\n${out}`,
    });
  return { child, output, exited, ready };
}

/** `npm start` on a free port with `dataDir`, as the runs on one data dir below start it. */
async function npmStartOn(dataDir: string, via: "launcher" | "npm" = "launcher") {
  const port = await freePort();
  return { port, ...(await npmStart(["--port", String(port), "--data-dir", dataDir], via)) };
}

describe.concurrent("the entry points answer before starting anything", () => {
  it("start --help prints every option and exits 0", async () => {
    const r = await run(CLI, ["start", "--help"]);
    expect(r.status).toBe(0);
    for (const opt of [
      "--nodes",
      "--port",
      "--data-dir",
      "--verbose",
      "--help",
      "--model",
      "--config",
    ])
      expect(r.stdout).toContain(opt);
    expect(r.stderr).toBe("");
  });

  it.each([
    [["start", "--port", "abc"], '--port must be a whole number, not "abc"'],
    [["start", "--nodes", "0"], "--nodes must be between 1 and 16"],
    [["start", "--frobnicate"], "Unknown option '--frobnicate'"],
    [["status"], 'unknown command "status"'],
  ])("%j exits 2 with one line and no stack trace", async (args, message) => {
    const r = await run(CLI, args);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(message);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toBe("");
  });

  it("main.ts --help prints its usage and exits 0; an unknown argument exits 2", async () => {
    const [help, bad] = await Promise.all([
      run(MAIN, ["--help"]),
      run(MAIN, ["--confg", "x.yaml"]),
    ]);
    expect(help.status).toBe(0);
    expect(help.stdout).toContain("--config FILE");
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("Unknown option '--confg'");
  });
});

describe("npm start", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "ic-local-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("starts a node with the documented defaults, places the demo model, says where logs live, and stops on Ctrl-C", async () => {
    const { port, child, output, exited, ready } = await npmStartOn(dataDir);
    try {
      await ready();
      const out = output();
      const base = `http://127.0.0.1:${port}`;
      expect(out).toContain(`Base URL: ${base}`);
      expect(out).toContain(`Dashboard: ${base}/`);
      // Honest about the demo model, and where a real one goes.
      expect(out).toContain("random weights");
      expect(out).toContain("it answers gibberish");
      expect(out).toContain(join(dataDir, "store", "<org>--<name>/"));
      const page = await fetch(`${base}/`);
      expect(page.status).toBe(200);
      expect(await page.text()).toContain("/dashboard/app.js");
      const logFile = join(dataDir, "node-1", "node.log");
      expect(out).toContain(logFile);
      // The node's own log lines are in the file the launcher printed.
      const first = readFileSync(logFile, "utf8").split("\n").find(Boolean)!;
      expect(JSON.parse(first)).toHaveProperty("level");
      const models = (await (await fetch(`${base}/v1/models`)).json()) as {
        data: { id: string }[];
      };
      expect(models.data.map((m) => m.id)).toContain("demo/tiny-llama");
      // No context configured: the instance gets the model's own (the demo model's is 2048).
      const placed = (await (await fetch(`${base}/state`)).json()) as {
        instances: { model_id: string; context_size?: number }[];
      };
      expect(placed.instances.find((i) => i.model_id === "demo/tiny-llama")?.context_size).toBe(
        2048,
      );
      // The documented defaults, not the test kit's fast ones.
      const diag = (await (await fetch(`${base}/v1/diagnostics/telemetry`)).json()) as {
        heartbeat_ms: number;
      };
      expect(diag.heartbeat_ms).toBe(2000);
      const config = readFileSync(join(dataDir, "node-1", "config.yaml"), "utf8");
      expect(config).not.toContain("restart_backoff_ms");
      expect(config).not.toContain("heartbeat_ms");
    } finally {
      child.kill("SIGINT");
    }
    expect(await exited).toBe(0);
    expect(output()).toContain("stopping the local cluster");
    // Nothing listens any more.
    await expect(fetch(`http://127.0.0.1:${port}/v1/ping`)).rejects.toThrow();
    expect(existsSync(join(dataDir, "cluster.secret"))).toBe(true);
  }, 200_000);

  it("started again on the same data dir, serves the demo deployment it kept instead of adding one", async () => {
    const { port, child, exited, ready } = await npmStartOn(dataDir);
    try {
      await ready();
      const s = (await (await fetch(`http://127.0.0.1:${port}/state`)).json()) as {
        deployments: { model_id: string }[];
        instances: { model_id: string }[];
      };
      expect(s.deployments.filter((d) => d.model_id === "demo/tiny-llama")).toHaveLength(1);
      expect(s.instances.filter((i) => i.model_id === "demo/tiny-llama")).toHaveLength(1);
    } finally {
      child.kill("SIGINT");
    }
    expect(await exited).toBe(0);
  }, 200_000);
});

/** Whether anything listens on the port (what a cluster left behind would hold). */
async function listening(port: number): Promise<boolean> {
  return fetch(`http://127.0.0.1:${port}/v1/ping`).then(
    () => true,
    () => false,
  );
}

describe("npm start stopped however it is stopped", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "ic-local-stop-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("a SIGTERM to npm's own process (a process manager, kill <pid>) stops the cluster", async () => {
    // npm itself, as the README runs it: its script hands the signal on to the launcher.
    const { port, child, output, ready } = await npmStartOn(dataDir, "npm");
    try {
      await ready();
      child.kill("SIGTERM");
      await waitFor(async () => ((await listening(port)) ? undefined : true), {
        timeoutMs: 30_000,
        what: `port ${port} to close after SIGTERM to npm; output:\n${output()}`,
      });
      expect(output()).toContain("stopping the local cluster");
    } finally {
      child.kill("SIGKILL");
    }
  }, 200_000);

  it("a launcher killed outright takes its nodes with it", async () => {
    const { port, child, exited, ready } = await npmStartOn(dataDir);
    await ready();
    child.kill("SIGKILL");
    await exited;
    await waitFor(async () => ((await listening(port)) ? undefined : true), {
      timeoutMs: 30_000,
      what: `the node on port ${port} to stop after its launcher was killed`,
    });
  }, 200_000);
});

describe("npm start -- --model org/repo:QUANT --config FILE", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "ic-local-model-"));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  it("pulls that quantization from the hub, places and serves it, and keeps the operator's keys", async () => {
    const repo = await tinyGgufRepo(["F16", "Q8_0"]);
    await using hub = await startHubEmulator();
    await hub.addRepo("acme/tiny-GGUF", repo.files);
    const configFile = join(dataDir, "my.yaml");
    writeFileSync(
      configFile,
      [
        "model_store:",
        `  hub_url: ${hub.url}`,
        "engine:",
        "  context_size: 1024",
        "  extra_args: ['--no-webui']",
        "node:",
        "  api_port: 1",
        "",
      ].join("\n"),
    );
    const port = await freePort();
    const args = ["--port", String(port), "--data-dir", dataDir];
    const { child, output, exited, ready } = await npmStart([
      ...args,
      "--model",
      "acme/tiny-GGUF:Q8_0",
      "--config",
      configFile,
    ]);
    try {
      await ready();
      const out = output();
      expect(out).toContain(
        "--config: ignoring node.api_port: the local-cluster launcher sets it for every node",
      );
      expect(out).toContain(`pulling acme/tiny-GGUF:Q8_0 from ${hub.url} into the store...`);
      expect(out).toContain(
        `Pulled acme/tiny-GGUF (Q8_0, the engine loads tiny-llama-Q8_0.gguf) from ${hub.url}.`,
      );
      expect(out).not.toContain("random weights");
      const base = `http://127.0.0.1:${port}`;
      const chat = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "acme/tiny-GGUF",
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 4,
        }),
      });
      expect(chat.status).toBe(200);
      // The configured context, capped by the model's (2048): 1024.
      const st = (await (await fetch(`${base}/state`)).json()) as {
        instances: { model_id: string; context_size?: number }[];
      };
      expect(st.instances.find((i) => i.model_id === "acme/tiny-GGUF")?.context_size).toBe(1024);
      // Only the chosen quantization crossed the wire.
      const ggufs = hub.requests
        .filter((r) => r.method === "GET" && r.path.includes(".gguf"))
        .map((r) => r.path.split("/").at(-1));
      expect(new Set(ggufs)).toEqual(new Set(["tiny-llama-Q8_0.gguf"]));
    } finally {
      child.kill("SIGINT");
    }
    expect(await exited).toBe(0);
    // The operator's keys are in the node's file for the next launch; the launcher's are its own.
    const kept = parseYaml(readFileSync(join(dataDir, "node-1", "config.yaml"), "utf8")) as {
      engine: { context_size: number; extra_args: string[] };
      model_store: { hub_url: string };
      node: { api_port: number };
    };
    expect(kept.engine).toMatchObject({ context_size: 1024, extra_args: ["--no-webui"] });
    expect(kept.model_store.hub_url).toBe(hub.url);
    expect(kept.node.api_port).toBe(port);
  }, 200_000);
});
