// The operator's intent (deployments, registered models) in a NATS JetStream key-value bucket inside
// the nats-server every node already runs: file storage, replicated on up to three nodes, a write
// acknowledged only once a quorum of the replicas holds it. A side of a partition without that
// quorum cannot write (`no_quorum`, retryable), so nothing a client was told succeeded is lost at a
// heal. Values are validated when read (the store is an edge like the bus).
import { StorageType } from "nats";
import type { JetStreamClient, KV, NatsConnection } from "nats";
import { DeploymentIntentSchema, ModelRecordSchema, ServiceError } from "@ic/protocol";
import type { DeploymentIntent, Intent, IntentStore, IntentWrite, ModelRecord } from "@ic/protocol";
import type { Logger } from "@ic/log";

export const INTENT_BUCKET = "ic-intent";
const INITIALIZED = "meta.initialized";
const MAX_REPLICAS = 3;

export interface IntentStoreOptions {
  /**
   * Bound of every JetStream call (default 1.5 s): a side without quorum fails within it, and a
   * master restoring after a full restart asks again soon after JetStream has elected its leaders.
   */
  readonly timeoutMs?: number;
  /**
   * Replicas of the bucket, fixed when it is created: min(3, the configured number of nodes). It is
   * never scaled afterwards (nats-server 2.9 lost a stream scaled from one replica to more across a
   * restart: docs/decisions.md), so a new cluster creates it once enough of its nodes are up.
   */
  readonly replicas?: number;
}

const deploymentKey = (id: string) => `deployment.${id}`;
/** Model ids may end in '.', which a key may not: hex keeps any id a valid key. */
const modelKey = (id: string) => `model.${Buffer.from(id).toString("hex")}`;

export class JetStreamIntentStore implements IntentStore {
  private kv: KV | undefined;
  private readonly js: JetStreamClient;
  private readonly timeoutMs: number;
  /** Whether this store is known to be marked initialized (read or written once). */
  private initialized = false;

  constructor(
    nc: NatsConnection,
    private readonly log: Logger,
    private readonly o: IntentStoreOptions = {},
  ) {
    this.timeoutMs = o.timeoutMs ?? 1500;
    this.js = nc.jetstream({ timeout: this.timeoutMs });
  }

  /**
   * Opens the bucket, creating it only when JetStream answers that it does not exist (never while
   * JetStream cannot answer: a store not recovered yet must not be replaced by an empty one). Reads
   * go through the stream's leader (no direct gets from a replica that may lag).
   */
  private async bucket(): Promise<KV> {
    if (this.kv) return this.kv;
    this.kv = await guarded("open the intent store", () =>
      this.js.views.kv(INTENT_BUCKET, {
        history: 1,
        replicas: Math.min(MAX_REPLICAS, Math.max(1, this.o.replicas ?? 1)),
        storage: StorageType.File,
        max_bytes: 64 * 1024 * 1024,
        maxValueSize: 256 * 1024,
        allow_direct: false,
        timeout: this.timeoutMs,
      }),
    );
    return this.kv;
  }

  async load(): Promise<Intent> {
    const kv = await this.bucket();
    return guarded("read the intent store", async () => {
      const keys: string[] = [];
      for await (const k of await kv.keys()) keys.push(k);
      const deployments: DeploymentIntent[] = [];
      const models: ModelRecord[] = [];
      let initialized = false;
      for (const key of keys.sort()) {
        const e = await kv.get(key);
        if (!e || e.operation !== "PUT") continue;
        if (key === INITIALIZED) {
          initialized = true;
          continue;
        }
        const schema = key.startsWith("deployment.")
          ? DeploymentIntentSchema
          : key.startsWith("model.")
            ? ModelRecordSchema
            : undefined;
        let value: unknown;
        try {
          value = schema ? JSON.parse(e.string()) : undefined;
        } catch {
          value = undefined;
        }
        const parsed = schema?.safeParse(value);
        if (!parsed?.success) {
          this.log.warn({ key }, "ignored an unreadable intent-store entry");
          continue;
        }
        if (key.startsWith("deployment.")) deployments.push(parsed.data as DeploymentIntent);
        else models.push(parsed.data as ModelRecord);
      }
      this.initialized ||= initialized;
      return { deployments, models, initialized };
    });
  }

  async apply(writes: readonly IntentWrite[]): Promise<void> {
    if (writes.length === 0) return;
    const kv = await this.bucket();
    await guarded("write the intent store", async () => {
      for (const w of writes) {
        switch (w.op) {
          case "put_deployment":
            await kv.put(deploymentKey(w.deployment.deployment_id), JSON.stringify(w.deployment));
            break;
          case "delete_deployment":
            await kv.delete(deploymentKey(w.deployment_id));
            break;
          case "put_model":
            await kv.put(modelKey(w.model.model_id), JSON.stringify(w.model));
            break;
          case "delete_model":
            await kv.delete(modelKey(w.model_id));
            break;
        }
      }
      if (!this.initialized) {
        await kv.put(INITIALIZED, "1");
        this.initialized = true;
      }
    });
  }
}

/** Runs a JetStream call; any failure is `no_quorum` naming what could not be done. */
async function guarded<T>(what: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof ServiceError) throw e;
    const code = (e as { code?: string }).code;
    const why =
      code === "503" ? "no JetStream server answered" : e instanceof Error ? e.message : String(e);
    throw new ServiceError(
      "no_quorum",
      `could not ${what}: ${why} (the intent store needs a quorum of its replicas; on the minority side of a partition, or with too few nodes up, intent cannot change; retry)`,
      { cause: e },
    );
  }
}
