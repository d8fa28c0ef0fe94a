import { describe, expect, it } from "vitest";
import type { ModelId } from "@ic/protocol";
import { PullManager } from "./pulls.ts";
import type { PullTarget } from "./pulls.ts";
import type { HubDownloadResult } from "./pull-plan.ts";
import type { FillTotals } from "../transfer/fill.ts";

const id = (s: string) => s as ModelId;

/** A store host whose downloads the test finishes by hand. */
function scripted() {
  const calls: {
    modelId: ModelId;
    revision?: string | undefined;
    quant?: string | undefined;
    signal?: AbortSignal | undefined;
    selected: (s: { quant: string | null; servedFile: string | null }) => void;
    progress: (p: FillTotals) => void;
    settle: (r: HubDownloadResult) => void;
  }[] = [];
  const target: PullTarget = {
    downloadFromHub: (modelId, o) =>
      new Promise((resolve) => {
        calls.push({
          modelId,
          revision: o.revision,
          quant: o.quant,
          signal: o.signal,
          selected: o.onSelected ?? (() => {}),
          progress: o.onProgress ?? (() => {}),
          settle: resolve,
        });
        o.signal?.addEventListener("abort", () =>
          resolve({
            ok: false,
            type: "DownloadFailed",
            modelId,
            cause: "aborted",
            message: "aborted",
          }),
        );
      }),
  };
  return { target, calls };
}
const ok = (modelId: ModelId, total: number): HubDownloadResult => ({
  ok: true,
  manifest: {
    model_id: modelId,
    files: [],
    total_bytes: total,
    registered_at: "2026-11-24T00:00:00.000Z",
    source: "hub",
  } as never,
  fetchedBytes: total,
  resumedBytes: 0,
  reusedBytes: 0,
});
const tick = () => new Promise((r) => setTimeout(r, 0));
const progress = (doneBytes: number, totalBytes: number, filesDone = 0): FillTotals => ({
  doneBytes,
  totalBytes,
  filesDone,
  filesTotal: 2,
});

describe("PullManager", () => {
  it("runs one pull at a time, reports progress, and calls onDone when the model is in", async () => {
    const { target, calls } = scripted();
    const done: string[] = [];
    const m = new PullManager({ target, onDone: (x) => done.push(x) });
    expect(m.start(id("a/one")).pull.state).toBe("running");
    expect(m.start(id("a/two")).pull.state).toBe("queued");
    expect(calls.map((c) => c.modelId)).toEqual(["a/one"]);
    expect(m.list()[0]).toMatchObject({
      revision: "main",
      bytes_done: 0,
      bytes_total: null,
      files_done: 0,
      files_total: null,
    });
    calls[0]!.progress(progress(5, 10, 1));
    expect(m.list()[0]).toMatchObject({
      model_id: "a/one",
      state: "running",
      bytes_done: 5,
      bytes_total: 10,
      files_done: 1,
      files_total: 2,
    });
    // Asking again for a live pull returns it.
    expect(m.start(id("a/one")).created).toBe(false);
    calls[0]!.settle(ok(id("a/one"), 10));
    await tick();
    expect(done).toEqual(["a/one"]);
    expect(calls.map((c) => c.modelId)).toEqual(["a/one", "a/two"]);
    expect(m.list().map((p) => [p.model_id, p.state])).toEqual([
      ["a/two", "running"],
      ["a/one", "done"],
    ]);
  });

  it("cancels a running pull (aborting its download) and a queued one; asking again resumes", async () => {
    const { target, calls } = scripted();
    const m = new PullManager({ target });
    m.start(id("a/one"));
    m.start(id("a/two"));
    calls[0]!.progress(progress(4, 10));
    expect(m.cancel(id("a/two"))).toMatchObject({ pull: { state: "cancelled" }, dismissed: false });
    expect(m.cancel(id("a/one"))?.pull.state).toBe("cancelled");
    expect(calls[0]!.signal?.aborted).toBe(true);
    await tick();
    // The queued one never started.
    expect(calls).toHaveLength(1);
    expect(m.cancel(id("a/none"))).toBeUndefined();
    const again = m.start(id("a/one"));
    expect(again).toMatchObject({ created: true, pull: { state: "running", bytes_done: 4 } });
    expect(calls).toHaveLength(2);
    // Cancelling a finished pull (cancelled, failed, done) dismisses it from the list.
    expect(m.cancel(id("a/two"))).toMatchObject({ pull: { state: "cancelled" }, dismissed: true });
    expect(m.list().map((p) => p.model_id)).toEqual(["a/one"]);
    calls[1]!.settle(ok(id("a/one"), 10));
    await tick();
    expect(m.cancel(id("a/one"))).toMatchObject({ pull: { state: "done" }, dismissed: true });
    expect(m.list()).toEqual([]);
    expect(m.cancel(id("a/one"))).toBeUndefined();
  });

  it("pulls the quantization asked for and shows the one chosen; a live pull keeps its own", async () => {
    const { target, calls } = scripted();
    const m = new PullManager({ target });
    expect(m.start(id("a/one"), undefined, "q8_0").pull).toMatchObject({ quant: "q8_0" });
    expect(calls[0]!.quant).toBe("q8_0");
    calls[0]!.selected({ quant: "Q8_0", servedFile: "one-Q8_0.gguf" });
    expect(m.list()[0]).toMatchObject({ quant: "Q8_0", served_file: "one-Q8_0.gguf" });
    expect(m.start(id("a/one"), undefined, "Q8_0").created).toBe(false);
    expect(m.start(id("a/one")).created).toBe(false);
    expect(() => m.start(id("a/one"), undefined, "F16")).toThrow(
      expect.objectContaining({ code: "conflict" }),
    );
    // Without a selector the store host chooses; the pull says which once listed.
    m.start(id("a/two"));
    calls[0]!.settle(ok(id("a/one"), 10));
    await tick();
    expect(calls[1]!.quant).toBeUndefined();
    calls[1]!.selected({ quant: "Q4_K_M", servedFile: "two-Q4_K_M.gguf" });
    expect(m.list()[0]).toMatchObject({ model_id: "a/two", quant: "Q4_K_M" });
  });

  it("pulls the revision asked for; a live pull is not restarted at another one", async () => {
    const { target, calls } = scripted();
    const m = new PullManager({ target });
    const first = m.start(id("a/one"), "v1.0");
    expect(first.pull.revision).toBe("v1.0");
    expect(calls[0]!.revision).toBe("v1.0");
    expect(m.start(id("a/one"), "v1.0").created).toBe(false);
    expect(m.start(id("a/one")).created).toBe(false);
    expect(() => m.start(id("a/one"), "main")).toThrow(
      expect.objectContaining({ code: "conflict" }),
    );
    calls[0]!.progress(progress(4, 10));
    m.cancel(id("a/one"));
    await tick();
    // Posting again with no revision resumes at the cancelled pull's one.
    expect(m.start(id("a/one")).pull).toMatchObject({ revision: "v1.0", bytes_done: 4 });
    expect(calls[1]!.revision).toBe("v1.0");
    m.cancel(id("a/one"));
    await tick();
    // Another revision after a cancel starts its count afresh (the fill plan keeps what matches).
    expect(m.start(id("a/one"), "main").pull).toMatchObject({
      revision: "main",
      bytes_done: 0,
      bytes_total: null,
    });
    expect(calls[2]!.revision).toBe("main");
  });

  it("refuses new pulls once stopped, and stopping aborts the running one", async () => {
    const { target, calls } = scripted();
    const m = new PullManager({ target });
    m.start(id("a/one"));
    m.start(id("a/two"));
    m.stop();
    expect(calls[0]!.signal?.aborted).toBe(true);
    await tick();
    expect(m.list().map((p) => p.state)).toEqual(["cancelled", "cancelled"]);
    expect(() => m.start(id("a/three"))).toThrow(expect.objectContaining({ code: "unavailable" }));
  });

  it("a refused download (no fit) is a failed pull with its cause and message", async () => {
    const { target, calls } = scripted();
    const m = new PullManager({ target });
    m.start(id("a/big"));
    calls[0]!.settle({
      ok: false,
      type: "DownloadFailed",
      modelId: id("a/big"),
      cause: "no_fit",
      message: "needs 40 GiB plus the 10 GiB reserve",
    });
    await tick();
    expect(m.list()[0]).toMatchObject({
      state: "failed",
      error: { code: "no_fit", message: "needs 40 GiB plus the 10 GiB reserve" },
    });
  });
});

describe("companions", () => {
  it("a finished pull whose model names a drafter or sidecar the store lacks pulls it next", async () => {
    const { target, calls } = scripted();
    const asked: ModelId[] = [];
    const m = new PullManager({
      target,
      missingCompanions: async (model) => {
        asked.push(model);
        return model === "a/main" ? [id("a/drafter"), id("a/sidecar")] : [];
      },
    });
    m.start(id("a/main"));
    calls[0]!.settle(ok(id("a/main"), 10));
    await tick();
    await tick();
    expect(asked).toEqual(["a/main"]);
    expect(m.list().map((p) => [p.model_id, p.state])).toEqual([
      ["a/drafter", "running"],
      ["a/sidecar", "queued"],
      ["a/main", "done"],
    ]);
    // A failed pull brings nothing along.
    calls[1]!.settle({
      ok: false,
      type: "DownloadFailed",
      modelId: id("a/drafter"),
      cause: "hub_error",
      message: "gone",
    });
    await tick();
    expect(asked).toEqual(["a/main"]);
  });
});
