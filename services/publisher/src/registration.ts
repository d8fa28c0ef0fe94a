// POST /api/register: detect, build the catalog entry, collision-check and append it.
// Mirrors the command-line catalog add; nothing is uploaded.
import type { Catalog, NewCatalogEntry } from "./catalog.ts";
import type { Detection, Detector } from "./detector.ts";
import { PublisherError } from "./errors.ts";
import { inPhase } from "./hub-client.ts";
import type { RepoId } from "./model-ref.ts";
import { ALLOWED_QUANTS, catalogKey, outputName } from "./rules.ts";

/** The registration result exactly as the spec names its fields. */
export interface RegistrationResult {
  readonly ok: boolean;
  readonly key: string;
  readonly assistant_model_repo: string;
  readonly catalog_path: string;
  readonly entry_block: string;
}

/** The entry registration writes for a detection. Pure. */
export function buildEntry(d: Detection): NewCatalogEntry {
  if (!d.baseModel) {
    // Not bad input (the spec's 400 rows are a bad url and a refused quant): "any other failure".
    throw new PublisherError(
      "not_registrable",
      `could not resolve a full-precision base model for ${d.modelId} (no usable base_model in its model card)`,
    );
  }
  return {
    key: catalogKey(d.modelId),
    hf_repo: d.modelId,
    output_name: outputName(d.modelId),
    source_model: d.sourceModel ?? d.baseModel,
    base_model: d.baseModel,
    quant: d.result.quant,
    tier: d.result.tier,
    sidecar_repo: d.result.sidecar_repo,
    assistant_model_repo: d.result.assistant_model_repo,
  };
}

export async function register(
  ref: RepoId,
  deps: { detector: Detector; catalog: Catalog },
): Promise<RegistrationResult> {
  const detection = await inPhase(deps.detector.hub, `registering ${ref}`, () =>
    deps.detector.detect(ref),
  );
  if (!ALLOWED_QUANTS.includes(detection.result.quant)) {
    throw new PublisherError(
      "bad_request",
      `detected quant "${detection.result.quant}" of ${detection.modelId} is not accepted for registration (allowed: ${ALLOWED_QUANTS.join(", ")})`,
    );
  }
  const entry = buildEntry(detection);
  const block = await deps.catalog.append(entry);
  return {
    ok: true,
    key: entry.key,
    assistant_model_repo: entry.assistant_model_repo ?? "",
    catalog_path: deps.catalog.path,
    entry_block: block,
  };
}
