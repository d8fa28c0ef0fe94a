import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { RunnerLogReplySchema } from "@ic/protocol";
import type { RunnerLogRequest } from "@ic/protocol";
import { readRunnerLog, runnerLogPath } from "./runner-logs.ts";

function logDir() {
  const root = mkdtempSync(join(tmpdir(), "ic-runner-logs-"));
  const dir = join(root, "runners");
  mkdirSync(dir);
  return { root, dir, src: { peerKey: "p-a", name: "node-a", runnerLogDir: dir } };
}

const req = (over: Partial<RunnerLogRequest> = {}): RunnerLogRequest => ({
  instance_id: "i-1",
  rank: 0,
  tail: 200,
  max_bytes: 128 * 1024,
  ...over,
});

describe("runnerLogPath", () => {
  it.each([
    ["i-1", 0, true],
    ["i-0f3a_b", 12, true],
    ["..", 0, false],
    ["../etc/passwd", 0, false],
    ["a/b", 0, false],
    ["a.b", 0, false],
    ["", 0, false],
    ["-x", 0, false],
    ["i-1", -1, false],
    ["i-1", 1.5, false],
  ])("%s rank %s stays in the log dir: %s", (id, rank, ok) => {
    const p = runnerLogPath("/var/log/runners", id, rank);
    if (ok) expect(p).toBe(`/var/log/runners/${id}-rank${rank}.log`);
    else expect(p).toBeNull();
  });
});

describe("readRunnerLog", () => {
  it("returns the last lines of the rank's file with its size", async () => {
    const { dir, src } = logDir();
    const lines = Array.from({ length: 500 }, (_, i) => `line ${i}`);
    writeFileSync(join(dir, "i-1-rank0.log"), `${lines.join("\n")}\n`);
    const r = RunnerLogReplySchema.parse(await readRunnerLog(src, req({ tail: 3 })));
    expect(r).toMatchObject({ ok: true, peer_key: "p-a", name: "node-a", truncated: true });
    expect(r.lines).toEqual(["line 497", "line 498", "line 499"]);
    expect(r.file).toBe(join(dir, "i-1-rank0.log"));
    expect(r.size_bytes).toBeGreaterThan(4000);
    const all = await readRunnerLog(src, req({ tail: 5000 }));
    expect(all.lines).toHaveLength(500);
    expect(all.truncated).toBe(false);
  });

  it("reads at most max_bytes of the end and drops the line the window cut", async () => {
    const { dir, src } = logDir();
    writeFileSync(join(dir, "i-1-rank1.log"), "aaaaaaaaaa\nbbbbbbbbbb\ncccccccccc\n");
    const r = await readRunnerLog(src, req({ rank: 1, max_bytes: 15 }));
    expect(r.lines).toEqual(["cccccccccc"]);
    expect(r.truncated).toBe(true);
  });

  it("answers not_found for a rank without a log yet, and never follows a symlink out of the dir", async () => {
    const { root, dir, src } = logDir();
    const missing = await readRunnerLog(src, req({ instance_id: "i-none" }));
    expect(missing).toMatchObject({ ok: false, error: { code: "not_found" } });
    writeFileSync(join(root, "secret.txt"), "top secret\n");
    symlinkSync(join(root, "secret.txt"), join(dir, "i-evil-rank0.log"));
    const evil = await readRunnerLog(src, req({ instance_id: "i-evil" }));
    expect(evil).toMatchObject({ ok: false, error: { code: "not_found" } });
    expect(evil.lines).toEqual([]);
  });

  it("refuses an id that is not a log file name (the bus edge checks it too)", async () => {
    const { src } = logDir();
    const r = await readRunnerLog(src, req({ instance_id: "../x" }));
    expect(r).toMatchObject({ ok: false, error: { code: "invalid_request" } });
  });

  it("uses the worker's own file for a rank it runs when it is the same path", async () => {
    const { dir, src } = logDir();
    writeFileSync(join(dir, "i-1-rank0.log"), "from the worker\n");
    const r = await readRunnerLog(
      { ...src, logFileOf: () => join(dir, "..", "runners", "i-1-rank0.log") },
      req(),
    );
    expect(r.lines).toEqual(["from the worker"]);
    // A worker path elsewhere is ignored: the file inside the dir is read.
    const other = await readRunnerLog({ ...src, logFileOf: () => "/etc/passwd" }, req());
    expect(other.file).toBe(join(dir, "i-1-rank0.log"));
  });
});
