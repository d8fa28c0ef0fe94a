// Detection: from a repo id to the spec's detection result, using only metadata and Range reads.
// Resolves the base model through model-card `base_model` links, then counts MTP tensors there.
import type { Logger } from "@ic/log";
import type { HubClient, HubModel } from "./hub-client.ts";
import type { RepoId } from "./model-ref.ts";
import { repoName } from "./model-ref.ts";
import { readConfig, readShardHeaders, readWeightIndex, shardsFor } from "./remote-safetensors.ts";
import {
  ALLOWED_QUANTS,
  assistantCandidates,
  cardAssistantModel,
  cardBaseModel,
  detectQuant,
  detectTier,
  findMtpKeys,
  FULL_PRECISION_QUANTS,
  sidecarRepoFor,
} from "./rules.ts";

/** The detection result exactly as the spec names its fields. */
export interface DetectionResult {
  readonly model_id: string;
  readonly base_model: string;
  readonly quant: string;
  readonly tier: string;
  readonly mtp_key_count: number;
  readonly mtp_keys: readonly string[];
  readonly sidecar_repo: string | null;
  readonly can_publish: boolean;
  readonly assistant_model_repo: string | null;
  readonly can_publish_assistant: boolean;
}

export interface Detection {
  readonly result: DetectionResult;
  readonly modelId: RepoId;
  /** What the model card says the model was made from (first `base_model`), if anything. */
  readonly sourceModel: RepoId | null;
  /** The resolved full-precision base, null when none could be resolved. */
  readonly baseModel: RepoId | null;
}

export interface DetectorOptions {
  readonly hub: HubClient;
  readonly log: Logger;
  /** How many `base_model` links are followed at most; 4 by default. */
  readonly maxBaseHops?: number;
}

/**
 * The model asked about is not on the hub (or not visible with the token). The spec's error table
 * answers it as "any other failure": inPhase turns it into `hub_failed` (500) naming the phase and
 * the hub.
 */
export class ModelNotFoundError extends Error {
  constructor(readonly id: RepoId) {
    super(`the model hub has no model ${id} (or it is not visible with the configured token)`);
    this.name = "ModelNotFoundError";
  }
}

export class Detector {
  private readonly log: Logger;

  constructor(private readonly o: DetectorOptions) {
    this.log = o.log.child({ component: "detector" });
  }

  /** The hub detection reads from; callers name their phase in its failures (`inPhase`). */
  get hub(): HubClient {
    return this.o.hub;
  }

  private async quantOf(m: HubModel, signal?: AbortSignal): Promise<string> {
    const config = m.files.includes("config.json")
      ? await readConfig(this.o.hub, m.id, signal)
      : null;
    return detectQuant({ name: repoName(m.id), files: m.files, config });
  }

  /** Follows base_model links from `start` while the model is a quantized derivative. */
  private async resolveBase(start: RepoId, signal?: AbortSignal): Promise<HubModel | null> {
    let current: RepoId = start;
    const seen = new Set<string>();
    for (let hop = 0; hop < (this.o.maxBaseHops ?? 4); hop++) {
      seen.add(current.toLowerCase());
      const m = await this.o.hub.modelInfo(current, signal);
      if (!m) {
        this.log.warn({ base: current }, "declared base model is not on the hub");
        return null;
      }
      const next = cardBaseModel(m.cardData);
      if (!next || seen.has(next.toLowerCase())) return m;
      if (FULL_PRECISION_QUANTS.includes(await this.quantOf(m, signal))) return m;
      current = next;
    }
    return this.o.hub.modelInfo(current, signal);
  }

  async detect(ref: RepoId, signal?: AbortSignal): Promise<Detection> {
    const hub = this.o.hub;
    const info = await hub.modelInfo(ref, signal);
    if (!info) throw new ModelNotFoundError(ref);
    const quant = await this.quantOf(info, signal);
    const tier = detectTier(repoName(info.id), info.cardData);

    const declared = cardBaseModel(info.cardData);
    const sourceModel =
      declared && declared.toLowerCase() !== info.id.toLowerCase() ? declared : null;
    let base: HubModel | null;
    if (sourceModel) base = await this.resolveBase(sourceModel, signal);
    else base = info.files.some((f) => f.endsWith(".safetensors")) ? info : null;

    let mtpKeys: string[] = [];
    if (base) {
      const index = await readWeightIndex(hub, base.id, base.files, signal);
      if (index) {
        const config = await readConfig(hub, base.id, signal);
        const candidates = findMtpKeys(index.weightMap.keys(), config);
        const headers = await readShardHeaders(
          hub,
          base.id,
          { index, files: shardsFor(index, candidates) },
          signal,
        );
        mtpKeys = candidates.filter((k) => headers.some((h) => h.header.tensors.has(k)));
      }
    }

    const assistantDeclared = cardAssistantModel(info.cardData);
    let assistant: RepoId | null = null;
    for (const candidate of assistantDeclared
      ? [assistantDeclared]
      : assistantCandidates(info.id, base?.id ?? null)) {
      const m = await hub.modelInfo(candidate, signal);
      if (m) {
        assistant = m.id;
        break;
      }
    }

    const sidecar = base && mtpKeys.length > 0 ? sidecarRepoFor(info.id, base.id) : null;
    const result: DetectionResult = {
      model_id: info.id,
      base_model: base?.id ?? "",
      quant,
      tier,
      mtp_key_count: mtpKeys.length,
      mtp_keys: mtpKeys,
      sidecar_repo: sidecar,
      can_publish: sidecar !== null,
      assistant_model_repo: assistant,
      can_publish_assistant: assistant !== null && ALLOWED_QUANTS.includes(quant),
    };
    this.log.info(
      { model: info.id, base: result.base_model, quant, tier, mtp: mtpKeys.length, assistant },
      "detected",
    );
    return { result, modelId: info.id, sourceModel, baseModel: base?.id ?? null };
  }
}
