// The node agent's runner side: turns the instances assigned to this node into supervised
// llama.cpp processes, reports their states to the master, and tears down what is no longer wanted.
// Invariants: one supervisor per (instance, rank) on this node; reconciliation only runs against a
// synced replica; rank 0 of a multi-node instance starts only once every other rank is ready.
import { runnerKey, sleep } from "@ic/protocol";
import type {
  ControlState,
  Gpu,
  HealthEntry,
  EngineInfo,
  Instance,
  ModelRecord,
  ModelId,
  RunnerState,
} from "@ic/protocol";
import type { Logger } from "@ic/log";
import { freeTcpPort } from "./net.ts";
import { rpcArgs, serverArgs } from "./args.ts";
import { RunnerSupervisor } from "./runner.ts";
import type { RunnerSpec, RunnerStatus } from "./runner.ts";
import type { EngineSettings } from "./args.ts";
import type { ClusterPort, StagedModel, Stager, StagingProgress } from "./ports.ts";
import { planRunners, remoteEndpoints } from "./plan.ts";
import { applyStatus, runnerContext, runnerOf, slotHealth, stagingStart } from "./slot.ts";
import type { Slot, SlotStatus } from "./slot.ts";
import type { RunnerAction, SlotView } from "./plan.ts";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { RunnerView } from "./metrics.ts";
import { slotDirFor } from "./kv-move.ts";

export interface WorkerOptions {
  readonly cluster: ClusterPort;
  readonly stager: Stager;
  readonly log: Logger;
  readonly engine: () => EngineInfo;
  /** This node's GPUs as telemetry last read them (free VRAM divides a rank among its GPUs). */
  readonly gpus?: () => readonly Gpu[];
  /** Address engines listen on: the node's own address (an IP), never 0.0.0.0. */
  readonly host: string;
  /** Address in runner endpoints (the node's advertised `node.host`); defaults to `host`. */
  readonly advertiseHost?: string;
  /**
   * The API key this node's llama-servers start with (made at the node's start; gateways learn it
   * from its heartbeats, and only they talk to engines).
   */
  readonly engineKey?: string;
  /**
   * llama-server serves HTTPS with the node's certificate (the engine's probe found it can): its
   * endpoint is `https://`, and only clients that trust the cluster CA talk to it. Absent: HTTP.
   */
  readonly engineTls?: { readonly certFile: string; readonly keyFile: string } | undefined;
  /**
   * The config's `engine` section, whole: runner log dir, context size (unset: the model's own, as
   * placement chose it per instance), GPU layers, warm-up deadline, restart back-off, niceness, port
   * base, extra arguments (args.ts reads the flags it turns into arguments).
   */
  readonly settings: EngineSettings;
}

/** Minimum interval between two staging progress reports of one runner. */
export const PROGRESS_REPORT_INTERVAL_MS = 1000;

export class Worker implements AsyncDisposable {
  private readonly slots = new Map<string, Slot>();
  private unlisten: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private reconciling = false;
  private again = false;
  private readonly log: Logger;

  constructor(private readonly o: WorkerOptions) {
    this.log = o.log.child({ component: "worker" });
  }

  start(): void {
    // Task events (two per chat request) never change what runs here: skip them on the hot path.
    this.unlisten = this.o.cluster.on({
      event: (ev) => {
        if (!ev.event.type.startsWith("Task")) this.kick();
      },
      snapshot: () => this.kick(),
    });
    // Periodic pass: re-reports states after a session change and retries what failed to start.
    this.timer = setInterval(() => this.kick(), 1000);
  }

  /** Local runners for the heartbeat. */
  runners(): {
    instance_id: Instance["instance_id"];
    rank: number;
    state: RunnerState;
    endpoint?: string;
  }[] {
    return [...this.slots.values()].map((s) => ({
      instance_id: s.instance.instance_id,
      rank: s.rank,
      state: s.state,
      ...(s.endpoint ? { endpoint: s.endpoint } : {}),
    }));
  }

  /** Local runners as their metrics see them: restarts, warm-up start, staging progress. */
  runnerViews(): RunnerView[] {
    return [...this.slots.values()].map((s) => ({
      instance_id: s.instance.instance_id,
      model_id: s.instance.model_id,
      rank: s.rank,
      state: s.state,
      restarts: s.restarts,
      ...(s.state === "RunnerStaging" && s.progress ? { progress: s.progress } : {}),
      ...(s.state === "RunnerWarmingUp" && s.warmupStartedAt !== undefined
        ? { warmup_started_at: s.warmupStartedAt }
        : {}),
    }));
  }

  supervisorFor(instanceId: string, rank: number): RunnerSupervisor | undefined {
    return this.slots.get(runnerKey(instanceId, rank))?.supervisor;
  }

  /**
   * The local engine of an instance (rank 0, ready) that saves and restores slots (kv-move.ts):
   * its endpoint, its slot directory, its model and the size of the model file it loaded.
   */
  kvEngine(
    instanceId: string,
  ): { endpoint: string; dir: string; modelId: ModelId; modelBytes: number } | undefined {
    const slot = this.slots.get(runnerKey(instanceId, 0));
    if (!slot?.kv || slot.state !== "RunnerReady" || !slot.endpoint) return undefined;
    const { dir, modelBytes } = slot.kv;
    return { endpoint: slot.endpoint, dir, modelId: slot.instance.model_id, modelBytes };
  }

  private kick(): void {
    if (this.stopped) return;
    if (this.reconciling) {
      this.again = true;
      return;
    }
    this.reconciling = true;
    this.reconcile()
      .catch((e: unknown) => this.log.error({ err: e }, "reconcile failed"))
      .finally(() => {
        this.reconciling = false;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  private async reconcile(): Promise<void> {
    const c = this.o.cluster;
    if (!c.synced) return;
    const state = c.snapshot();
    const views = new Map<string, SlotView>();
    for (const [key, s] of this.slots)
      views.set(key, {
        instance: s.instance,
        rank: s.rank,
        supervised: s.supervisor !== undefined,
        state: s.state,
        rpc: s.rpc,
      });
    for (const action of planRunners(state, c.peerKey, views)) await this.perform(state, action);
    // The plan's teardowns removed every runner not assigned here: what is left is the assignment.
    for (const slot of this.slots.values()) this.reportIfStale(state, slot);
    this.publishInUse();
  }

  /** Carries out one action of the plan (plan.ts) on this node's runners. */
  private async perform(state: ControlState, a: RunnerAction): Promise<void> {
    if (a.kind === "create") {
      const slot: Slot = {
        key: a.key,
        instance: a.instance,
        rank: a.rank,
        abort: new AbortController(),
        state: "RunnerStaging",
        restarts: 0,
        progressReportedAt: 0,
      };
      const model = state.models[a.instance.model_id];
      if (a.rank === 0 && model) slot.progress = stagingStart(model.bytes, Date.now());
      this.slots.set(a.key, slot);
      void this.launch(slot);
      return;
    }
    const slot = this.slots.get(a.key);
    if (!slot) return;
    switch (a.kind) {
      case "teardown":
        await this.teardown(slot, "instance no longer assigned here");
        return;
      case "await-remote": {
        this.log.warn(
          { instance: slot.instance.instance_id },
          "a remote rank is not ready; stopping rank 0 until it is",
        );
        const sup = slot.supervisor;
        slot.supervisor = undefined;
        slot.rpc = undefined;
        await sup?.stop();
        this.update(slot, {
          state: "RunnerWarmingUp",
          reason: "waiting for remote ranks",
          restarts: slot.restarts,
        });
        return;
      }
      case "reconnect":
        this.log.warn(
          { instance: slot.instance.instance_id },
          "remote rank endpoints changed; restarting rank 0",
        );
        await slot.supervisor?.stop();
        slot.supervisor = undefined;
        slot.state = "RunnerWarmingUp";
        void this.launch(slot);
        return;
      case "relaunch":
        void this.launch(slot);
        return;
    }
  }

  /** Tells staging which models live runners here use (and their companions); eviction reads it. */
  private publishInUse(): void {
    const state = this.o.cluster.snapshot();
    const live = new Set<ModelId>();
    const companions = new Set<ModelId>();
    for (const s of this.slots.values()) {
      live.add(s.instance.model_id);
      const m = state.models[s.instance.model_id];
      if (m?.drafter) companions.add(m.drafter);
      if (m?.mtp_sidecar) companions.add(m.mtp_sidecar);
    }
    this.o.stager.setInUse([...live], [...companions]);
  }

  /** Free bytes of each local GPU the engine serves on; one unmeasured device when none is listed. */
  private localGpus(engine: EngineInfo): number[] {
    if (engine.backend !== "cuda" && engine.backend !== "metal") return [];
    const gpus = this.o.gpus?.() ?? [];
    return gpus.length > 0 ? gpus.map((g) => g.vram_free_bytes ?? g.vram_total_bytes ?? 0) : [1];
  }

  /** This node's runners that fail, as nodeHealth entries (slot.ts). */
  health(): HealthEntry[] {
    return slotHealth(this.slots.values());
  }

  private launching = new Set<string>();

  private async launch(slot: Slot): Promise<void> {
    if (this.launching.has(slot.key)) return;
    this.launching.add(slot.key);
    try {
      await this.launchInner(slot);
    } catch (e) {
      if (slot.abort.signal.aborted) return;
      const reason = e instanceof Error ? e.message : String(e);
      this.log.error(
        { instance: slot.instance.instance_id, rank: slot.rank, reason },
        "runner could not start",
      );
      this.update(slot, { state: "RunnerFailed", reason, restarts: slot.restarts });
    } finally {
      this.launching.delete(slot.key);
    }
  }

  private async launchInner(slot: Slot): Promise<void> {
    const inst = slot.instance;
    const engine = this.o.engine();
    if (!engine.usable) throw new Error(`engine unusable: ${engine.problem ?? "unknown"}`);
    const port =
      this.o.settings.port_base > 0
        ? this.o.settings.port_base + this.slots.size
        : await freeTcpPort(this.o.host);
    const logFile = join(
      this.o.settings.runner_log_dir,
      `${inst.instance_id}-rank${slot.rank}.log`,
    );
    const common = {
      instanceId: inst.instance_id,
      modelId: inst.model_id,
      rank: slot.rank,
      host: this.o.host,
      advertiseHost: this.o.advertiseHost ?? this.o.host,
      port,
      warmupDeadlineMs: this.o.settings.warmup_deadline_seconds * 1000,
      restartBackoffMs: this.o.settings.restart_backoff_ms,
      healthyUptimeMs: this.o.settings.healthy_uptime_ms,
      maxCrashes: 5,
      logFile,
      niceness: this.o.settings.niceness,
    };
    let sup: RunnerSupervisor;
    if (slot.rank > 0) {
      if (!engine.rpc_bin) throw new Error("no ggml-rpc-server binary");
      sup = new RunnerSupervisor(
        {
          ...common,
          role: "rpc",
          bin: engine.rpc_bin,
          args: rpcArgs(this.o.host, port, this.o.settings.threads),
        },
        this.log,
        (s) => this.onStatus(slot, s),
      );
    } else {
      const server = await this.prepareServer(slot, engine, port, common);
      if (!server) return;
      sup = server;
    }
    if (slot.abort.signal.aborted) return;
    slot.supervisor = sup;
    sup.start();
  }

  /**
   * Rank 0's engine: stage its model (and drafter), wait for the remote ranks of a multi-node
   * instance (undefined until they are all ready; reconcile launches again then), and build the
   * llama-server command.
   */
  private async prepareServer(
    slot: Slot,
    engine: EngineInfo,
    port: number,
    common: Omit<RunnerSpec, "role" | "bin" | "args" | "env" | "tls">,
  ): Promise<RunnerSupervisor | undefined> {
    const c = this.o.cluster;
    const state = c.snapshot();
    const inst = slot.instance;
    const model = state.models[inst.model_id];
    if (!model) throw new Error(`model ${inst.model_id} is not registered`);
    slot.progress = stagingStart(model.bytes, Date.now());
    this.update(slot, { state: "RunnerStaging", restarts: slot.restarts });
    const staged = await this.stageUntilDone(slot, model);
    const drafterRecord = model.drafter ? state.models[model.drafter] : undefined;
    const drafter = drafterRecord
      ? await this.o.stager.stage(drafterRecord, slot.abort.signal)
      : undefined;
    let rpc: string[] = [];
    if (inst.assignments.length > 1) {
      const eps = remoteEndpoints(c.snapshot(), inst);
      if (!eps) {
        // Wait for the other ranks; reconcile launches again when they report ready.
        slot.rpc = undefined;
        this.update(slot, {
          state: "RunnerWarmingUp",
          reason: "waiting for remote ranks",
          restarts: slot.restarts,
        });
        return;
      }
      rpc = eps;
    }
    slot.rpc = rpc.join(",");
    // Where the engine's probe found it moves KV caches between servers: a slot directory.
    slot.kv = engine.slot_restore?.supported
      ? await slotDirFor(this.o.settings.runner_log_dir, inst.instance_id, staged.modelPath)
      : undefined;
    const bin = engine.server_bin!;
    const args = serverArgs({
      instance: inst,
      modelPath: staged.modelPath,
      drafterPath: drafter?.modelPath,
      mmprojPath: staged.mmprojPath,
      pooling: model.pooling,
      host: this.o.host,
      port,
      contextSize: runnerContext(
        inst.context_size,
        this.o.settings.context_size,
        model.context_length,
      ),
      engine: this.o.settings,
      totalLayers: model.layers,
      rpcEndpoints: rpc,
      localGpus: this.localGpus(engine),
      // The established row split where the engine runs it over rpc; the experimental tensor
      // mode only where the probe found it working and the operator allowed it.
      tensorMode: engine.split?.row_over_rpc ? "row" : "tensor",
      tls: this.o.engineTls,
      slotDir: slot.kv?.dir,
    });
    // The key goes in the environment (LLAMA_API_KEY), not argv, which `ps` shows to everyone.
    const env: Record<string, string> = this.o.engineKey ? { LLAMA_API_KEY: this.o.engineKey } : {};
    const tls = this.o.engineTls !== undefined;
    return new RunnerSupervisor({ ...common, role: "server", bin, args, env, tls }, this.log, (s) =>
      this.onStatus(slot, s),
    );
  }

  /**
   * Stages the model, retrying a failed transfer (the store host gone, a link cut, no disk fit yet)
   * with jittered backoff from 1 s doubling to 30 s, until it succeeds or the runner is stopped. The
   * partial copy is kept, so each attempt resumes; the runner stays RunnerStaging with the last
   * failure and the next attempt in its reason. Giving up here would leave the deployment Placed on
   * an instance that never serves (the intent silently lost). Each attempt takes the model's record
   * as the cluster has it then: the store host may have moved meanwhile (a node restarted on another
   * address registers its models again there), and the record first read may name where it was.
   */
  private async stageUntilDone(slot: Slot, first: ModelRecord): Promise<StagedModel> {
    for (let attempt = 1; ; attempt++) {
      const model =
        attempt === 1 ? first : (this.o.cluster.snapshot().models[first.model_id] ?? first);
      try {
        return await this.o.stager.stage(model, slot.abort.signal, (p) =>
          this.onStagingProgress(slot, p),
        );
      } catch (e) {
        if (slot.abort.signal.aborted) throw e;
        const delayMs = Math.round(
          Math.min(30_000, 1000 * 2 ** (attempt - 1)) * (0.8 + Math.random() * 0.4),
        );
        const why = e instanceof Error ? e.message : String(e);
        this.log.warn(
          { instance: slot.instance.instance_id, model: model.model_id, attempt, delayMs, why },
          "staging failed; retrying",
        );
        this.update(slot, {
          state: "RunnerStaging",
          reason: `staging attempt ${attempt} failed (${why}); retrying in ${Math.ceil(delayMs / 1000)} s`,
          restarts: slot.restarts,
        });
        await sleep(delayMs, slot.abort.signal);
      }
    }
  }

  /** Records staging progress; reports it at most once per PROGRESS_REPORT_INTERVAL_MS. */
  private onStagingProgress(slot: Slot, p: StagingProgress): void {
    if (slot.state !== "RunnerStaging" || !slot.progress) return;
    slot.progress = { ...slot.progress, staged_bytes: p.doneBytes, total_bytes: p.totalBytes };
    const now = Date.now();
    if (now - slot.progressReportedAt < PROGRESS_REPORT_INTERVAL_MS) return;
    slot.progressReportedAt = now;
    this.report(slot);
  }

  private onStatus(slot: Slot, s: RunnerStatus): void {
    if (this.stopped && s.state === "RunnerStopped") return;
    this.update(slot, s);
  }

  private update(slot: Slot, s: SlotStatus): void {
    applyStatus(slot, s, Date.now());
    this.report(slot);
  }

  private report(slot: Slot): void {
    const nodeId = this.o.cluster.nodeId;
    if (!nodeId || !this.o.cluster.synced) return;
    const runner = runnerOf(slot, nodeId, Date.now());
    this.o.cluster.command({ type: "ReportRunner", runner }).catch((e: unknown) => {
      this.log.debug({ err: e }, "runner report not delivered; the periodic pass retries");
    });
  }

  /** Re-reports when the replica disagrees with the local truth (lost report, new session). */
  private reportIfStale(state: ControlState, slot: Slot): void {
    const r = state.runners[slot.key];
    const nodeId = this.o.cluster.nodeId;
    if (
      !r ||
      r.state !== slot.state ||
      r.endpoint !== slot.endpoint ||
      r.restarts !== slot.restarts ||
      r.node_id !== nodeId
    ) {
      this.report(slot);
    }
  }

  private async teardown(slot: Slot, why: string): Promise<void> {
    this.log.info({ instance: slot.instance.instance_id, rank: slot.rank, why }, "stopping runner");
    slot.abort.abort();
    this.slots.delete(slot.key);
    await slot.supervisor?.stop();
    if (slot.kv) await rm(slot.kv.dir, { recursive: true, force: true }).catch(() => undefined);
    // The process is gone: its model is no longer in use, so the deactivation pass may evict it.
    this.publishInUse();
    if (slot.rank === 0 && !this.stopped) {
      await this.o.stager
        .released(slot.instance.model_id)
        .catch((e: unknown) => this.log.warn({ err: e }, "deactivation eviction failed"));
    }
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    this.unlisten?.();
    await Promise.all([...this.slots.values()].map((s) => this.teardown(s, "node stopping")));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
