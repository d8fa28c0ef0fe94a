// Registers the store host's models with the master once per session and after each change, one
// model at a time, so one refusal never holds the others; it sends only served models, never hashes.
//
// Invariants: passes never overlap (each schedules the next when it ends); a model the master
// refuses is reported (store_model_refused) and logged at warn once per distinct refusal, then asked
// again only after the store changes or `retryRefusedMs`; a transient failure (no master yet, the
// session changed) ends the pass and is retried at the next one.
import { basename, dirname } from "node:path";
import type { Logger } from "@ic/log";
import { ServiceError, type ClusterView, type ModelId, type StoreManifest } from "@ic/protocol";
import { isErrno } from "../paths.ts";
import { errText } from "../transfer/transfer.ts";
import { readModelDir } from "./registry.ts";
import type { StoreHost } from "./store-host.ts";

export interface RegistrationOptions {
  readonly cluster: Pick<ClusterView, "command" | "sessionId" | "synced" | "nodeId">;
  readonly host: Pick<StoreHost, "models" | "modelPath">;
  /** This node's API URL, which registered models name as their store. */
  readonly apiUrl: string;
  readonly log: Logger;
  /** Bumped when the store's models change: everything is sent again. */
  readonly version: () => number;
  /** Pause between passes (default 500 ms). */
  readonly everyMs?: number | undefined;
  /** A refused model is asked again after this long even when nothing changed (default 30 s). */
  readonly retryRefusedMs?: number | undefined;
  readonly now?: () => number;
}

type Outcome = "ok" | "skip" | "transient" | { readonly refused: string };

export class Registration {
  /** `session/version` the `done` set is for. */
  private due = "";
  private readonly done = new Set<ModelId>();
  private readonly refused = new Map<ModelId, { words: string; nextMs: number }>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly o: RegistrationOptions) {}

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Served models the store host could not register, with the reason (the master's words). */
  refusals(): Map<ModelId, string> {
    return new Map([...this.refused].map(([id, r]) => [id, r.words]));
  }

  /** One pass: sends RegisterModel for each served model not yet registered for this session. */
  async pass(): Promise<void> {
    const { cluster, log } = this.o;
    if (!cluster.synced) return;
    const due = `${cluster.sessionId}/${this.o.version()}`;
    if (due !== this.due) {
      this.due = due;
      this.done.clear();
      for (const r of this.refused.values()) r.nextMs = 0;
    }
    const now = (this.o.now ?? Date.now)();
    const models = this.o.host.models();
    const sent: ModelId[] = [];
    for (const manifest of models) {
      const id = manifest.model_id;
      const before = this.refused.get(id);
      if (this.done.has(id) || (before && now < before.nextMs)) continue;
      const outcome = await this.registerOne(manifest);
      if (outcome === "transient") break;
      if (typeof outcome === "object") {
        this.refused.set(id, {
          words: outcome.refused,
          nextMs: now + (this.o.retryRefusedMs ?? 30_000),
        });
        if (before?.words !== outcome.refused)
          log.warn({ modelId: id, reason: outcome.refused }, "store model not registered");
        continue;
      }
      this.done.add(id);
      if (outcome === "ok") sent.push(id);
      if (before) {
        this.refused.delete(id);
        log.info({ modelId: id }, "store model registered after a refusal");
      }
    }
    const served = new Set(models.map((m) => m.model_id));
    for (const id of this.refused.keys()) if (!served.has(id)) this.refused.delete(id);
    if (sent.length > 0) log.info({ models: sent }, "registered store models");
  }

  private async registerOne(manifest: StoreManifest): Promise<Outcome> {
    const { cluster, log } = this.o;
    const dir = this.o.host.modelPath(manifest.model_id);
    let rec;
    try {
      rec = await readModelDir(dirname(dir), basename(dir), log);
    } catch (e) {
      // Its directory went since (the watch forgets it at its next scan).
      if (isErrno(e, "ENOENT")) return "skip";
      return { refused: `its GGUF header cannot be read: ${errText(e)}` };
    }
    if (!rec) return "skip";
    try {
      await cluster.command({
        type: "RegisterModel",
        model: {
          ...rec,
          bytes: manifest.total_bytes,
          registered_by: cluster.nodeId!,
          store_url: this.o.apiUrl,
        },
      });
      return "ok";
    } catch (e) {
      if (e instanceof ServiceError && e.retryable) {
        log.debug({ err: e, modelId: manifest.model_id }, "model registration retry");
        return "transient";
      }
      return { refused: `the master refused it: ${errText(e)}` };
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.pass()
        .catch((e: unknown) => this.o.log.warn({ err: e }, "store model registration failed"))
        .finally(() => {
          this.running = undefined;
          this.schedule(this.o.everyMs ?? 500);
        });
    }, ms);
  }
}
